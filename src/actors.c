/* actors.c — actors: the table, scheduling (where through fit.c), the worker
 * subprocess and its output, the task worker pool, calls (queued in
 * calls.c), and an actor's death (the sweeps by cause are in deaths.c). */
#define _GNU_SOURCE
#include "actors.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "fit.h"
#include "log.h"
#include "placement.h"
#include "procs.h"

static void maybe_free(beam_node_t *node, beam_actor_t *a);
static void actor_die(beam_node_t *node, beam_actor_t *a, const char *message);
static int pool_retire(beam_node_t *node, beam_actor_t *a);

beam_actor_t *beam_actor_find(beam_node_t *node, const char *id)
{
    beam_actor_t *a = NULL;
    HASH_FIND(hh, node->actors, id, BEAM_ACTOR_ID_SIZE, a);
    return a;
}

beam_actor_t *beam_actor_find_name(beam_node_t *node, const char *ns, const char *name)
{
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp)
        if (a->name && a->state != BEAM_ACTOR_DEAD && strcmp(a->name, name) == 0 &&
            strcmp(a->namespace ? a->namespace : "", ns) == 0)
            return a;
    return NULL;
}

const char *beam_actor_state_name(int state)
{
    switch (state) {
    case BEAM_ACTOR_PENDING: return "PENDING_CREATION";
    case BEAM_ACTOR_STARTING: return "STARTING";
    case BEAM_ACTOR_ALIVE: return "ALIVE";
    default: return "DEAD";
    }
}

static int idle(const beam_actor_t *a)
{
    return beam_callq_idle(&a->calls);
}

/* No handle and no carrier names the actor: it ends once its queue drains
 * (a pending one at once: Ray cancels it; a detached actor does not end:
 * only ray.kill ends it). Returns 1 if it died here, and then the record may
 * be freed already (actor_die ends in maybe_free). */
static int check_unreferenced(beam_node_t *node, beam_actor_t *a)
{
    if (a->state == BEAM_ACTOR_DEAD || a->detached || a->holders > 0 || a->pins > 0)
        return 0;
    a->stop_when_idle = 1;
    if (!idle(a) || pool_retire(node, a) == 0)
        return 0;
    actor_die(node, a, "The actor is dead because all references to the actor were removed.");
    return 1;
}

void beam_actor_pin(beam_node_t *node, beam_actor_t *a)
{
    a->pins++;
}

void beam_actor_unpin(beam_node_t *node, beam_actor_t *a)
{
    if (a->pins > 0)
        a->pins--;
    if (!check_unreferenced(node, a))
        maybe_free(node, a);
}

void beam_actor_hold(beam_node_t *node, beam_actor_t *a)
{
    a->holders++;
}

void beam_actor_unhold(beam_node_t *node, beam_actor_t *a)
{
    if (a->holders > 0)
        a->holders--;
    if (!check_unreferenced(node, a))
        maybe_free(node, a);
}

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

/* Gives the actor's resources back where they came from. */
static void release_grant(beam_node_t *node, beam_actor_t *a)
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

/* --- the task worker pool --- */

/* Idle task workers kept per node (Ray keeps idle workers for reuse too). */
#define TASK_POOL_MAX 16

/* Who inherits what a task's worker created: the task's owner, skipping
 * owners that are tasks too (Ray's task workers outlive their task, so an
 * actor made in a task lives while a handle to it does). NULL if none. */
static beam_port_t *task_heir(beam_port_t *c)
{
    beam_port_t *heir = NULL;
    beam_actor_t *t = c->actor;
    for (int hops = 0; t && t->task && hops < 64; hops++) {
        heir = t->owner;
        t = heir && heir->role == BEAM_ROLE_WORKER ? heir->actor : NULL;
    }
    return heir && !beam_port_closing(heir) ? heir : NULL;
}

