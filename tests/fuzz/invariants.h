/* invariants.h — the checks the daemon fuzz targets (fuzz_dispatch.c,
 * fuzz_link.c) make, written once: CHECK aborts with the failed condition
 * (libFuzzer then keeps the input), and fuzz_check_tables_empty is what
 * must hold of a node's tables once every client and peer has hung up. */
#ifndef BEAM_FUZZ_INVARIANTS_H
#define BEAM_FUZZ_INVARIANTS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "actors.h"
#include "node.h"
#include "objects.h"
#include "placement.h"
#include "procs.h"

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* How many references to id (an actor's when kind is 1, else an object's)
 * the values in the object table carry. */
static inline uint32_t fuzz_inbound(beam_node_t *node, const char *id, int kind)
{
    uint32_t n = 0;
    for (beam_object_t *o = node->objects; o; o = o->hh.next) {
        uint32_t count = kind ? o->refs.nactors : o->refs.nobjs;
        size_t size = kind ? BEAM_ACTOR_ID_SIZE : BEAM_OBJECT_ID_SIZE;
        const char *ids = kind ? o->refs.actors : o->refs.objs;
        for (uint32_t i = 0; i < count; i++)
            n += memcmp(ids + (size_t)i * size, id, size) == 0;
    }
    return n;
}

/* After every client hung up nothing may be left, but for detached groups
 * and objects (and actors) that only values in a reference cycle keep: a
 * put may name its own id among its refs, or two calls' results each other,
 * and beamd counts references without collecting cycles. Anything else a
 * connection held, or a pin nothing accounts for, is a leak; and with no
 * group left, the node's own resources are all back. */
static inline void fuzz_check_tables_empty(beam_node_t *node)
{
    CHECK(node->sessions == NULL);
    for (beam_object_t *o = node->objects; o; o = o->hh.next) {
        CHECK(o->holders == 0);
        CHECK(o->pins > 0 && o->pins == fuzz_inbound(node, o->id, 0));
    }
    for (beam_actor_t *a = beam_actors_first(node); a; a = beam_actors_next(a)) {
        beam_actor_info_t i;
        beam_actor_info(a, &i);
        CHECK(i.state == BEAM_ACTOR_DEAD && !i.running && i.holders == 0);
        CHECK(i.pins > 0 && i.pins == fuzz_inbound(node, beam_actor_id(a), 1));
    }
    CHECK(node->pending == NULL);
    CHECK(beam_procs_running(node) == 0);
    int detached = 0;
    for (beam_pg_t *pg = node->pgs; pg; pg = pg->hh.next)
        detached += pg->state != BEAM_PG_REMOVED;
    if (!detached)
        for (size_t i = 0; i < node->pool.nres; i++)
            CHECK(node->pool.res[i].avail == node->pool.res[i].total);
}

#endif
