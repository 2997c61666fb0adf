/* shortcut.h — a member's shortcut for the calls that stay on it (docs/DESIGN.md,
 * "Calls that stay on a member"): which local client is which actor's
 * worker and whether it is ready, the per-(caller, actor) count of submits
 * still on their way through the head, the bounded table of results for
 * local callers, local `get`s answered from it, and `call` written straight
 * to the worker. The head stays the directory: every frame still goes up
 * (a local call as a record of `local_batch`, which the head records as
 * sent without sending it again), except the `get`s answered here.
 *
 * Hooks: beam_shortcut_up is the node's relay_up hook (session.c's relayed
 * clients, wired in hooks.c), the others are called by the member's switch
 * (relay.c); all are no-ops until beam_shortcut_init and on a head. Closes are
 * deferred (link.h), so no hook runs under a send that ends the link. */
#ifndef BEAM_SHORTCUT_H
#define BEAM_SHORTCUT_H

#include <stddef.h>
#include <stdint.h>

#include "localbatch.h"
#include "beam/codec.h"
#include "node.h"
#include "objects.h"

/* A submit's fields, checked (pointers into the parsed frame; refs are
 * copies the caller frees with beam_refs_free). */
typedef struct beam_submit_req_s {
    const char *actor; /* BEAM_ACTOR_ID_SIZE bytes */
    const char *obj;   /* BEAM_OBJECT_ID_SIZE bytes */
    const char *method;
    uint32_t method_len;
    const char *args;
    uint32_t args_len;
    int push; /* the caller wants its result pushed (localresults.h) */
    beam_refs_t refs;
} beam_submit_req_t;

/* At most this many (caller, actor) pairs counted: past it the member
 * stops taking calls the local way (it could no longer prove their order)
 * until it joins again. The results are localresults.h's, with their own bounds. */
#define BEAM_LOCAL_MAX_PAIRS 65536

/* A local call's submit and task_done are held to go up together as the
 * records of one local_batch (localbatch.h, its bounds and timing): any other
 * message for the head sends them first (beam_shortcut_flush), so the head
 * sees the member's messages in the order they were made, and a call
 * answered meanwhile costs the head one wake-up, not two. */

/* Member: starts the shortcut (0 or -ENOMEM). */
int beam_shortcut_init(beam_node_t *node);
/* Frees what is left (daemon exit, after beam_shortcut_reset and the loop). */
void beam_shortcut_destroy(beam_node_t *node);
/* The head is lost (or beamd stops): everything is forgotten; held gets
 * are dropped without an answer (their clients are being closed). */
void beam_shortcut_reset(beam_node_t *node);

/* A frame body from local client vconn on its way to the head (body NULL:
 * the client ended). Returns 1 when it was taken here (a local call, held
 * to go up as a record of local_batch; a get answered or held here), 0 to forward it
 * as it is: what is held has then gone up first. */
int beam_shortcut_up(beam_node_t *node, uint32_t vconn, const char *body, size_t len);
/* A frame body from the head for local client vconn (before delivery). */
void beam_shortcut_down(beam_node_t *node, uint32_t vconn, const char *body, size_t len);
/* Sends the messages held (the member's switch calls it before anything
 * else it sends the head; beam_shortcut_up does for its clients). */
void beam_shortcut_flush(beam_node_t *node);
/* What the member's op tables make of a frame body (up: a local client's
 * request; else a push from the head), with no table state and no action:
 * 1 when it is an op the table reads and its fields pass the op's table;
 * 0 when the table does not read that op (the frame passes untouched);
 * -EINVAL when a field is refused ("field 'F' WHAT" in err: the frame then
 * passes untouched too, for the head to answer); -EPROTO when it does not
 * parse. For tests. */
int beam_shortcut_check(const char *body, size_t len, int up, const beam_limits_t *lim, char *err, size_t errlen);
/* Local client vconn is gone (before client_closed goes up). */
void beam_shortcut_client_closed(beam_node_t *node, uint32_t vconn);
/* The worker of this actor exited (before worker_exit goes up). */
void beam_shortcut_worker_gone(beam_node_t *node, const char *actor);

#endif
