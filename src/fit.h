/* fit.h — where an actor's resources come from: its placement group's
 * bundle, its node affinity's target, or any live node (its owner's first;
 * with SPREAD the least loaded first), taken all at once from that pool;
 * and the CPU a blocked task lends back meanwhile.
 * Knows pools, members and groups, not the actor table. */
#ifndef BEAM_FIT_H
#define BEAM_FIT_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "node.h"
#include "placement.h"
#include "resources.h"

typedef struct beam_fit_s {
    /* what is asked */
    const beam_demand_t *demand;
    int64_t place_cpu;        /* CPU that must be free where it goes, not held */
    beam_pg_t *pg;            /* its group, or NULL */
    int bundle_index;         /* the bundle asked for; -1 any */
    int has_affinity, affinity_soft;
    const char *affinity;     /* the target node's id */
    int spread;               /* scheduling_strategy="SPREAD" */
    beam_member_t *home;      /* the owner's node: tried first */
    /* with spread: how many SPREAD actors hold resources on m */
    size_t (*spread_load)(beam_node_t *node, const beam_member_t *m);
    /* what it got */
    beam_grant_t *grant;
    beam_pool_t *pool;
    beam_member_t *member;
    int bundle; /* the bundle it got, -1 outside a group */
} beam_fit_t;

/* Takes f's demand into f->grant from the first pool that has room, and
 * says where (pool, member, bundle; a bundle's group counts one more
 * user). Returns 0, -EAGAIN (not now), -ECANCELED (its group is gone) or
 * -EHOSTUNREACH (its hard node affinity can never be met). */
int beam_fit_take(beam_node_t *node, beam_fit_t *f);

/* A task's worker waits in ray.get: the CPU part of its grant goes back to
 * pool for a while (Ray's raylet does the same). Returns the CPU lent (0:
 * none). beam_fit_retake_cpu takes it back, even past what pool has. */
int64_t beam_fit_lend_cpu(beam_pool_t *pool, const beam_grant_t *grant);
void beam_fit_retake_cpu(beam_pool_t *pool, const beam_grant_t *grant);

#endif
