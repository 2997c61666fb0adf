/* release.h — batched releases and the background thread. A release (an
 * object or actor this process no longer holds) is queued and sent with
 * others in one `release` request: when RELEASE_BATCH are queued, with the
 * next request once the oldest is RELEASE_AGE old, or by the background
 * thread when the process sends nothing. The background thread also reads
 * the socket, but only while no request has waited for IDLE (20 ms), so a
 * busy request loop keeps the socket to itself (wire.h) while log lines and
 * pushes still arrive when the program does other things.
 *
 * Returns: 0 or a negative errno. A failed send of releases is not an
 * error: a closed connection releases everything it held anyway. */
#ifndef PYBEAM_RELEASE_H
#define PYBEAM_RELEASE_H

#include "pb_client.h"

/* Queues one release: kind 0 an object id (BEAM_OBJECT_ID_SIZE bytes), 1 an actor id (BEAM_ACTOR_ID_SIZE),
 * len already checked. Sends the batch when it is full. GIL held. 0 or
 * -ENOMEM. */
int pb_release(pb_client_t *c, int kind, const char *id);

/* Sends the queued releases if they are due (force: if there are any).
 * GIL held (released while sending). */
void pb_flush_releases(pb_client_t *c, int force);

/* Starts the background thread. 0 or a negative errno. */
int pb_background_start(pb_client_t *c);

/* Sets closed, wakes and joins the background thread. GIL held (released
 * while joining). */
void pb_background_stop(pb_client_t *c);

#endif
