/* actors.c — actors: resources, the worker subprocess and its output, the
 * call queue, and every way an actor dies. */
#define _GNU_SOURCE
#include "actors.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "conn.h"
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

static void spec_free(beam_node_t *node, beam_actor_spec_t *spec)
{
    free(spec->class_data);
    free(spec->args);
    beam_refs_unpin(node, &spec->refs);
    beam_strv_free(spec->env);
    beam_strv_free(spec->sys_path);
    free(spec->python);
    free(spec->cwd);
    memset(spec, 0, sizeof *spec);
}

static void call_free(beam_call_t *call)
{
    free(call->method);
    beam_buf_unref(call->args_buf);
    beam_refs_free(&call->refs);
    free(call);
}

/* Completes call's return object with status/data (owned) and frees call. */
static void call_complete(beam_node_t *node, beam_call_t *call, int status, beam_buf_t *buf,
                          const char *data, size_t len, beam_refs_t *refs)
{
    beam_object_t *o = beam_object_find(node, call->obj);
    if (o)
        beam_object_complete_buf(node, o, status, buf, data, len, refs);
    else {
        beam_buf_unref(buf);
        if (refs)
            beam_refs_free(refs);
    }
    beam_refs_unpin(node, &call->refs);
    call_free(call);
}

static void call_fail(beam_node_t *node, beam_call_t *call, int status, const char *message)
{
    beam_object_t *o = beam_object_find(node, call->obj);
    if (o)
        beam_object_fail(node, o, status, message);
    beam_refs_unpin(node, &call->refs);
    call_free(call);
}

static void send_call(beam_actor_t *a, beam_call_t *call)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "call", 3);
    beam_pack_key(&enc.pk, "obj");
    beam_pack_bin(&enc.pk, call->obj, BEAM_OBJECT_ID_SIZE);
    beam_pack_key(&enc.pk, "method");
    beam_pack_str(&enc.pk, call->method);
    beam_pack_key(&enc.pk, "args");
    beam_pack_bin_buf(&enc, call->args_buf, call->args, call->args_len);
    beam_enc_end(&enc, 0);
    beam_conn_send_enc(a->worker, &enc);
    /* the worker has them now; keep only what completion needs */
    beam_buf_unref(call->args_buf);
    call->args_buf = NULL;
    call->args = NULL;
    call->args_len = 0;
    call->next = NULL;
    if (a->sent_tail)
        a->sent_tail->next = call;
    else
        a->sent = call;
    a->sent_tail = call;
}

static void flush_queue(beam_actor_t *a)
{
    while (a->queue && a->worker && !a->worker->closing) {
        beam_call_t *call = a->queue;
        a->queue = call->next;
        if (!a->queue)
            a->queue_tail = NULL;
        send_call(a, call);
    }
}

