/* lifecycle.c — an actor's life as a state machine: the table of its
 * transitions, and one function for each: placing it (resources taken, its
 * worker started through its member's operations), its worker's hello and
 * `actor_ready`, its death, its restart (Ray's max_restarts), and what its
 * worker's exit does. Lending a blocked task's CPU back goes with the
 * resources it holds. */
#define _GNU_SOURCE
#include "internal.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "fit.h"
#include "log.h"
#include "placement.h"

/* The transitions, each from the states it may start in (docs/DESIGN.md,
 * "One actor's life"). */
#define FROM(s) (1u << (s))
static const struct {
    const char *name;
    unsigned from;
    beam_actor_state_t to;
} transitions[BEAM_ACTOR_NTRANSITIONS] = {
    [BEAM_ACTOR_PLACE] = {"place", FROM(BEAM_ACTOR_PENDING), BEAM_ACTOR_STARTING},
    [BEAM_ACTOR_READY] = {"ready", FROM(BEAM_ACTOR_STARTING), BEAM_ACTOR_ALIVE},
    [BEAM_ACTOR_DIE] = {"die",
                        FROM(BEAM_ACTOR_PENDING) | FROM(BEAM_ACTOR_STARTING) | FROM(BEAM_ACTOR_ALIVE) |
                            FROM(BEAM_ACTOR_RESTARTING),
                        BEAM_ACTOR_DEAD},
    [BEAM_ACTOR_RESTART] = {"restart", FROM(BEAM_ACTOR_STARTING) | FROM(BEAM_ACTOR_ALIVE), BEAM_ACTOR_RESTARTING},
    [BEAM_ACTOR_RESCHEDULE] = {"reschedule", FROM(BEAM_ACTOR_RESTARTING), BEAM_ACTOR_PENDING},
    [BEAM_ACTOR_RETIRE] = {"retire", FROM(BEAM_ACTOR_ALIVE), BEAM_ACTOR_POOLED},
    [BEAM_ACTOR_LEAVE] = {"leave", FROM(BEAM_ACTOR_POOLED), BEAM_ACTOR_DEAD},
};

void beam__actor_move(beam_actor_t *a, beam__actor_transition_t t)
{
    assert(transitions[t].from & FROM(a->state));
    if (!(transitions[t].from & FROM(a->state))) {
        beam_log(BEAM_LOG_ERROR, "actor %s: no transition '%s' from %s", a->hex, transitions[t].name,
                 beam_actor_state_name(a->state));
        return;
    }
    a->state = transitions[t].to;
}

const char *beam_actor_state_name(beam_actor_state_t state)
{
    switch (state) {
    case BEAM_ACTOR_PENDING: return "PENDING_CREATION";
    case BEAM_ACTOR_STARTING: return "STARTING";
    case BEAM_ACTOR_ALIVE: return "ALIVE";
    case BEAM_ACTOR_RESTARTING: return "RESTARTING";
    default: return "DEAD";
    }
}

const char *beam_actor_ray_state(const beam_actor_t *a)
{
    return beam__actor_restarting(a) ? "RESTARTING" : beam_actor_state_name(a->state);
}

/* It may restart once more (max_restarts -1: without end). */
static int restarts_left(const beam_actor_t *a)
{
    return a->max_restarts < 0 || a->restarts < (uint32_t)a->max_restarts;
}

/* --- resources --- */

void beam_actor_set_blocked(beam_node_t *node, beam_actor_t *a, int blocked)
{
    if (blocked) {
        if (a->blocked++ > 0 || !a->has_grant)
            return;
        a->blocked_cpu = beam_fit_lend_cpu(a->pool, &a->grant);
        if (a->blocked_cpu)
            beam_actors_schedule(node);
        return;
    }
    if (a->blocked == 0 || --a->blocked > 0 || a->blocked_cpu == 0)
        return;
    if (a->has_grant)
        beam_fit_retake_cpu(a->pool, &a->grant);
    a->blocked_cpu = 0;
}

void beam__actor_release_grant(beam_node_t *node, beam_actor_t *a)
{
    if (!a->has_grant)
        return;
    if (a->blocked_cpu) /* that part is back already */
        beam_fit_retake_cpu(a->pool, &a->grant);
    a->blocked_cpu = 0;
    a->blocked = 0;
    beam_pool_give(a->pool, &a->grant);
    a->has_grant = 0;
    a->gpus[0] = '\0';
    if (a->pg)
        beam_pg_user_gone(node, a->pg);
}

/* --- PENDING: waiting for resources --- */

void beam__actor_wait(beam_node_t *node, beam_actor_t *a)
{
    beam_actor_t **tail = &node->pending;
    while (*tail)
        tail = &(*tail)->pending_next;
    *tail = a;
    beam_actors_schedule(node);
}

