/* sweeps.c — the actor table swept by cause, when something around it
 * goes: a client (its actors as owner, its own actor as worker), a
 * placement group removed (or its record freed), a member lost, the daemon
 * stopping. A sweep is a question and an answer (sweep): which actor is
 * concerned, and what is done to it, which leaves it concerned no more. It
 * acts on one actor at a time and asks again from the top: an answer can
 * free other records (a death fails calls whose refs may carry the last pin
 * on another actor), so no pointer is kept across one, and nothing is
 * marked in the records, so a sweep started inside another's answer (a
 * group freed by a death) is safe. */
#include "internal.h"

#include "cluster.h"
#include "placement.h"

typedef struct sweep_s {
    const void *what; /* the client, group or member gone; NULL for the daemon */
    beam_port_t *heir;
    const char *message;
} sweep_t;

typedef int (*sweep_concerns_fn)(const beam_actor_t *a, const sweep_t *s);
typedef void (*sweep_answer_fn)(beam_node_t *node, beam_actor_t *a, const sweep_t *s);

/* Answers each actor concerned, one at a time, until none is; answer must
 * leave an actor unconcerned (dead, or changed), or the sweep never ends. */
static void sweep(beam_node_t *node, sweep_concerns_fn concerns, sweep_answer_fn answer, const sweep_t *s)
{
    for (;;) {
        beam_actor_t *a, *tmp, *found = NULL;
        HASH_ITER(hh, node->actors, a, tmp)
            if (concerns(a, s)) {
                found = a;
                break;
            }
        if (!found)
            return;
        answer(node, found, s);
    }
}

static void die(beam_node_t *node, beam_actor_t *a, const sweep_t *s)
{
    beam__actor_die(node, a, s->message);
}

/* --- a client gone: what it owned passes to its heir, or dies --- */

static int owned_by(const beam_actor_t *a, const sweep_t *s)
{
    return a->owner == s->what;
}

static void inherit(beam_node_t *node, beam_actor_t *a, const sweep_t *s)
{
    a->owner = s->heir;
    if (!s->heir && !beam__actor_dead(a) && !a->detached)
        beam__actor_die(node, a, s->message);
}

void beam_actors_conn_gone(beam_node_t *node, beam_port_t *c)
{
    /* A task's worker hands what it created to the task's owner, up to a
     * live one: Ray's task workers outlive their task, so an actor made in
     * a task lives on while a handle to it does. */
    beam_port_t *heir = c->actor && c->actor->task ? beam__actor_task_heir(c) : NULL;
    if (heir == c) /* (never: c is closing; but the sweep below must end) */
        heir = NULL;
    if (c->role == BEAM_ROLE_DRIVER)
        beam__actors_pool_drop_job(node, c->job);
    if (c->actor) {
        beam_actor_t *a = c->actor;
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
    sweep_t s = {c, heir,
                 "The actor is dead because its owner has died (the driver or actor that created it disconnected)."};
    sweep(node, owned_by, inherit, &s);
}

/* --- a placement group removed, or its record freed --- */

static int alive_in_group(const beam_actor_t *a, const sweep_t *s)
{
    return a->pg == s->what && !beam__actor_dead(a);
}

void beam_actors_pg_removed(beam_node_t *node, beam_pg_t *pg)
{
    sweep_t s = {pg, NULL, BEAM_PG_REMOVED_DEATH};
    sweep(node, alive_in_group, die, &s);
}

void beam_actors_pg_forget(beam_node_t *node, beam_pg_t *pg)
{
    beam_actors_pg_removed(node, pg); /* (none should be left alive) */
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp)
        if (a->pg == pg)
            a->pg = NULL;
}

/* --- a member lost --- */

static int alive_on(const beam_actor_t *a, const sweep_t *s)
{
    return a->member == s->what && !beam__actor_dead(a) && a->state != BEAM_ACTOR_RESTARTING;
}

static void worker_died(beam_node_t *node, beam_actor_t *a, const sweep_t *s)
{
    beam__actor_worker_died(node, a, s->message); /* dead, or RESTARTING */
}

static int running_on(const beam_actor_t *a, const sweep_t *s)
{
    return a->member == s->what && a->running;
}

static void worker_lost(beam_node_t *node, beam_actor_t *a, const sweep_t *s)
{
    beam_actor_close_local(node, a); /* local: its member took no more results */
    beam__actor_worker_lost(node, a);  /* not running now */
}

void beam_actors_member_lost(beam_node_t *node, beam_member_t *m, const char *message)
{
    sweep_t s = {m, NULL, message};
    /* as its worker's death: one with restarts left restarts elsewhere (Ray
     * restarts an actor whose node died), any other dies; one already
     * restarting goes on once its worker is counted gone, below */
    sweep(node, alive_on, worker_died, &s);
    /* their workers went with the node: nothing will report their exit */
    sweep(node, running_on, worker_lost, &s);
}

/* --- the daemon stopping --- */

static int alive(const beam_actor_t *a, const sweep_t *s)
{
    (void)s;
    return !beam__actor_dead(a);
}

void beam_actors_stop_all(beam_node_t *node)
{
    sweep_t s = {NULL, NULL, "The actor is dead because beamd is shutting down."};
    sweep(node, alive, die, &s);
}