static void hand_down(beam_node_t *node, beam_port_t *from, beam_port_t *heir)
{
    beam_actor_t *x, *tmp;
    HASH_ITER(hh, node->actors, x, tmp)
        if (x->owner == from && x->state != BEAM_ACTOR_DEAD)
            x->owner = heir;
}

/* The task is done and unreferenced: its worker goes idle into the pool
 * instead of being killed, if it can be reused (local, no GPUs, room in
 * the pool). Returns 0 if pooled, -1 if the actor must die instead. */
static int pool_retire(beam_node_t *node, beam_actor_t *a)
{
    if (!a->task || !a->pool_key || a->exiting || a->state != BEAM_ACTOR_ALIVE || !a->worker || beam_port_closing(a->worker) ||
        !a->member || !a->member->local || a->grant.ngpus > 0 || !idle(a))
        return -1;
    size_t n = 0;
    beam_actor_t *x, *tmp;
    HASH_ITER(hh, node->actors, x, tmp)
        n += x->pooled;
    if (n >= TASK_POOL_MAX)
        return -1;
    beam_port_t *heir = task_heir(a->worker);
    if (heir)
        hand_down(node, a->worker, heir);
    a->state = BEAM_ACTOR_DEAD;
    a->pooled = 1;
    free(a->death);
    a->death = strdup("The task is done: its worker went back to the pool.");
    release_grant(node, a);
    beam_log(BEAM_LOG_DEBUG, "actor %s (%s): its worker (pid %ld) is idle in the pool", a->hex, a->class_name,
             a->pid);
    a->retiring = 1; /* a pending task may take the worker now: the caller frees a */
    beam_actors_schedule(node);
    a->retiring = 0;
    return 0;
}

/* An idle pooled worker of b's shape, job and node, or NULL. */
static beam_actor_t *pool_find(beam_node_t *node, const beam_actor_t *b)
{
    if (!b->task || !b->pool_key || !b->member || !b->member->local || b->grant.ngpus > 0)
        return NULL;
    beam_actor_t *x, *tmp;
    HASH_ITER(hh, node->actors, x, tmp)
        if (x->pooled && x->running && x->worker && !beam_port_closing(x->worker) && x->member == b->member &&
            x->job == b->job && strcmp(x->pool_key, b->pool_key) == 0)
            return x;
    return NULL;
}

/* Gives b the pooled worker of p: b starts as if it had spawned it. */
static int pool_take(beam_node_t *node, beam_actor_t *p, beam_actor_t *b)
{
    if (beam_proc_rebind(node, p->id, b->id, b->class_name) < 0)
        return -1;
    beam_port_t *c = p->worker;
    b->running = 1;
    b->pid = p->pid;
    b->state = BEAM_ACTOR_STARTING;
    b->worker = c;
    c->actor = b;
    p->pooled = 0;
    p->running = 0;
    p->worker = NULL;
    if (!p->retiring)
        maybe_free(node, p);
    beam_actor_send_init(node, b);
    return 0;
}

/* The job's driver is gone: its idle pooled workers go too. */
static void pool_drop_job(beam_node_t *node, uint32_t job)
{
    beam_actor_t *x, *tmp;
    HASH_ITER(hh, node->actors, x, tmp)
        if (x->pooled && x->job == job && x->running)
            beam_cluster_kill(node, x->member, x->id);
}

/* --- the worker process and its output --- */

/* Where an actor's output goes: its owner, or, when the owner is itself an
 * actor's worker, that actor's owner, up to the driver (as Ray prints a
 * nested actor's lines once, on the driver). */
static beam_port_t *output_sink(beam_actor_t *a)
{
    beam_port_t *c = a->owner;
    for (int hops = 0; c && c->role == BEAM_ROLE_WORKER && c->actor && hops < 64; hops++)
        c = c->actor->owner;
    return c;
}

