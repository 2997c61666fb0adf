/* deaths.c — sweeps of the actor table when something around it goes. */
#include "deaths.h"

#include "cluster.h"
#include "placement.h"
#include "sentcalls.h"

void beam_actors_pg_removed(beam_node_t *node, beam_pg_t *pg)
{
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp)
        if (a->pg == pg)
            a->doomed = a->state != BEAM_ACTOR_DEAD;
    beam_actors_kill_doomed(node, BEAM_PG_REMOVED_DEATH);
}

void beam_actors_pg_forget(beam_node_t *node, beam_pg_t *pg)
{
    /* (none should be left alive; they die one at a time, without the
     * doomed marks a sweep further up the stack may be using) */
    for (;;) {
        beam_actor_t *a, *tmp, *victim = NULL;
        HASH_ITER(hh, node->actors, a, tmp)
            if (a->pg == pg && a->state != BEAM_ACTOR_DEAD) {
                victim = a;
                break;
            }
        if (!victim)
            break;
        beam_actor_kill(node, victim, BEAM_PG_REMOVED_DEATH);
    }
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp)
        if (a->pg == pg)
            a->pg = NULL;
}

void beam_actors_member_lost(beam_node_t *node, beam_member_t *m, const char *message)
{
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp)
        if (a->member == m && a->state != BEAM_ACTOR_DEAD)
            a->doomed = 1;
    beam_actors_kill_doomed(node, message);
    /* their workers went with the node: nothing will report their exit. A
     * release can free other records, so the walk restarts each time. */
    for (;;) {
        beam_actor_t *victim = NULL;
        HASH_ITER(hh, node->actors, a, tmp)
            if (a->member == m && a->running) {
                victim = a;
                break;
            }
        if (!victim)
            return;
        beam_actor_close_local(node, victim); /* local: its member took no more results */
        beam_actor_worker_lost(node, victim);
    }
}

void beam_actors_stop_all(beam_node_t *node)
{
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp)
        a->doomed = a->state != BEAM_ACTOR_DEAD;
    beam_actors_kill_doomed(node, "The actor is dead because beamd is shutting down.");
}