static void pending_remove(beam_node_t *node, beam_actor_t *a)
{
    for (beam_actor_t **p = &node->pending; *p; p = &(*p)->pending_next)
        if (*p == a) {
            *p = a->pending_next;
            a->pending_next = NULL;
            return;
        }
}

/* How many SPREAD actors hold resources on member m. */
static size_t spread_load(beam_node_t *node, const beam_member_t *m)
{
    size_t n = 0;
    beam_actor_t *x, *tmp;
    HASH_ITER(hh, node->actors, x, tmp)
        if (x->spread && x->member == m && x->has_grant)
            n++;
    return n;
}

/* Takes the actor's demand from its pool: the node's, or its placement
 * group's bundle (fit.h). */
static int take_resources(beam_node_t *node, beam_actor_t *a)
{
    beam_fit_t f = {
        .demand = &a->demand,
        .place_cpu = a->spec.place_cpu,
        .pg = a->pg,
        .bundle_index = a->bundle_index,
        .has_affinity = a->has_affinity,
        .affinity_soft = a->affinity_soft,
        .affinity = a->affinity,
        .spread = a->spread,
        .home = a->owner && a->owner->member ? a->owner->member : node->self,
        .spread_load = spread_load,
        .grant = &a->grant,
        .bundle = -1,
    };
    int rc = beam_fit_take(node, &f);
    if (rc == 0) {
        a->pool = f.pool;
        a->member = f.member;
        if (f.bundle >= 0)
            a->bundle = f.bundle;
    }
    return rc;
}

/* --- PLACE: PENDING -> STARTING --- */

/* Starts the worker where the actor was placed: an idle pooled one of its
 * shape, else a new process through its member's operations. */
static int place(beam_node_t *node, beam_actor_t *a)
{
    if (beam__actor_pool_start(node, a) == 0)
        return 0;
    beam_spawn_t s = {
        .actor = a->id,
        .class_name = a->class_name,
        .python = a->spec.python,
        .cwd = a->spec.cwd,
        .env = a->spec.env,
        .sys_path = a->spec.sys_path,
        .gpus = a->gpus,
        .token = a->token,
        .noset_cuda = a->spec.noset_cuda,
        .owner_pid = a->owner_pid,
    };
    long pid = 0;
    int rc = beam_cluster_spawn(node, a->member, &s, &pid);
    if (rc < 0)
        return rc;
    a->running = 1;
    a->pid = pid;
    beam__actor_move(a, BEAM_ACTOR_PLACE);
    return 0;
}

void beam_actors_schedule(beam_node_t *node)
{
    beam_pgs_schedule(node);
    beam_actor_t **p = &node->pending;
    while (*p) {
        beam_actor_t *a = *p;
        int rc = take_resources(node, a);
        if (rc == -EAGAIN) {
            p = &a->pending_next;
            continue;
        }
        *p = a->pending_next;
        a->pending_next = NULL;
        if (rc == -ECANCELED) {
            beam__actor_die(node, a, BEAM_PG_REMOVED_DEATH);
            p = &node->pending; /* the death may have changed the list */
            continue;
        }
        if (rc == -EHOSTUNREACH) {
            /* Ray's text, raised as ActorUnschedulableError */
            a->death_status = BEAM_OBJ_UNSCHEDULABLE;
            beam__actor_die(node, a, "The node specified via NodeAffinitySchedulingStrategy doesn't exist any "
                                     "more or is infeasible, and soft=False was specified.");
            p = &node->pending;
            continue;
        }
        a->has_grant = 1;
        beam_grant_gpu_list(a->pool, &a->grant, a->gpus, sizeof a->gpus);
        rc = place(node, a);
        if (rc < 0) {
            char msg[300];
            snprintf(msg, sizeof msg, "The actor died because its worker could not be started: %s",
                     uv_strerror(rc));
            beam__actor_release_grant(node, a);
            beam__actor_die(node, a, msg);
            p = &node->pending;
        }
    }
}

/* --- STARTING: the worker's hello, its init, its actor_ready --- */

void beam_actor_send_init(beam_node_t *node, beam_actor_t *a)
{
    (void)node;
    beam_init_t in = {
        .actor = a->id,
        .class_name = a->class_name,
        .name = a->name,
        .pg = a->pg ? a->pg->id : NULL,
        .bundle = a->bundle,
        .capture_child_tasks = a->capture_child_tasks,
        .job_namespace = a->job_namespace,
        .max_concurrency = a->max_concurrency,
        .pool = a->pool,
        .grant = &a->grant,
    };
    beam_spec_send_init(a->worker, &a->spec, &in);
}

