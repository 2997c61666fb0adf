/* requests.c — what is asked of the actor table: creating an actor, who
 * keeps one (holders, pins, its owner) and when it ends unreferenced (to
 * the pool or its death), its calls (queued in calls.c) and where its
 * output goes. These drive the state machine (lifecycle.c); the records
 * themselves are table.c's. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "log.h"
#include "placement.h"

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
    beam__actor_die(node, a, BEAM_ACTOR_UNREFERENCED);
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
        beam__actor_die(node, a, BEAM_ACTOR_UNREFERENCED);
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