void beam_actor_worker_output(beam_node_t *node, const char *actor, int stream, const char *text, size_t len)
{
    beam_actor_t *a = beam_actor_find(node, actor);
    beam_port_t *sink = a ? output_sink(a) : NULL;
    if (!sink || beam_port_closing(sink) || sink->no_logs)
        return;
    beam_port_send_log(sink, stream, text, len);
}

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
    if (a->state != BEAM_ACTOR_DEAD) {
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
        actor_die(node, a, msg); /* gives the grant back and may free the record */
    } else {
        release_grant(node, a);
        maybe_free(node, a);
    }
    beam_actors_schedule(node);
}

/* Starts the worker where the actor was placed. */
static int spawn_worker(beam_node_t *node, beam_actor_t *a)
{
    beam_actor_t *idle_worker = pool_find(node, a);
    if (idle_worker && pool_take(node, idle_worker, a) == 0)
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
    a->state = BEAM_ACTOR_STARTING;
    return 0;
}

/* --- scheduling --- */

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
            actor_die(node, a, BEAM_PG_REMOVED_DEATH);
            p = &node->pending; /* the death may have changed the list */
            continue;
        }
        if (rc == -EHOSTUNREACH) {
            /* Ray's text, raised as ActorUnschedulableError */
            a->death_status = BEAM_OBJ_UNSCHEDULABLE;
            actor_die(node, a, "The node specified via NodeAffinitySchedulingStrategy doesn't exist any "
                               "more or is infeasible, and soft=False was specified.");
            p = &node->pending;
            continue;
        }
        a->has_grant = 1;
        beam_grant_gpu_list(a->pool, &a->grant, a->gpus, sizeof a->gpus);
        rc = spawn_worker(node, a);
        if (rc < 0) {
            char msg[300];
            snprintf(msg, sizeof msg, "The actor died because its worker could not be started: %s",
                     uv_strerror(rc));
            release_grant(node, a);
            actor_die(node, a, msg);
            p = &node->pending;
        }
    }
}

int beam_actor_create(beam_node_t *node, beam_port_t *owner, const char *id, char *class_name,
                      beam_actor_options_t *opts, beam_actor_spec_t *spec, const beam_demand_t *demand,
                      beam_pg_t *pg, int bundle_index, int capture_child_tasks)
{
    int named = opts->name && *opts->name;
    if (beam_actor_find(node, id) ||
        (named && beam_actor_find_name(node, opts->namespace ? opts->namespace : "", opts->name)))
        return -EEXIST;
    beam_actor_t *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    char token[16];
    if (beam_random(token, sizeof token) < 0) {
        free(a);
        return -EIO;
    }
    beam_id_hex(token, sizeof token, a->token);
    memcpy(a->id, id, BEAM_ACTOR_ID_SIZE);
    beam_id_hex(id, BEAM_ACTOR_ID_SIZE, a->hex);
    a->class_name = class_name;
    if (named) {
        a->name = opts->name;
        a->namespace = opts->namespace;
    } else {
        free(opts->name);
        free(opts->namespace);
    }
    a->job_namespace = opts->job_namespace;
    opts->name = opts->namespace = opts->job_namespace = NULL;
    a->detached = opts->detached;
    a->max_concurrency = opts->max_concurrency > 0 ? opts->max_concurrency : 1;
    a->spread = opts->spread;
    a->has_affinity = opts->has_affinity;
    a->affinity_soft = opts->affinity_soft;
    memcpy(a->affinity, opts->affinity, BEAM_NODE_ID_SIZE);
    a->task = opts->task;
    a->job = owner->job;
    if (a->task && !pg && !opts->has_affinity)
        a->pool_key = beam_spec_pool_key(spec); /* NULL (never pooled) if out of memory */
    a->death_status = BEAM_OBJ_ACTOR_DIED;
    a->spec = *spec;
    memset(spec, 0, sizeof *spec);
    a->demand = *demand;
    a->pg = pg;
    a->bundle_index = bundle_index;
    a->bundle = -1;
    a->capture_child_tasks = capture_child_tasks;
    a->owner = owner;
    a->owner_pid = (uint32_t)owner->pid;
    a->state = BEAM_ACTOR_PENDING;
    HASH_ADD(hh, node->actors, id, BEAM_ACTOR_ID_SIZE, a);
    beam_refs_pin(node, &a->spec.refs);
    if (beam_port_hold(&owner->held_actors, id, BEAM_ACTOR_ID_SIZE) == 1)
        a->holders++;
    if (!pg && beam_pool_feasible(node->self->pool, demand) < 0 && beam_cluster_count(node) == 1)
        beam_log(BEAM_LOG_WARN, "actor %s (%s) asks for more than this node has; it stays pending",
                 a->hex, a->class_name);
    beam_actor_t **tail = &node->pending;
    while (*tail)
        tail = &(*tail)->pending_next;
    *tail = a;
    beam_actors_schedule(node);
    return 0;
}

