/* table.c — the actor table's records: finding one (by id or name), who
 * inherits what a task's worker made, reading a record (beam_actor_info),
 * and freeing records. The lowest file of the module: the transitions
 * (lifecycle.c) and what is asked of the table (requests.c) use it, and it
 * calls neither. */
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

int beam_actor_is_task(const beam_actor_t *a)
{
    return a->task;
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