int beam_actor_attach_worker(beam_node_t *node, beam_actor_t *a, beam_port_t *c, const char *token)
{
    if (a->state != BEAM_ACTOR_STARTING || a->worker || strcmp(a->token, token) != 0)
        return -EPERM;
    a->worker = c;
    c->actor = a;
    c->job = a->owner ? a->owner->job : 0;
    return 0;
}

/* READY (STARTING -> ALIVE), or DIE when the constructor raised. */
void beam_actor_ready(beam_node_t *node, beam_actor_t *a, int ok, const char *error, size_t error_len)
{
    if (a->state != BEAM_ACTOR_STARTING)
        return;
    if (ok) {
        beam__actor_move(a, BEAM_ACTOR_READY);
        if (!restarts_left(a)) /* else a restart constructs it again from its spec */
            beam_spec_free(node, &a->spec);
        beam_callq_flush(&a->calls, a->worker);
        return;
    }
    /* its calls fail with a code of their own, not only a message
     * (docs/PROTOCOL.md, "Object results") */
    a->death_status = BEAM_OBJ_ACTOR_INIT_FAILED;
    size_t n = error_len + 200;
    char *msg = malloc(n);
    if (msg)
        snprintf(msg, n, "The actor died because of an error raised in its creation task, %.*s",
                 (int)error_len, error);
    beam__actor_die(node, a, msg ? msg : "The actor died because of an error raised in its creation task.");
    free(msg);
}

/* --- DIE: PENDING, STARTING, ALIVE -> DEAD --- */

void beam__actor_die(beam_node_t *node, beam_actor_t *a, const char *message)
{
    if (beam__actor_dead(a))
        return;
    int was_pending = a->state == BEAM_ACTOR_PENDING;
    beam__actor_move(a, BEAM_ACTOR_DIE);
    free(a->death);
    a->death = strdup(message);
    beam_log(BEAM_LOG_INFO, "actor %s (%s) is dead: %s", a->hex, a->class_name, message);
    if (was_pending)
        pending_remove(node, a);
    /* a failed call's refs may carry the last pin on a itself (a call that
     * passes its own actor's handle): hold one so that failing the queue
     * cannot free the record under this walk */
    a->pins++;
    /* fail everything it was asked, in order: sent calls first; a member's
     * local calls stay open while it may still take results (localcalls.c) */
    beam_callq_fail_all(node, &a->calls, a->death_status, a->death ? a->death : message,
                        beam__actor_local_open(a));
    beam_spec_free(node, &a->spec);
    if (a->running)
        beam_cluster_kill(node, a->member, a->id);
    if (!a->running && a->has_grant) {
        beam__actor_release_grant(node, a);
        beam_actors_schedule(node);
    }
    a->pins--;
    beam__actor_maybe_free(node, a);
}

void beam_actor_kill(beam_node_t *node, beam_actor_t *a, const char *message)
{
    beam__actor_die(node, a, message);
}

/* --- RESTART: STARTING, ALIVE -> RESTARTING; RESCHEDULE: RESTARTING -> PENDING --- */

/* Its worker is gone or going and it has restarts left: each call sent to
 * that worker is sent again to the next while it has retries left
 * (max_task_retries), else fails as Ray fails it (ActorUnavailableError: the
 * actor lives on); a member's open local calls wait for that member
 * (localcalls.c); the queue waits for the new instance. The worker is
 * killed; once it is gone the actor asks for its resources again. */
static void restart(beam_node_t *node, beam_actor_t *a, const char *message)
{
    beam__actor_move(a, BEAM_ACTOR_RESTART);
    a->restarts++;
    beam_log(BEAM_LOG_INFO, "actor %s (%s) restarts (%u so far): %s", a->hex, a->class_name, a->restarts, message);
    char text[768];
    beam__actor_unavailable(a, message, text, sizeof text);
    a->pins++; /* a failed call's refs may carry the last pin on a */
    beam_callq_retry_sent(node, &a->calls, a->max_task_retries, BEAM_OBJ_ACTOR_UNAVAILABLE, text,
                          beam__actor_local_open(a));
    if (a->running)
        beam_cluster_kill(node, a->member, a->id);
    a->pins--;
    beam__actor_maybe_reschedule(node, a);
}