static int idle(const beam_actor_t *a)
{
    return !a->queue && !a->sent;
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

/* The CPU part of a's grant, as a grant of its own. */
static void cpu_grant(const beam_actor_t *a, beam_grant_t *g)
{
    memset(g, 0, sizeof *g);
    for (size_t i = 0; i < a->grant.taken.n; i++)
        if (strcmp(a->grant.taken.name[i], "CPU") == 0)
            beam_demand_add(&g->taken, "CPU", a->grant.taken.amount[i]);
}

void beam_actor_set_blocked(beam_node_t *node, beam_actor_t *a, int blocked)
{
    beam_grant_t g;
    if (blocked) {
        if (a->blocked++ > 0 || !a->has_grant)
            return;
        cpu_grant(a, &g);
        if (g.taken.n == 0)
            return;
        beam_pool_give(a->pool, &g);
        a->blocked_cpu = g.taken.amount[0];
        beam_actors_schedule(node);
        return;
    }
    if (a->blocked == 0 || --a->blocked > 0 || a->blocked_cpu == 0)
        return;
    cpu_grant(a, &g);
    if (a->has_grant && g.taken.n > 0)
        beam_pool_retake(a->pool, &g);
    a->blocked_cpu = 0;
}

/* Gives the actor's resources back where they came from. */
static void release_grant(beam_node_t *node, beam_actor_t *a)
{
    if (!a->has_grant)
        return;
    if (a->blocked_cpu) { /* that part is back already */
        beam_grant_t g;
        cpu_grant(a, &g);
        beam_pool_retake(a->pool, &g);
        a->blocked_cpu = 0;
    }
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

/* The shape a task's worker is started with; workers of one shape (and one
 * job) are interchangeable. NULL when out of memory. */
static char *pool_key_of(const beam_actor_spec_t *spec)
{
    size_t n = strlen(spec->python) + strlen(spec->cwd ? spec->cwd : "") + 8;
    for (char **p = spec->env; p && *p; p++)
        n += strlen(*p) + 1;
    for (char **p = spec->sys_path; p && *p; p++)
        n += strlen(*p) + 1;
    char *key = malloc(n);
    if (!key)
        return NULL;
    size_t at = (size_t)snprintf(key, n, "%s\x1f%s\x1f%d", spec->python, spec->cwd ? spec->cwd : "",
                                 spec->noset_cuda);
    for (char **p = spec->env; p && *p; p++)
        at += (size_t)snprintf(key + at, n - at, "\x1e%s", *p);
    for (char **p = spec->sys_path; p && *p; p++)
        at += (size_t)snprintf(key + at, n - at, "\x1d%s", *p);
    return key;
}

/* Who inherits what a task's worker created: the task's owner, skipping
 * owners that are tasks too (Ray's task workers outlive their task, so an
 * actor made in a task lives while a handle to it does). NULL if none. */
static beam_conn_t *task_heir(beam_conn_t *c)
{
    beam_conn_t *heir = NULL;
    beam_actor_t *t = c->actor;
    for (int hops = 0; t && t->task && hops < 64; hops++) {
        heir = t->owner;
        t = heir && heir->role == BEAM_ROLE_WORKER ? heir->actor : NULL;
    }
    return heir && !heir->closing ? heir : NULL;
}

static void hand_down(beam_node_t *node, beam_conn_t *from, beam_conn_t *heir)
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
    if (!a->task || !a->pool_key || a->exiting || a->state != BEAM_ACTOR_ALIVE || !a->worker || a->worker->closing ||
        !a->member || !a->member->local || a->grant.ngpus > 0 || !idle(a))
        return -1;
    size_t n = 0;
    beam_actor_t *x, *tmp;
    HASH_ITER(hh, node->actors, x, tmp)
        n += x->pooled;
    if (n >= TASK_POOL_MAX)
        return -1;
    beam_conn_t *heir = task_heir(a->worker);
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
        if (x->pooled && x->running && x->worker && !x->worker->closing && x->member == b->member &&
            x->job == b->job && strcmp(x->pool_key, b->pool_key) == 0)
            return x;
    return NULL;
}

/* Gives b the pooled worker of p: b starts as if it had spawned it. */
static int pool_take(beam_node_t *node, beam_actor_t *p, beam_actor_t *b)
{
    if (beam_proc_rebind(node, p->id, b->id, b->class_name) < 0)
        return -1;
    beam_conn_t *c = p->worker;
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
static beam_conn_t *output_sink(beam_actor_t *a)
{
    beam_conn_t *c = a->owner;
    for (int hops = 0; c && c->role == BEAM_ROLE_WORKER && c->actor && hops < 64; hops++)
        c = c->actor->owner;
    return c;
}

void beam_actor_worker_output(beam_node_t *node, const char *actor, int stream, const char *text, size_t len)
{
    beam_actor_t *a = beam_actor_find(node, actor);
    beam_conn_t *sink = a ? output_sink(a) : NULL;
    if (!sink || sink->closing || sink->no_logs)
        return;
    beam_conn_send_log(sink, stream, text, len);
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

/* Takes the demand from pool, if the CPU the actor needs only to be placed
 * is free there too. */
static int take_placed(beam_pool_t *pool, beam_actor_t *a)
{
    if (a->spec.place_cpu > 0) {
        const beam_res_entry_t *cpu = beam_pool_find(pool, "CPU");
        int64_t held = 0;
        for (size_t i = 0; i < a->demand.n; i++)
            if (strcmp(a->demand.name[i], "CPU") == 0)
                held = a->demand.amount[i];
        if (!cpu || cpu->avail < held + a->spec.place_cpu)
            return -EAGAIN;
    }
    return beam_pool_take(pool, &a->demand, &a->grant);
}

/* NodeAffinitySchedulingStrategy, as Ray's NodeAffinitySchedulingPolicy:
 * the target node when it is alive and could ever fit the demand (waiting
 * for room there, soft or not); otherwise anywhere if soft, or never.
 * Returns 0 (placed), -EAGAIN, -ENOENT (not the target: place it anywhere)
 * or -EHOSTUNREACH (hard, and the node is gone or too small). */
static int take_affinity(beam_node_t *node, beam_actor_t *a)
{
    beam_member_t *m = beam_cluster_find_id(node, a->affinity);
    if (m && m->alive && beam_pool_feasible(m->pool, &a->demand) == 0) {
        if (take_placed(m->pool, a) < 0)
            return -EAGAIN;
        a->pool = m->pool;
        a->member = m;
        return 0;
    }
    return a->affinity_soft ? -ENOENT : -EHOSTUNREACH;
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

/* Places the actor on any live node with room: the owner's first, as Ray
 * prefers the local node; with SPREAD, the node holding the fewest SPREAD
 * actors first (ties in member order), so they are dealt round the nodes as
 * by Ray's round-robin spread policy. Returns 0 or -EAGAIN. */
static int take_anywhere(beam_node_t *node, beam_actor_t *a)
{
    beam_member_t *home = a->owner && a->owner->member ? a->owner->member : node->self;
    beam_member_t *alive[BEAM_MAX_MEMBERS];
    size_t rank[BEAM_MAX_MEMBERS];
    size_t n = beam_cluster_alive(node, alive, BEAM_MAX_MEMBERS);
    for (size_t i = 0; i < n; i++)
        rank[i] = a->spread ? spread_load(node, alive[i]) : alive[i] != home;
    for (size_t i = 1; i < n; i++) /* a stable sort by rank: n is small */
        for (size_t j = i; j > 0 && rank[j - 1] > rank[j]; j--) {
            beam_member_t *m = alive[j];
            size_t r = rank[j];
            alive[j] = alive[j - 1];
            rank[j] = rank[j - 1];
            alive[j - 1] = m;
            rank[j - 1] = r;
        }
    for (size_t i = 0; i < n; i++)
        if (take_placed(alive[i]->pool, a) == 0) {
            a->pool = alive[i]->pool;
            a->member = alive[i];
            return 0;
        }
    return -EAGAIN;
}

/* Takes the actor's demand from its pool: the node's, or its placement
 * group's bundle (any bundle with room when the index is -1). Returns 0,
 * -EAGAIN (not now), -ECANCELED (its group is gone) or -EHOSTUNREACH (its
 * hard node affinity can never be met). */
static int take_resources(beam_node_t *node, beam_actor_t *a)
{
    if (!a->pg && a->has_affinity) {
        int rc = take_affinity(node, a);
        if (rc != -ENOENT)
            return rc;
    }
    if (!a->pg)
        return take_anywhere(node, a);
    if (a->pg->state == BEAM_PG_REMOVED)
        return -ECANCELED;
    if (a->pg->state != BEAM_PG_CREATED && a->pg->state != BEAM_PG_RESCHEDULING)
        return -EAGAIN;
    for (uint32_t i = 0; i < a->pg->nbundles; i++) {
        if (a->bundle_index >= 0 && (uint32_t)a->bundle_index != i)
            continue;
        beam_pool_t *pool = &a->pg->bundles[i].pool;
        if (!a->pg->bundles[i].placed || !a->pg->bundles[i].member || !a->pg->bundles[i].member->alive)
            continue;
        if (take_placed(pool, a) == 0) {
            a->pool = pool;
            a->member = a->pg->bundles[i].member;
            a->bundle = (int)i;
            a->pg->users++;
            return 0;
        }
    }
    return -EAGAIN;
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
            actor_die(node, a, "The actor is dead because its placement group was removed.");
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

int beam_actor_create(beam_node_t *node, beam_conn_t *owner, const char *id, char *class_name,
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
        a->pool_key = pool_key_of(spec); /* NULL (never pooled) if out of memory */
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
    if (beam_conn_hold(&owner->held_actors, id, BEAM_ACTOR_ID_SIZE) == 1)
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
    beam_call_t *call = calloc(1, sizeof *call);
    if (!call) {
        free(method);
        beam_buf_unref(args_buf);
        beam_refs_free(refs);
        beam_object_t *o = beam_object_find(node, obj);
        if (o)
            beam_object_fail(node, o, BEAM_OBJ_LOST, "beamd ran out of memory queueing the call");
        return;
    }
    memcpy(call->obj, obj, BEAM_OBJECT_ID_SIZE);
    call->method = method;
    call->args = (char *)args;
    call->args_len = args_len;
    call->args_buf = args_buf;
    call->refs = *refs;
    memset(refs, 0, sizeof *refs);
    beam_refs_pin(node, &call->refs);
    if (a->state == BEAM_ACTOR_DEAD) {
        call_fail(node, call, a->death_status, a->death);
        return;
    }
    if (a->state == BEAM_ACTOR_ALIVE && a->worker) {
        send_call(a, call);
        return;
    }
    if (a->queue_tail)
        a->queue_tail->next = call;
    else
        a->queue = call;
    a->queue_tail = call;
}

int beam_actor_task_done(beam_node_t *node, beam_actor_t *a, const char *obj, int status,
                         beam_buf_t *buf, const char *data, size_t len, beam_refs_t *refs)
{
    beam_call_t *prev = NULL, *call = a->sent;
    while (call && memcmp(call->obj, obj, BEAM_OBJECT_ID_SIZE) != 0) {
        prev = call;
        call = call->next;
    }
    if (!call) {
        /* a late result (the actor was killed meanwhile): dropped */
        beam_buf_unref(buf);
        if (refs)
            beam_refs_free(refs);
        return -ENOENT;
    }
    if (prev)
        prev->next = call->next;
    else
        a->sent = call->next;
    if (a->sent_tail == call)
        a->sent_tail = prev;
    call_complete(node, call, status, buf, data, len, refs);
    if (a->stop_when_idle && idle(a) && a->state != BEAM_ACTOR_DEAD && pool_retire(node, a) < 0)
        actor_die(node, a, "The actor is dead because all references to the actor were removed.");
    maybe_free(node, a); /* a pooled worker taken at once leaves a freeable record */
    return 0;
}

/* --- the worker's connection --- */

void beam_actor_send_init(beam_node_t *node, beam_actor_t *a)
{
    beam_enc_t enc;
    size_t npath = 0;
    for (char **p = a->spec.sys_path; p && *p; p++)
        npath++;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "init", 14);
    beam_pack_key(&enc.pk, "actor");
    beam_pack_bin(&enc.pk, a->id, BEAM_ACTOR_ID_SIZE);
    beam_pack_key(&enc.pk, "class_name");
    beam_pack_str(&enc.pk, a->class_name);
    beam_pack_key(&enc.pk, "class_data");
    beam_pack_bin(&enc.pk, a->spec.class_data, a->spec.class_len);
    beam_pack_key(&enc.pk, "args");
    beam_pack_bin(&enc.pk, a->spec.args, a->spec.args_len);
    beam_pack_key(&enc.pk, "sys_path");
    msgpack_pack_array(&enc.pk, npath);
    for (char **p = a->spec.sys_path; p && *p; p++)
        beam_pack_str(&enc.pk, *p);
    beam_pack_key(&enc.pk, "cwd");
    beam_pack_str(&enc.pk, a->spec.cwd ? a->spec.cwd : "");
    beam_pack_key(&enc.pk, "gpu_ids");
    msgpack_pack_array(&enc.pk, a->grant.ngpus);
    for (int i = 0; i < a->grant.ngpus; i++)
        beam_pack_str(&enc.pk, a->pool->gpu_ids[a->grant.gpu_index[i]]);
    beam_pack_key(&enc.pk, "name");
    beam_pack_str(&enc.pk, a->name ? a->name : "");
    beam_pack_key(&enc.pk, "placement_group");
    if (a->pg)
        beam_pack_bin(&enc.pk, a->pg->id, BEAM_PG_ID_SIZE);
    else
        msgpack_pack_nil(&enc.pk);
    beam_pack_key(&enc.pk, "bundle_index");
    msgpack_pack_int(&enc.pk, a->bundle);
    beam_pack_key(&enc.pk, "capture_child_tasks");
    if (a->capture_child_tasks)
        msgpack_pack_true(&enc.pk);
    else
        msgpack_pack_false(&enc.pk);
    beam_pack_key(&enc.pk, "namespace");
    beam_pack_str(&enc.pk, a->job_namespace ? a->job_namespace : "");
    beam_pack_key(&enc.pk, "max_concurrency");
    msgpack_pack_int(&enc.pk, a->max_concurrency);
    /* what it holds, for get_runtime_context().get_assigned_resources() */
    beam_pack_key(&enc.pk, "resources");
    msgpack_pack_map(&enc.pk, a->grant.taken.n);
    for (size_t i = 0; i < a->grant.taken.n; i++) {
        beam_pack_str(&enc.pk, a->grant.taken.name[i]);
        msgpack_pack_double(&enc.pk, (double)a->grant.taken.amount[i] / BEAM_RES_UNIT);
    }
    beam_enc_end(&enc, 0);
    beam_conn_send_enc(a->worker, &enc);
}

int beam_actor_attach_worker(beam_node_t *node, beam_actor_t *a, beam_conn_t *c, const char *token)
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
        spec_free(node, &a->spec);
        flush_queue(a);
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
    while (a->sent) {
        beam_call_t *call = a->sent;
        a->sent = call->next;
        call_fail(node, call, a->death_status, a->death ? a->death : message);
    }
    a->sent_tail = NULL;
    while (a->queue) {
        beam_call_t *call = a->queue;
        a->queue = call->next;
        call_fail(node, call, a->death_status, a->death ? a->death : message);
    }
    a->queue_tail = NULL;
    spec_free(node, &a->spec);
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

/* Kills every actor marked doomed, one at a time: a death can free other
 * records (through the refs its results carried), so the walk restarts. */
static void kill_doomed(beam_node_t *node, const char *message)
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

void beam_actors_conn_gone(beam_node_t *node, beam_conn_t *c)
{
    beam_actor_t *a, *tmp;
    /* A task's worker hands what it created to the task's owner, up to a
     * live one: Ray's task workers outlive their task, so an actor made in
     * a task lives on while a handle to it does. */
    beam_conn_t *heir = c->actor && c->actor->task ? task_heir(c) : NULL;
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
    kill_doomed(node, "The actor is dead because its owner has died (the driver or actor that "
                      "created it disconnected).");
}

void beam_actors_pg_removed(beam_node_t *node, beam_pg_t *pg)
{
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp)
        if (a->pg == pg)
            a->doomed = a->state != BEAM_ACTOR_DEAD;
    kill_doomed(node, "The actor is dead because its placement group was removed.");
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
        actor_die(node, victim, "The actor is dead because its placement group was removed.");
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
    kill_doomed(node, message);
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
        victim->running = 0;
        release_grant(node, victim);
        maybe_free(node, victim);
    }
}

void beam_actors_stop_all(beam_node_t *node)
{
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp)
        a->doomed = a->state != BEAM_ACTOR_DEAD;
    kill_doomed(node, "The actor is dead because beamd is shutting down.");
}

void beam_actors_destroy(beam_node_t *node)
{
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp) {
        HASH_DEL(node->actors, a);
        spec_free(node, &a->spec);
        free(a->pool_key);
        free(a->class_name);
        free(a->name);
        free(a->namespace);
        free(a->job_namespace);
        free(a->death);
        free(a);
    }
}
