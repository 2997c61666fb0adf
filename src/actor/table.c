/* table.c — the actor table: finding and creating actors, who keeps one
 * (holders, pins, its owner) and when it ends unreferenced, its calls (queued
 * in calls.c), where its output goes, reading it (beam_actor_info), and
 * freeing records. The lifecycle's transitions are in lifecycle.c. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "log.h"
#include "placement.h"

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
        if (a->name && !beam__actor_dead(a) && strcmp(a->name, name) == 0 &&
            strcmp(a->namespace ? a->namespace : "", ns) == 0)
            return a;
    return NULL;
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
    a->max_restarts = opts->max_restarts;
    a->max_task_retries = opts->max_task_retries;
    a->calls.keep_args = opts->max_restarts != 0 && opts->max_task_retries != 0; /* a call may be sent again */
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
    beam__actor_wait(node, a);
    return 0;
}

/* --- who keeps it --- */

/* No handle and no carrier names the actor: it ends once its queue drains
 * (a pending one at once: Ray cancels it; a detached actor does not end:
 * only ray.kill ends it). Returns 1 if it died here, and then the record may
 * be freed already (a death ends in maybe_free). */
static int check_unreferenced(beam_node_t *node, beam_actor_t *a)
{
    if (beam__actor_dead(a) || a->detached || a->holders > 0 || a->pins > 0)
        return 0;
    a->stop_when_idle = 1;
    if (!beam__actor_idle(a) || beam__actor_pool_retire(node, a) == 0)
        return 0;
    beam__actor_die(node, a, "The actor is dead because all references to the actor were removed.");
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
        beam__actor_maybe_free(node, a);
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
        beam__actor_maybe_free(node, a);
}

void beam_actor_pin_id(beam_node_t *node, const char *id, int pin)
{
    beam_actor_t *a = beam_actor_find(node, id);
    if (a && pin)
        beam_actor_pin(node, a);
    else if (a)
        beam_actor_unpin(node, a);
}

/* Who inherits what a task's worker created: the task's owner, skipping
 * owners that are tasks too (Ray's task workers outlive their task, so an
 * actor made in a task lives while a handle to it does). NULL if none. */
beam_port_t *beam__actor_task_heir(beam_port_t *c)
{
    beam_port_t *heir = NULL;
    beam_actor_t *t = c->actor;
    for (int hops = 0; t && t->task && hops < 64; hops++) {
        heir = t->owner;
        t = heir && heir->role == BEAM_ROLE_WORKER ? heir->actor : NULL;
    }
    return heir && !beam_port_closing(heir) ? heir : NULL;
}

void beam__actors_hand_down(beam_node_t *node, beam_port_t *from, beam_port_t *heir)
{
    beam_actor_t *x, *tmp;
    HASH_ITER(hh, node->actors, x, tmp)
        if (x->owner == from && !beam__actor_dead(x))
            x->owner = heir;
}

beam_port_t *beam_actors_job_driver(beam_port_t *p)
{
    for (int hops = 0; p && p->role == BEAM_ROLE_WORKER && hops < 64; hops++)
        p = p->actor ? p->actor->owner : NULL;
    return p;
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

/* --- calls --- */

void beam_actor_submit(beam_node_t *node, beam_actor_t *a, const char *obj, char *method,
                       beam_buf_t *args_buf, const char *args, size_t args_len, beam_refs_t *refs)
{
    beam_call_t *call = beam_call_new(node, obj, method, args_buf, args, args_len, refs);
    if (!call)
        return;
    char text[128];
    if (beam__actor_dead(a))
        beam_call_fail(node, call, a->death_status, a->death);
    else if (beam__actor_restarting(a) && a->max_task_retries == 0) /* Ray fails it at once */
        beam_call_fail(node, call, BEAM_OBJ_ACTOR_UNAVAILABLE,
                       beam__actor_unavailable(a, "IOError: The actor is restarting.", text, sizeof text));
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
    if (a->stop_when_idle && beam__actor_idle(a) && !beam__actor_dead(a) && beam__actor_pool_retire(node, a) < 0)
        beam__actor_die(node, a, "The actor is dead because all references to the actor were removed.");
    beam__actor_maybe_free(node, a); /* a pooled worker taken at once leaves a freeable record */
    return 0;
}

/* --- its output --- */

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

/* --- reading an actor --- */

const char *beam_actor_id(const beam_actor_t *a)
{
    return a->id;
}

const char *beam_actor_class_name(const beam_actor_t *a)
{
    return a->class_name;
}

int beam_actor_is_dead(const beam_actor_t *a)
{
    return beam__actor_dead(a);
}

beam_member_t *beam_actor_member(const beam_actor_t *a)
{
    return a->member;
}

void beam_actor_info(const beam_actor_t *a, beam_actor_info_t *out)
{
    *out = (beam_actor_info_t){
        .hex = a->hex,
        .class_name = a->class_name,
        .name = a->name ? a->name : "",
        .namespace = a->namespace ? a->namespace : "",
        .detached = a->detached,
        .state = a->state,
        .pid = a->running ? a->pid : 0,
        .running = a->running,
        .attached = a->worker != NULL,
        .member = a->member,
        .pg = a->pg,
        .pool = a->has_grant ? a->pool : NULL,
        .grant = a->has_grant ? &a->grant : NULL,
        .queued = beam_calls_count(a->calls.queue),
        .sent = beam_calls_count(a->calls.sent),
        .holders = a->holders,
        .pins = a->pins,
        .restarts = a->restarts,
        .death = a->death ? a->death : "",
    };
}

beam_actor_t *beam_actors_first(beam_node_t *node)
{
    return node->actors;
}

beam_actor_t *beam_actors_next(beam_actor_t *a)
{
    return a->hh.next;
}

size_t beam_actors_count(const beam_node_t *node)
{
    return HASH_COUNT(node->actors);
}

/* --- freeing --- */

static void actor_free(beam_actor_t *a)
{
    free(a->pool_key);
    free(a->class_name);
    free(a->name);
    free(a->namespace);
    free(a->job_namespace);
    free(a->death);
    free(a);
}

void beam__actor_maybe_free(beam_node_t *node, beam_actor_t *a)
{
    if (!beam__actor_dead(a) || a->holders || a->pins || a->running || a->worker)
        return;
    HASH_DEL(node->actors, a);
    actor_free(a);
}

void beam_actors_destroy(beam_node_t *node)
{
    beam_actor_t *a, *tmp;
    HASH_ITER(hh, node->actors, a, tmp) {
        HASH_DEL(node->actors, a);
        beam_callq_destroy(&a->calls);
        beam_spec_free(node, &a->spec);
        actor_free(a);
    }
}
