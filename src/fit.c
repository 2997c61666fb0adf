/* fit.c — choosing the pool an actor's demand is taken from. */
#include "fit.h"

#include <errno.h>
#include <string.h>

/* The CPU f's demand holds. */
static int64_t held_cpu(const beam_fit_t *f)
{
    for (size_t i = 0; i < f->demand->n; i++)
        if (strcmp(f->demand->name[i], "CPU") == 0)
            return f->demand->amount[i];
    return 0;
}

/* Takes the demand from pool, if the CPU the actor needs only to be placed
 * is free there too. */
static int take_placed(beam_pool_t *pool, beam_fit_t *f)
{
    if (f->place_cpu > 0) {
        const beam_res_entry_t *cpu = beam_pool_find(pool, "CPU");
        if (!cpu || cpu->avail < held_cpu(f) + f->place_cpu)
            return -EAGAIN;
    }
    return beam_pool_take(pool, f->demand, f->grant);
}

/* 1 when pool could ever place f: its demand by the pool's totals, and the
 * CPU it needs only to be placed on top of the CPU it holds. */
static int could_place(const beam_pool_t *pool, const beam_fit_t *f)
{
    if (beam_pool_feasible(pool, f->demand) != 0)
        return 0;
    if (f->place_cpu <= 0)
        return 1;
    const beam_res_entry_t *cpu = beam_pool_find(pool, "CPU");
    return cpu && cpu->total >= held_cpu(f) + f->place_cpu;
}

/* NodeAffinitySchedulingStrategy, as Ray's NodeAffinitySchedulingPolicy:
 * the target node when it is alive and could ever place the actor (its
 * demand and its placement CPU: waiting for room there, soft or not);
 * otherwise anywhere if soft, or never.
 * Returns 0 (placed), -EAGAIN, -ENOENT (not the target: place it anywhere)
 * or -EHOSTUNREACH (hard, and the node is gone or too small). */
static int take_affinity(beam_node_t *node, beam_fit_t *f)
{
    beam_member_t *m = beam_cluster_find_id(node, f->affinity);
    if (m && m->alive && could_place(m->pool, f)) {
        if (take_placed(m->pool, f) < 0)
            return -EAGAIN;
        f->pool = m->pool;
        f->member = m;
        return 0;
    }
    return f->affinity_soft ? -ENOENT : -EHOSTUNREACH;
}

/* Places the actor on any live node with room: the owner's first, as Ray
 * prefers the local node; with SPREAD, the node holding the fewest SPREAD
 * actors first (ties in member order), so they are dealt round the nodes as
 * by Ray's round-robin spread policy. Returns 0 or -EAGAIN. */
static int take_anywhere(beam_node_t *node, beam_fit_t *f)
{
    beam_member_t *home = f->home ? f->home : node->self;
    beam_member_t *alive[BEAM_MAX_MEMBERS];
    size_t rank[BEAM_MAX_MEMBERS];
    size_t n = beam_cluster_alive(node, alive, BEAM_MAX_MEMBERS);
    for (size_t i = 0; i < n; i++)
        rank[i] = f->spread && f->spread_load ? f->spread_load(node, alive[i]) : alive[i] != home;
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
        if (take_placed(alive[i]->pool, f) == 0) {
            f->pool = alive[i]->pool;
            f->member = alive[i];
            return 0;
        }
    return -EAGAIN;
}

int beam_fit_take(beam_node_t *node, beam_fit_t *f)
{
    f->bundle = -1;
    if (!f->pg && f->has_affinity) {
        int rc = take_affinity(node, f);
        if (rc != -ENOENT)
            return rc;
    }
    if (!f->pg)
        return take_anywhere(node, f);
    if (f->pg->state == BEAM_PG_REMOVED)
        return -ECANCELED;
    if (f->pg->state != BEAM_PG_CREATED && f->pg->state != BEAM_PG_RESCHEDULING)
        return -EAGAIN;
    for (uint32_t i = 0; i < f->pg->nbundles; i++) {
        if (f->bundle_index >= 0 && (uint32_t)f->bundle_index != i)
            continue;
        beam_bundle_t *b = &f->pg->bundles[i];
        if (!b->placed || !b->member || !b->member->alive)
            continue;
        if (take_placed(&b->pool, f) == 0) {
            f->pool = &b->pool;
            f->member = b->member;
            f->bundle = (int)i;
            f->pg->users++;
            return 0;
        }
    }
    return -EAGAIN;
}

/* The CPU part of a grant, as a grant of its own. */
static void cpu_part(const beam_grant_t *grant, beam_grant_t *g)
{
    memset(g, 0, sizeof *g);
    for (size_t i = 0; i < grant->taken.n; i++)
        if (strcmp(grant->taken.name[i], "CPU") == 0)
            beam_demand_add(&g->taken, "CPU", grant->taken.amount[i]);
}

int64_t beam_fit_lend_cpu(beam_pool_t *pool, const beam_grant_t *grant)
{
    beam_grant_t g;
    cpu_part(grant, &g);
    if (g.taken.n == 0)
        return 0;
    beam_pool_give(pool, &g);
    return g.taken.amount[0];
}

void beam_fit_retake_cpu(beam_pool_t *pool, const beam_grant_t *grant)
{
    beam_grant_t g;
    cpu_part(grant, &g);
    if (g.taken.n > 0)
        beam_pool_retake(pool, &g);
}
