/* notify.h — telling a service manager beamd is ready (sd_notify), behind one
 * function that does nothing when NOTIFY_SOCKET is unset. */
#ifndef BEAM_NOTIFY_H
#define BEAM_NOTIFY_H

/* Sends "READY=1" and a STATUS= line to $NOTIFY_SOCKET if set. Returns 1 if
 * sent, 0 if there is no socket, a negative errno on failure. */
int beam_notify_ready(const char *status);
/* Sends "STOPPING=1". */
int beam_notify_stopping(void);

#endif
