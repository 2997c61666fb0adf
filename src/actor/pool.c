/* pool.c — the task worker pool (as Ray's worker pool): a task done and
 * unreferenced leaves its worker idle (transition RETIRE), and a new task
 * of the same shape, job and node takes it (the pooled record LEAVEs, the
 * new one is PLACEd) instead of starting a process. Workers are rebound
 * through their member's operations (cluster.h), never procs itself. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "log.h"

/* Idle task workers kept per node (Ray keeps idle workers for reuse too). */
#define TASK_POOL_MAX 16

/* RETIRE (ALIVE -> POOLED): the task is done and unreferenced; its worker
 * goes idle into the pool instead of being killed, if it can be reused
 * (local, no GPUs, room in the pool). Returns 0 if pooled, -1 if the actor
 * must die instead. a is not freed here, even when a pending task takes its
 * worker at once: the caller frees it. */
int beam__actor_pool_retire(beam_node_t *node, beam_actor_t *a)
{
    if (!a->task || !a->pool_key || a->state != BEAM_ACTOR_ALIVE || !a->worker || beam_port_closing(a->worker) ||
        !a->member || !a->member->local || a->grant.ngpus > 0 || !beam__actor_idle(a))
        return -1;
    size_t n = 0;
    beam_actor_t *x, *tmp;
    HASH_ITER(hh, node->actors, x, tmp)
        n += x->state == BEAM_ACTOR_POOLED;
    if (n >= TASK_POOL_MAX)
        return -1;
    beam_port_t *heir = beam__actor_task_heir(a->worker);
    if (heir)
        beam__actors_hand_down(node, a->worker, heir);
    beam__actor_move(a, BEAM_ACTOR_RETIRE);
    beam_spec_free(node, &a->spec); /* kept for a restart (max_retries): a task done has none */
    free(a->death);
    a->death = strdup("The task is done: its worker went back to the pool.");
    beam__actor_release_grant(node, a);
    beam_log(BEAM_LOG_DEBUG, "actor %s (%s): its worker (pid %ld) is idle in the pool", a->hex, a->class_name,
             a->pid);
    a->pins++; /* a pending task may take the worker now: the caller frees a */
    beam_actors_schedule(node);
    a->pins--;
    return 0;
}

/* An idle pooled worker of b's shape, job and node, or NULL. */
static beam_actor_t *pool_find(beam_node_t *node, const beam_actor_t *b)
{
    if (!b->task || !b->pool_key || !b->member || !b->member->local || b->grant.ngpus > 0)
        return NULL;
    beam_actor_t *x, *tmp;
    HASH_ITER(hh, node->actors, x, tmp)
        if (x->state == BEAM_ACTOR_POOLED && x->running && x->worker && !beam_port_closing(x->worker) &&
            x->member == b->member && x->job == b->job && strcmp(x->pool_key, b->pool_key) == 0)
            return x;
    return NULL;
}

/* PLACE through the pool: b (PENDING, resources taken) gets the idle worker
 * of a pooled record p, which LEAVEs and may be freed. */
int beam__actor_pool_start(beam_node_t *node, beam_actor_t *b)
{
    beam_actor_t *p = pool_find(node, b);
    if (!p || beam_cluster_rebind(node, p->member, p->id, b->id, b->class_name) < 0)
        return -1;
    beam_port_t *c = p->worker;
    b->running = 1;
    b->pid = p->pid;
    b->worker = c;
    c->actor = b;
    beam__actor_move(b, BEAM_ACTOR_PLACE);
    p->running = 0;
    p->worker = NULL;
    beam__actor_move(p, BEAM_ACTOR_LEAVE);
    beam__actor_maybe_free(node, p);
    beam_actor_send_init(node, b);
    return 0;
}

void beam__actors_pool_drop_job(beam_node_t *node, uint32_t job)
{
    beam_actor_t *x, *tmp;
    HASH_ITER(hh, node->actors, x, tmp)
        if (x->state == BEAM_ACTOR_POOLED && x->job == job && x->running)
            beam_cluster_kill(node, x->member, x->id);
}