/* --- calls --- */

void beam_actor_submit(beam_node_t *node, beam_actor_t *a, const char *obj, char *method,
                       beam_buf_t *args_buf, const char *args, size_t args_len, beam_refs_t *refs)
{
    beam_call_t *call = beam_call_new(node, obj, method, args_buf, args, args_len, refs);
    if (!call)
        return;
    if (a->state == BEAM_ACTOR_DEAD)
        beam_call_fail(node, call, a->death_status, a->death);
    else if (a->state == BEAM_ACTOR_ALIVE && a->worker)
        beam_callq_send(&a->calls, a->worker, call);
    else
        beam_callq_push(&a->calls, call);
}

int beam_actor_task_done(beam_node_t *node, beam_actor_t *a, const char *obj, int status,
                         beam_buf_t *buf, const char *data, size_t len, beam_refs_t *refs)
{
    beam_call_t *call = beam_callq_take_sent(&a->calls, obj);
    if (!call) {
        /* a late result (the actor was killed meanwhile): dropped */
        beam_buf_unref(buf);
        if (refs)
            beam_refs_free(refs);
        return -ENOENT;
    }
    beam_call_complete(node, call, status, buf, data, len, refs);
    if (a->stop_when_idle && idle(a) && a->state != BEAM_ACTOR_DEAD && pool_retire(node, a) < 0)
        actor_die(node, a, "The actor is dead because all references to the actor were removed.");
    maybe_free(node, a); /* a pooled worker taken at once leaves a freeable record */
    return 0;
}

/* --- the worker's connection --- */

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

void beam_actor_ready(beam_node_t *node, beam_actor_t *a, int ok, const char *error, size_t error_len)
{
    if (a->state != BEAM_ACTOR_STARTING)
        return;
    if (ok) {
        a->state = BEAM_ACTOR_ALIVE;
        beam_spec_free(node, &a->spec);
        beam_callq_flush(&a->calls, a->worker);
        return;
    }
    size_t n = error_len + 200;
    char *msg = malloc(n);
    if (msg)
        snprintf(msg, n, "The actor died because of an error raised in its creation task, %.*s",
                 (int)error_len, error);
    a->init_failed = 1;
    actor_die(node, a, msg ? msg : "The actor died because of an error raised in its creation task.");
    free(msg);
}

/* --- death --- */

static void actor_die(beam_node_t *node, beam_actor_t *a, const char *message)
{
    if (a->state == BEAM_ACTOR_DEAD)
        return;
    int was_pending = a->state == BEAM_ACTOR_PENDING;
    a->state = BEAM_ACTOR_DEAD;
    free(a->death);
    a->death = strdup(message);
    beam_log(BEAM_LOG_INFO, "actor %s (%s) is dead: %s", a->hex, a->class_name, message);
    if (was_pending)
        pending_remove(node, a);
    /* a failed call's refs may carry the last pin on a itself (a call that
     * passes its own actor's handle): hold one so that failing the queue
     * cannot free the record under this walk */
    a->pins++;
    /* fail everything it was asked, in order: sent calls first */
    beam_callq_fail_all(node, &a->calls, a->death_status, a->death ? a->death : message,
                        beam_actor_local_open(a)); /* local: sentcalls.h */
    beam_spec_free(node, &a->spec);
    if (a->running)
        beam_cluster_kill(node, a->member, a->id);
    if (!a->running && a->has_grant) {
        release_grant(node, a);
        beam_actors_schedule(node);
    }
    a->pins--;
    maybe_free(node, a);
}