void beam__actor_maybe_reschedule(beam_node_t *node, beam_actor_t *a)
{
    if (a->state != BEAM_ACTOR_RESTARTING || a->running || a->worker)
        return;
    /* what its member ran there and never answered: that member takes no
     * more of the old worker's results now (its exit or end went up) */
    char text[128];
    beam__actor_unavailable(a, "its worker died.", text, sizeof text);
    a->pins++;
    beam_callq_fail_sent(node, &a->calls, BEAM_OBJ_ACTOR_UNAVAILABLE, text);
    a->pins--;
    if (a->state != BEAM_ACTOR_RESTARTING) /* (nothing kills it there; but no restart for a dead one) */
        return;
    if (a->stop_when_idle && beam__actor_idle(a)) { /* no handle and nothing left to run */
        beam__actor_die(node, a, BEAM_ACTOR_UNREFERENCED);
        return;
    }
    beam__actor_release_grant(node, a);
    char token[16];
    if (beam_random(token, sizeof token) == 0) /* the old worker's token opens nothing now */
        beam_id_hex(token, sizeof token, a->token);
    a->local_cut = 0;
    a->exiting = 0; /* (what the old worker said of its own end) */
    a->pid = 0;
    a->member = NULL;
    beam__actor_move(a, BEAM_ACTOR_RESCHEDULE);
    beam__actor_wait(node, a);
}

void beam__actor_worker_died(beam_node_t *node, beam_actor_t *a, const char *message)
{
    if ((a->state == BEAM_ACTOR_STARTING || a->state == BEAM_ACTOR_ALIVE) && restarts_left(a) && !a->exiting) {
        restart(node, a, message);
        return;
    }
    if (a->task) /* Ray's error for a task whose worker died, its retries spent */
        a->death_status = BEAM_OBJ_WORKER_CRASHED;
    beam__actor_die(node, a, message); /* gives the grant back and may free the record */
}

void beam_actor_kill_restart(beam_node_t *node, beam_actor_t *a, const char *message)
{
    if (beam__actor_dead(a))
        return;
    if (!restarts_left(a)) {
        beam__actor_die(node, a, message);
        return;
    }
    if (a->state == BEAM_ACTOR_STARTING || a->state == BEAM_ACTOR_ALIVE)
        restart(node, a, message);
}

/* --- its worker's end --- */

void beam_actor_worker_started(beam_node_t *node, const char *actor, long pid)
{
    beam_actor_t *a = beam_actor_find(node, actor);
    if (a && a->running)
        a->pid = pid;
}

void beam_actor_worker_exited(beam_node_t *node, const char *actor, long pid, int64_t status, int term_signal)
{
    beam_actor_t *a = beam_actor_find(node, actor);
    if (!a || !a->running)
        return;
    a->running = 0;
    if (a->state == BEAM_ACTOR_RESTARTING) {
        beam__actor_maybe_reschedule(node, a);
    } else if (!beam__actor_dead(a) && pid == 0 && status == 127) {
        /* a member could not start it (relay's worker_exit): no restart, which would fail again at once */
        beam__actor_die(node, a, "The actor died because its worker could not be started on its node.");
    } else if (!beam__actor_dead(a)) {
        char msg[512];
        if (term_signal)
            snprintf(msg, sizeof msg,
                     "The actor is dead because its worker process has died. Worker exit type: "
                     "SYSTEM_ERROR Worker exit detail: the worker (pid %ld) was killed by signal %d.",
                     pid, term_signal);
        else
            snprintf(msg, sizeof msg,
                     "The actor is dead because its worker process has died. Worker exit type: %s "
                     "Worker exit detail: the worker (pid %ld) exited with code %lld.",
                     status == 0 ? "INTENDED_USER_EXIT" : "SYSTEM_ERROR", pid, (long long)status);
        beam__actor_worker_died(node, a, msg); /* restarts, or dies: may free the record */
    } else {
        if (a->state == BEAM_ACTOR_POOLED) /* an idle pooled worker exited */
            beam__actor_move(a, BEAM_ACTOR_LEAVE);
        beam__actor_release_grant(node, a);
        beam__actor_maybe_free(node, a);
    }
    beam_actors_schedule(node);
}

void beam__actor_worker_lost(beam_node_t *node, beam_actor_t *a)
{
    a->running = 0;
    if (a->state == BEAM_ACTOR_RESTARTING) {
        beam__actor_maybe_reschedule(node, a);
        return;
    }
    if (a->state == BEAM_ACTOR_POOLED)
        beam__actor_move(a, BEAM_ACTOR_LEAVE);
    beam__actor_release_grant(node, a);
    beam__actor_maybe_free(node, a);
}

void beam_actor_worker_exiting(beam_actor_t *a)
{
    a->exiting = 1; /* an end on purpose (__ray_terminate__, sys.exit()): not restarted */
    free(a->pool_key); /* never pooled */
    a->pool_key = NULL;
}

/* --- the task worker pool (as Ray's worker pool): a task done and
 * unreferenced leaves its worker idle (transition RETIRE), and a new task
 * of the same shape, job and node takes it (the pooled record LEAVEs, the
 * new one is PLACEd) instead of starting a process. Workers are rebound
 * through their member's operations (cluster.h), never procs itself. --- */

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
