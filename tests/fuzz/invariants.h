/* invariants.h — the node and the checks the daemon fuzz targets (fuzz_dispatch.c,
 * fuzz_link.c) share, written once: fuzz_node_init sets up the node they
 * fuzz, fuzz_pump runs its loop until nothing moves, and
 * fuzz_check_tables_empty is what must hold of a node's tables once every
 * client and peer has hung up (CHECK: check.h). */
#ifndef BEAM_FUZZ_INVARIANTS_H
#define BEAM_FUZZ_INVARIANTS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "actors.h"
#include "check.h"
#include "ids.h"
#include "node.h"
#include "objects.h"
#include "placement.h"
#include "procs.h"
#include "resources.h"


/* The node both daemon targets fuzz: a head on loop with small limits (so
 * short inputs reach them), a fixed id and address, and cpus CPUs, memory,
 * its node resource and GPU 0 in its pool; each target adds its own rest. */
static inline void fuzz_node_init(beam_node_t *node, uv_loop_t *loop, double cpus)
{
    loop->data = node;
    node->loop = loop;
    beam_limits_default(&node->limits);
    node->limits.max_frame = 1u << 16;
    node->limits.max_items = 1u << 12;
    node->limits.max_str = 1u << 10;
    node->max_outq = 1u << 18;
    node->soft_outq = 1u << 14;
    node->node_index = 1;
    node->is_head = 1;
    memset(node->node_id, 0x42, sizeof node->node_id);
    beam_id_hex(node->node_id, sizeof node->node_id, node->node_hex);
    snprintf(node->node_ip, sizeof node->node_ip, "127.0.0.1");
    snprintf(node->hostname, sizeof node->hostname, "fuzz");
    node->start_ms = uv_now(loop);
    beam_pool_init(&node->pool);
    CHECK(beam_pool_add(&node->pool, "CPU", beam_res_units(cpus)) == 0);
    CHECK(beam_pool_add(&node->pool, "memory", beam_res_units(1e9)) == 0);
    CHECK(beam_pool_add(&node->pool, "node:127.0.0.1", BEAM_RES_UNIT) == 0);
    CHECK(beam_pool_add_gpu(&node->pool, "0") == 0);
}

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

/* Runs loop (without blocking unless timers is set) and move (which reads
 * the target's peers and sends what they queued, and says whether anything
 * moved) until nothing does. With timers, a timer due within 20 ms (a get
 * or wait with a short timeout) is let fire; a longer one is left, as the
 * loop would otherwise block. */
static inline void fuzz_pump(uv_loop_t *loop, int (*move)(void *), void *target, int timers)
{
    for (int round = 0; round < 10000; round++) {
        int more = uv_run(loop, UV_RUN_NOWAIT);
        int got = move(target);
        if (!got && !more)
            return;
        if (!got && timers) {
            int due = uv_backend_timeout(loop);
            if (due < 0 || due > 20)
                return;
            uv_run(loop, UV_RUN_ONCE);
            continue;
        }
        if (!got && !timers && round > 4)
            return;
    }
}

#endif