void beam_actor_kill(beam_node_t *node, beam_actor_t *a, const char *message)
{
    actor_die(node, a, message);
}

static void maybe_free(beam_node_t *node, beam_actor_t *a)
{
    if (a->state != BEAM_ACTOR_DEAD || a->holders || a->pins || a->running || a->worker)
        return;
    HASH_DEL(node->actors, a);
    free(a->pool_key);
    free(a->class_name);
    free(a->name);
    free(a->namespace);
    free(a->job_namespace);
    free(a->death);
    free(a);
}

void beam_actors_kill_doomed(beam_node_t *node, const char *message)
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
        actor_die(node, victim, message);
    }
}

void beam_actors_conn_gone(beam_node_t *node, beam_port_t *c)
{
    beam_actor_t *a, *tmp;
    /* A task's worker hands what it created to the task's owner, up to a
     * live one: Ray's task workers outlive their task, so an actor made in
     * a task lives on while a handle to it does. */
    beam_port_t *heir = c->actor && c->actor->task ? task_heir(c) : NULL;
    if (c->role == BEAM_ROLE_DRIVER)
        pool_drop_job(node, c->job);
    if (c->actor) {
        a = c->actor;
        c->actor = NULL;
        a->worker = NULL;
        /* a death ends in maybe_free: free here only one that was dead already */
        if (a->state == BEAM_ACTOR_DEAD)
            maybe_free(node, a);
        else
            actor_die(node, a,
                      "The actor is dead because its worker process has died. Worker exit type: "
                      "SYSTEM_ERROR Worker exit detail: the worker's connection to beamd closed.");
    }
    HASH_ITER(hh, node->actors, a, tmp)
        if (a->owner == c) {
            a->owner = heir;
            a->doomed = !heir && a->state != BEAM_ACTOR_DEAD && !a->detached;
        }
    beam_actors_kill_doomed(node, "The actor is dead because its owner has died (the driver or actor that "
                      "created it disconnected).");
}

void beam_actor_worker_lost(beam_node_t *node, beam_actor_t *a)
{
    a->running = 0;
    release_grant(node, a);
    maybe_free(node, a);
}

void beam_actors_destroy(beam_node_t *node)
{
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp) {
        HASH_DEL(node->actors, a);
        beam_callq_destroy(&a->calls);
        beam_spec_free(node, &a->spec);
        free(a->pool_key);
        free(a->class_name);
        free(a->name);
        free(a->namespace);
        free(a->job_namespace);
        free(a->death);
        free(a);
    }
}

beam_port_t *beam_actors_job_driver(beam_port_t *p)
{
    for (int hops = 0; p && p->role == BEAM_ROLE_WORKER && hops < 64; hops++)
        p = p->actor ? p->actor->owner : NULL;
    return p;
}

void beam_actor_pin_id(beam_node_t *node, const char *id, int pin)
{
    beam_actor_t *a = beam_actor_find(node, id);
    if (a && pin)
        beam_actor_pin(node, a);
    else if (a)
        beam_actor_unpin(node, a);
}

int beam_actors_member_in_use(beam_node_t *node, const beam_member_t *m)
{
    for (beam_actor_t *a = node->actors; a; a = a->hh.next)
        if (a->member == m)
            return 1;
    for (beam_pg_t *pg = node->pgs; pg; pg = pg->hh.next)
        for (uint32_t i = 0; i < pg->nbundles; i++)
            if (pg->bundles[i].member == m)
                return 1;
    return 0;
}
