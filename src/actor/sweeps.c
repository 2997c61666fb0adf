/* sweeps.c — the actor table swept by cause, when something around it
 * goes: a client (its actors as owner, its own actor as worker), a
 * placement group removed (or its record freed), a member lost, the daemon
 * stopping. Each marks the actors concerned and kills them one at a time:
 * a death can free other records (through the refs its failed calls
 * carried), so the walk restarts after each. */
#include "internal.h"

#include "cluster.h"
#include "placement.h"

void beam__actors_kill_doomed(beam_node_t *node, const char *message)
{
    for (;;) {
        beam_actor_t *a, *tmp, *victim = NULL;
        HASH_ITER(hh, node->actors, a, tmp)
            if (a->doomed) {
                victim = a;
                break;
            }
        if (!victim)
            return;
        victim->doomed = 0;
        beam__actor_die(node, victim, message);
    }
}

void beam_actors_conn_gone(beam_node_t *node, beam_port_t *c)
{
    beam_actor_t *a, *tmp;
    /* A task's worker hands what it created to the task's owner, up to a
     * live one: Ray's task workers outlive their task, so an actor made in
     * a task lives on while a handle to it does. */
    beam_port_t *heir = c->actor && c->actor->task ? beam__actor_task_heir(c) : NULL;
    if (c->role == BEAM_ROLE_DRIVER)
        beam__actors_pool_drop_job(node, c->job);
    if (c->actor) {
        a = c->actor;
        c->actor = NULL;
        a->worker = NULL;
        if (a->state == BEAM_ACTOR_POOLED) /* an idle pooled worker's connection ended */
            beam__actor_move(a, BEAM_ACTOR_LEAVE);
        /* a death ends in maybe_free: free here only one that was dead already */
        if (beam__actor_dead(a))
            beam__actor_maybe_free(node, a);
        else if (a->state == BEAM_ACTOR_RESTARTING) /* the old worker's end: its restart goes on */
            beam__actor_maybe_reschedule(node, a);
        else
            beam__actor_worker_died(node, a,
                                    "The actor is dead because its worker process has died. Worker exit type: "
                                    "SYSTEM_ERROR Worker exit detail: the worker's connection to beamd closed.");
    }
    HASH_ITER(hh, node->actors, a, tmp)
        if (a->owner == c) {
            a->owner = heir;
            a->doomed = !heir && !beam__actor_dead(a) && !a->detached;
        }
    beam__actors_kill_doomed(node, "The actor is dead because its owner has died (the driver or actor that "
                                   "created it disconnected).");
}

void beam_actors_pg_removed(beam_node_t *node, beam_pg_t *pg)
{
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp)
        if (a->pg == pg)
            a->doomed = !beam__actor_dead(a);
    beam__actors_kill_doomed(node, BEAM_PG_REMOVED_DEATH);
}

void beam_actors_pg_forget(beam_node_t *node, beam_pg_t *pg)
{
    /* (none should be left alive; they die one at a time, without the
     * doomed marks a sweep further up the stack may be using) */
    for (;;) {
        beam_actor_t *a, *tmp, *victim = NULL;
        HASH_ITER(hh, node->actors, a, tmp)
            if (a->pg == pg && !beam__actor_dead(a)) {
                victim = a;
                break;
            }
        if (!victim)
            break;
        beam__actor_die(node, victim, BEAM_PG_REMOVED_DEATH);
    }
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp)
        if (a->pg == pg)
            a->pg = NULL;
}

void beam_actors_member_lost(beam_node_t *node, beam_member_t *m, const char *message)
{
    beam_actor_t *a, *tmp;
    /* as its worker's death: one with restarts left restarts elsewhere (Ray
     * restarts an actor whose node died), any other dies; one already
     * restarting goes on once its worker is counted gone, below */
    HASH_ITER(hh, node->actors, a, tmp)
        if (a->member == m && !beam__actor_dead(a) && a->state != BEAM_ACTOR_RESTARTING)
            a->doomed = 1;
    for (;;) {
        beam_actor_t *victim = NULL;
        HASH_ITER(hh, node->actors, a, tmp)
            if (a->doomed) {
                victim = a;
                break;
            }
        if (!victim)
            break;
        victim->doomed = 0;
        beam__actor_worker_died(node, victim, message);
    }
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
        beam__actor_worker_lost(node, victim);
    }
}

void beam_actors_stop_all(beam_node_t *node)
{
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp)
        a->doomed = !beam__actor_dead(a);
    beam__actors_kill_doomed(node, "The actor is dead because beamd is shutting down.");
}
