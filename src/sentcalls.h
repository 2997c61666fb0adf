/* sentcalls.h — the head's record of the calls a member ran itself (the
 * submit records of a member's `local_batch`, docs/DESIGN.md "Calls that
 * stay on a member"): recorded as sent, never sent again, so a death fails
 * them as any call.
 * A dead actor's local calls stay open while its member may still take the
 * worker's result (beam_actor_local_open), and fail when it can take no more:
 * the worker's exit, its connection's end, a kill from that member, or the
 * member lost. So a result a local caller got is the one the head holds. */
#ifndef BEAM_SENTCALLS_H
#define BEAM_SENTCALLS_H

#include "actors.h"
#include "node.h"
#include "objects.h"

/* A call on obj that a client on member m already had written to a's worker
 * there: recorded as sent. Takes refs. A call that cannot be the member's
 * (a's worker is not there, or not ready) fails at once. */
void beam_actor_submit_sent(beam_node_t *node, beam_actor_t *a, const struct beam_member_s *m, const char *obj,
                            beam_refs_t *refs);
/* A client on member m kills a: if a's worker is there, that member takes
 * none of a's results after this message (call before the kill). */
void beam_actor_cut_local(beam_node_t *node, beam_actor_t *a, const struct beam_member_s *m);
/* a's member can take no more of its results (call before the actor table
 * hears of it): a dead actor's open local calls fail now. */
void beam_actor_close_local(beam_node_t *node, beam_actor_t *a);

#endif
