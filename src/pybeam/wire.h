/* wire.h — the connection's bytes: writing whole requests, and reading
 * frames by whichever thread owns the read side (leader/follower: a thread
 * waiting for its reply reads the socket itself when no one else is, and
 * hands the socket on once its reply is in). A read lands in the client's
 * stage buffer; each frame is copied out of it once into memory of its own
 * (frame.h), or, when its body is still arriving, read straight into that
 * memory; it is parsed once and filed: a reply into its waiter's slot, a
 * `log` or `error` push to the terminal (termlog.h) unless logs are queued,
 * any other push onto the push queue.
 *
 * Returns: 0 or a negative errno. */
#ifndef PYBEAM_WIRE_H
#define PYBEAM_WIRE_H

#include <sys/uio.h>

#include "pb_client.h"

/* Sets up and frees the read side's buffers. init: 0 or -ENOMEM. */
int pb_wire_init(pb_client_t *c);
void pb_wire_destroy(pb_client_t *c);

/* Writes all of buf under the send lock. Needs no GIL (do not hold it:
 * pb_send releases it around this). 0 or a negative errno. */
int pb_send_nogil(pb_client_t *c, const char *buf, size_t len);
/* The same from a Python thread: releases the GIL while it writes. */
int pb_send(pb_client_t *c, const char *buf, size_t len);
/* Writes the cnt pieces of iov in order, as one frame (scatter/gather),
 * releasing the GIL while it writes; iov is consumed. 0 or a negative errno. */
int pb_sendv(pb_client_t *c, struct iovec *iov, int cnt);

/* Marks the connection gone, keeping the first reason. c->lock held. */
void pb_mark_closed(pb_client_t *c, const char *reason);

/* One non-blocking read by the thread that owns the read side (the caller
 * set c->reading; c->lock not held), then every whole frame in it filed and
 * the waiters woken. 0, or a negative errno once the connection is gone
 * (then closed is set with its reason). */
int pb_read_once(pb_client_t *c);

/* Waits until pred(c, arg) holds or the connection closes (0), the
 * deadline passes (-ETIMEDOUT; deadline 0 is none), or a signal handler
 * raised (-EINTR, with the Python exception set). Called and returns with
 * the GIL held and c->lock not held; the GIL is released while it waits,
 * and the main thread wakes every PB_RCVTIMEO_MS to run Python's signal handlers. */
int pb_wait_for(pb_client_t *c, int (*pred)(pb_client_t *, void *), void *arg, int64_t deadline);

/* A Python timeout (None or seconds) as a monotonic deadline in
 * *deadline (0: none). 0, or -1 with a Python exception set. GIL held. */
int pb_deadline_from(PyObject *timeout, int64_t *deadline);

/* Sets ConnectionError with the reason the connection is gone; NULL. GIL
 * held, c->lock not held. */
PyObject *pb_conn_error(pb_client_t *c);

/* Wakes the background reader out of its poll. */
void pb_kick_background(pb_client_t *c);

#endif
