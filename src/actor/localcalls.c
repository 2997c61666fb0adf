/* localcalls.c — the head's record of the calls its members ran themselves
 * (actors.h, "the calls a member ran itself"): recorded as sent, kept open
 * after a death while the member may still take the worker's results. */
#include "internal.h"

#include "cluster.h"

void beam_actor_submit_sent(beam_node_t *node, beam_actor_t *a, const beam_member_t *m, const char *obj,
                            beam_refs_t *refs)
{
    beam_call_t *call = beam_call_new(node, obj, NULL, NULL, NULL, 0, refs);
    if (!call)
        return;
    call->local = 1;
    node->local_calls++;
    int there = m && a->worker && a->worker->member == m;
    int ending = beam__actor_dead(a) || a->state == BEAM_ACTOR_RESTARTING; /* its worker is going */
    if (there && (a->state == BEAM_ACTOR_ALIVE || (ending && beam__actor_local_open(a))))
        beam_callq_push_sent(&a->calls, call);
    else if (beam__actor_dead(a))
        beam_call_fail(node, call, a->death_status, a->death);
    else if (beam__actor_restarting(a)) {
        char text[128];
        beam_call_fail(node, call, BEAM_OBJ_ACTOR_UNAVAILABLE,
                       beam__actor_unavailable(a, "its worker died.", text, sizeof text));
    } else
        beam_call_fail(node, call, BEAM_OBJ_LOST,
                       "beamd lost this call: a node ran it for an actor whose worker was not ready there");
}

void beam_actor_cut_local(beam_node_t *node, beam_actor_t *a, const beam_member_t *m)
{
    if (m && a->worker && a->worker->member == m) {
        a->local_cut = 1;
        beam_actor_close_local(node, a);
    }
}

void beam_actor_close_local(beam_node_t *node, beam_actor_t *a)
{
    if (!beam__actor_dead(a) || !a->calls.sent)
        return;
    /* a failed call's refs may carry the last pin on a: hold one meanwhile */
    a->pins++;
    beam_callq_fail_all(node, &a->calls, a->death_status,
                        a->death ? a->death : "The actor died unexpectedly before finishing this task.", 0);
    a->pins--;
}
