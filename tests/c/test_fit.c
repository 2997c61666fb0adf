/* test_fit.c — where an actor's resources come from (src/fit.h), with no
 * socket: a cluster of three nodes (this one and two members that joined
 * with test operations), groups built by hand. Any node: the owner's first,
 * then member order, SPREAD least loaded first, the placement CPU that must
 * be free but is not taken, a dead node never; node affinity, hard (wait
 * for the target, or never) and soft (anywhere once the target cannot be),
 * the placement CPU counted in whether it ever can;
 * a group's bundles (removed, not yet placed, a bundle asked for, dead
 * bundles skipped, its users counted); a blocked task's CPU lent and taken
 * back past what the pool has. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fit.h"

#define U BEAM_RES_UNIT

typedef struct fixture_s {
    uv_loop_t loop;
    beam_node_t node;
    beam_member_t *m[4]; /* m[1] this node, m[2] and m[3] members */
    beam_grant_t grant;
    size_t load[4]; /* SPREAD actors on each node (the spread_load callback) */
} fixture_t;

static fixture_t *the;

static int no_spawn(beam_node_t *node, beam_member_t *m, const beam_spawn_t *s, long *pid)
{
    (void)node, (void)m, (void)s, (void)pid;
    fail_msg("fit started a worker");
    return -1;
}

static void no_kill(beam_node_t *node, beam_member_t *m, const char *actor)
{
    (void)node, (void)m, (void)actor;
}

static const beam_member_ops_t test_ops = {no_spawn, no_kill, NULL};

static beam_member_t *join(fixture_t *f, unsigned char tag, int64_t cpus)
{
    char id[BEAM_NODE_ID_SIZE];
    memset(id, tag, sizeof id);
    beam_pool_t pool;
    beam_pool_init(&pool);
    assert_int_equal(beam_pool_add(&pool, "CPU", cpus), 0);
    beam_member_t *m = beam_cluster_add(&f->node, id, "10.0.0.9", "host", "/tmp/s", &pool, &test_ops, NULL);
    assert_non_null(m);
    return m;
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (!f || uv_loop_init(&f->loop) != 0)
        return -1;
    the = f;
    f->node.loop = &f->loop;
    f->node.node_index = 1;
    f->node.is_head = 1;
    memset(f->node.node_id, 0xaa, BEAM_NODE_ID_SIZE);
    beam_pool_init(&f->node.pool);
    if (beam_pool_add(&f->node.pool, "CPU", 4 * U) < 0)
        return -1;
    f->node.self_ops = &test_ops;
    if (beam_cluster_init_self(&f->node) < 0)
        return -1;
    f->m[1] = f->node.self;
    f->m[2] = join(f, 0xb2, 4 * U);
    f->m[3] = join(f, 0xb3, 4 * U);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    beam_cluster_destroy(&f->node);
    beam_pool_destroy(&f->node.pool);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f);
    return 0;
}

static beam_demand_t cpus(int64_t units)
{
    beam_demand_t d;
    memset(&d, 0, sizeof d);
    assert_int_equal(beam_demand_add(&d, "CPU", units), 0);
    return d;
}

/* A fit of demand d for an actor whose owner is on home (NULL: this node). */
static beam_fit_t fit_of(fixture_t *f, const beam_demand_t *d, beam_member_t *home)
{
    memset(&f->grant, 0, sizeof f->grant);
    beam_fit_t fit = {.demand = d, .bundle_index = -1, .home = home, .grant = &f->grant};
    return fit;
}

static int64_t avail(const beam_pool_t *pool, const char *name)
{
    const beam_res_entry_t *e = beam_pool_find(pool, name);
    assert_non_null(e);
    return e->avail;
}

/* The index (1..3) of the node fit placed on. */
static int where(fixture_t *f, const beam_fit_t *fit)
{
    for (int i = 1; i <= 3; i++)
        if (fit->member == f->m[i]) {
            assert_ptr_equal(fit->pool, f->m[i]->pool);
            assert_int_equal(fit->bundle, -1);
            return i;
        }
    fail_msg("placed on no node of the cluster");
    return 0;
}

/* --- any node --- */

static void test_owner_first_then_member_order(void **state)
{
    fixture_t *f = *state;
    beam_demand_t d = cpus(3 * U);
    /* no owner's node given: this one */
    beam_fit_t fit = fit_of(f, &d, NULL);
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 1);
    assert_int_equal(avail(f->m[1]->pool, "CPU"), U);
    assert_int_equal(f->grant.taken.n, 1);
    assert_int_equal(f->grant.taken.amount[0], 3 * U);
    /* an owner on member 3 has its actor there, though 2 comes first */
    fit = fit_of(f, &d, f->m[3]);
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 3);
    /* its owner's node full: the others in member order */
    fit = fit_of(f, &d, f->m[3]);
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 2);
    /* nowhere now: nothing taken anywhere */
    fit = fit_of(f, &d, f->m[3]);
    assert_int_equal(beam_fit_take(&f->node, &fit), -EAGAIN);
    for (int i = 1; i <= 3; i++)
        assert_int_equal(avail(f->m[i]->pool, "CPU"), U);
}

static void test_dead_node_never(void **state)
{
    fixture_t *f = *state;
    beam_demand_t d = cpus(3 * U);
    beam_cluster_member_lost(&f->node, f->m[2], "test");
    /* its owner was on the dead node: any live one, in order */
    beam_fit_t fit = fit_of(f, &d, f->m[2]);
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 1);
    fit = fit_of(f, &d, f->m[2]);
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 3);
    fit = fit_of(f, &d, f->m[2]);
    assert_int_equal(beam_fit_take(&f->node, &fit), -EAGAIN);
    assert_int_equal(avail(f->m[2]->pool, "CPU"), 4 * U);
}

static size_t load_of(beam_node_t *node, const beam_member_t *m)
{
    (void)node;
    for (int i = 1; i <= 3; i++)
        if (the->m[i] == m)
            return the->load[i];
    fail_msg("asked the load of a node not in the cluster");
    return 0;
}

static void test_spread_least_loaded_first(void **state)
{
    fixture_t *f = *state;
    beam_demand_t d = cpus(U);
    f->load[1] = 2;
    f->load[2] = 1;
    f->load[3] = 0;
    beam_fit_t fit = fit_of(f, &d, f->m[1]);
    fit.spread = 1;
    fit.spread_load = load_of;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 3); /* the owner's node is the most loaded */
    /* a tie: member order (this node first), not the owner's */
    f->load[1] = 1;
    f->load[2] = 1;
    f->load[3] = 1;
    fit = fit_of(f, &d, f->m[2]);
    fit.spread = 1;
    fit.spread_load = load_of;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 1);
    /* the least loaded has no room: the next least loaded */
    beam_demand_t big = cpus(4 * U);
    f->load[1] = 0;
    f->load[2] = 2;
    f->load[3] = 1;
    fit = fit_of(f, &big, f->m[1]);
    fit.spread = 1;
    fit.spread_load = load_of;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 2); /* (1 and 3 have 3 of their 4 CPUs free) */
}

static void test_placement_cpu_free_not_taken(void **state)
{
    fixture_t *f = *state;
    /* Ray's default actor: 1 CPU free where it goes, 0 held */
    beam_demand_t none;
    memset(&none, 0, sizeof none);
    beam_demand_t some = cpus(7 * U / 2); /* 3.5 CPU taken on this node */
    beam_fit_t fill = fit_of(f, &some, NULL);
    assert_int_equal(beam_fit_take(&f->node, &fill), 0);
    beam_fit_t fit = fit_of(f, &none, NULL);
    fit.place_cpu = U;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 2); /* half a CPU is free here: not enough */
    assert_int_equal(avail(f->m[2]->pool, "CPU"), 4 * U);
    /* held and placement CPU together: 3 held needs 4 free */
    beam_demand_t three = cpus(3 * U);
    fit = fit_of(f, &three, f->m[2]);
    fit.place_cpu = U;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 2);
    assert_int_equal(avail(f->m[2]->pool, "CPU"), U);
    fit = fit_of(f, &three, f->m[2]);
    fit.place_cpu = 2 * U;
    assert_int_equal(beam_fit_take(&f->node, &fit), -EAGAIN); /* member 3 has 4, not 5 */
    /* a node with no CPU at all cannot hold a placement CPU */
    beam_pool_t gpu_only;
    beam_pool_init(&gpu_only);
    assert_int_equal(beam_pool_add(&gpu_only, "accel", U), 0);
    char id[BEAM_NODE_ID_SIZE];
    memset(id, 0xb4, sizeof id);
    beam_member_t *m4 = beam_cluster_add(&f->node, id, "10.0.0.4", "h", "/tmp/s", &gpu_only, &test_ops, NULL);
    assert_non_null(m4);
    beam_demand_t accel;
    memset(&accel, 0, sizeof accel);
    assert_int_equal(beam_demand_add(&accel, "accel", U), 0);
    fit = fit_of(f, &accel, m4);
    fit.place_cpu = U;
    assert_int_equal(beam_fit_take(&f->node, &fit), -EAGAIN);
    assert_int_equal(avail(m4->pool, "accel"), U);
    fit = fit_of(f, &accel, m4);
    assert_int_equal(beam_fit_take(&f->node, &fit), 0); /* one that needs none goes there */
    assert_ptr_equal(fit.member, m4);
    assert_int_equal(avail(m4->pool, "accel"), 0);
}

/* --- node affinity --- */

static void test_affinity_hard(void **state)
{
    fixture_t *f = *state;
    beam_demand_t d = cpus(3 * U);
    /* the target, though the owner's node has room */
    beam_fit_t fit = fit_of(f, &d, NULL);
    fit.has_affinity = 1;
    fit.affinity = f->m[3]->node_id;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 3);
    /* the target full for now: wait for it, nothing taken elsewhere */
    fit = fit_of(f, &d, NULL);
    fit.has_affinity = 1;
    fit.affinity = f->m[3]->node_id;
    assert_int_equal(beam_fit_take(&f->node, &fit), -EAGAIN);
    assert_int_equal(avail(f->m[1]->pool, "CPU"), 4 * U);
    assert_int_equal(avail(f->m[2]->pool, "CPU"), 4 * U);
    /* a target that could never hold it, one that does not exist, a dead
     * one: never */
    beam_demand_t huge = cpus(5 * U);
    fit = fit_of(f, &huge, NULL);
    fit.has_affinity = 1;
    fit.affinity = f->m[2]->node_id;
    assert_int_equal(beam_fit_take(&f->node, &fit), -EHOSTUNREACH);
    char unknown[BEAM_NODE_ID_SIZE];
    memset(unknown, 0x77, sizeof unknown);
    fit = fit_of(f, &d, NULL);
    fit.has_affinity = 1;
    fit.affinity = unknown;
    assert_int_equal(beam_fit_take(&f->node, &fit), -EHOSTUNREACH);
    beam_cluster_member_lost(&f->node, f->m[2], "test");
    fit = fit_of(f, &d, NULL);
    fit.has_affinity = 1;
    fit.affinity = f->m[2]->node_id;
    assert_int_equal(beam_fit_take(&f->node, &fit), -EHOSTUNREACH);
    assert_int_equal(avail(f->m[1]->pool, "CPU"), 4 * U);
}

static void test_affinity_soft(void **state)
{
    fixture_t *f = *state;
    beam_demand_t d = cpus(3 * U);
    char unknown[BEAM_NODE_ID_SIZE];
    memset(unknown, 0x77, sizeof unknown);
    /* a target that cannot be: anywhere, its owner's node first */
    beam_fit_t fit = fit_of(f, &d, f->m[2]);
    fit.has_affinity = fit.affinity_soft = 1;
    fit.affinity = unknown;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 2);
    beam_demand_t huge = cpus(5 * U);
    fit = fit_of(f, &huge, NULL);
    fit.has_affinity = fit.affinity_soft = 1;
    fit.affinity = f->m[3]->node_id;
    assert_int_equal(beam_fit_take(&f->node, &fit), -EAGAIN); /* (no node could: it waits) */
    /* a live target with room later: soft waits for it too, as Ray's
     * policy does while the node is alive and could hold it */
    fit = fit_of(f, &d, NULL);
    fit.has_affinity = fit.affinity_soft = 1;
    fit.affinity = f->m[3]->node_id;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 3);
    fit = fit_of(f, &d, NULL);
    fit.has_affinity = fit.affinity_soft = 1;
    fit.affinity = f->m[3]->node_id;
    assert_int_equal(beam_fit_take(&f->node, &fit), -EAGAIN);
    assert_int_equal(avail(f->m[1]->pool, "CPU"), 4 * U);
    /* the target dies: anywhere */
    beam_cluster_member_lost(&f->node, f->m[3], "test");
    fit = fit_of(f, &d, NULL);
    fit.has_affinity = fit.affinity_soft = 1;
    fit.affinity = f->m[3]->node_id;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 1);
}

/* The placement CPU counts in whether the target could ever place the
 * actor: a node with no CPU never can (Ray's default actor needs 1 CPU to
 * be placed), so a hard affinity to it fails and a soft one goes anywhere,
 * rather than both waiting for it forever. */
static void test_affinity_counts_placement_cpu(void **state)
{
    fixture_t *f = *state;
    beam_pool_t none;
    beam_pool_init(&none);
    assert_int_equal(beam_pool_add(&none, "accel", U), 0);
    char id[BEAM_NODE_ID_SIZE];
    memset(id, 0xb4, sizeof id);
    beam_member_t *m4 = beam_cluster_add(&f->node, id, "10.0.0.4", "h", "/tmp/s", &none, &test_ops, NULL);
    assert_non_null(m4);
    beam_demand_t nothing;
    memset(&nothing, 0, sizeof nothing);
    beam_fit_t fit = fit_of(f, &nothing, NULL);
    fit.place_cpu = U;
    fit.has_affinity = 1;
    fit.affinity = m4->node_id;
    assert_int_equal(beam_fit_take(&f->node, &fit), -EHOSTUNREACH);
    fit.affinity_soft = 1;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 1);
    /* held and placement CPU together past the target's total: the same */
    beam_demand_t three = cpus(3 * U);
    fit = fit_of(f, &three, NULL);
    fit.place_cpu = 2 * U;
    fit.has_affinity = 1;
    fit.affinity = f->m[2]->node_id;
    assert_int_equal(beam_fit_take(&f->node, &fit), -EHOSTUNREACH);
    /* within it, though not free now: wait for the target */
    fit = fit_of(f, &three, NULL);
    fit.place_cpu = U;
    fit.has_affinity = 1;
    fit.affinity = f->m[2]->node_id;
    beam_demand_t one = cpus(U);
    beam_grant_t g;
    assert_int_equal(beam_pool_take(f->m[2]->pool, &one, &g), 0);
    assert_int_equal(beam_fit_take(&f->node, &fit), -EAGAIN);
    beam_pool_give(f->m[2]->pool, &g);
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(where(f, &fit), 2);
}

/* --- a group's bundles --- */

/* A group of n bundles of 2 CPU each, placed on nodes on[0..n) (0: not
 * placed), in state. */
static beam_pg_t *group(fixture_t *f, uint32_t n, const int *on, int state)
{
    beam_pg_t *pg = calloc(1, sizeof *pg);
    assert_non_null(pg);
    pg->bundles = calloc(n, sizeof *pg->bundles);
    assert_non_null(pg->bundles);
    pg->nbundles = n;
    pg->state = state;
    for (uint32_t i = 0; i < n; i++) {
        beam_bundle_t *b = &pg->bundles[i];
        beam_pool_init(&b->pool);
        assert_int_equal(beam_pool_add(&b->pool, "CPU", 2 * U), 0);
        b->placed = on[i] != 0;
        b->member = on[i] ? f->m[on[i]] : NULL;
    }
    return pg;
}

static void group_free(beam_pg_t *pg)
{
    for (uint32_t i = 0; i < pg->nbundles; i++)
        beam_pool_destroy(&pg->bundles[i].pool);
    free(pg->bundles);
    free(pg);
}

static void test_group_bundles(void **state)
{
    fixture_t *f = *state;
    beam_demand_t d = cpus(2 * U);
    int on[] = {2, 3, 1};
    beam_pg_t *pg = group(f, 3, on, BEAM_PG_CREATED);
    /* any bundle: the first with room, wherever its owner is */
    beam_fit_t fit = fit_of(f, &d, f->m[1]);
    fit.pg = pg;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(fit.bundle, 0);
    assert_ptr_equal(fit.pool, &pg->bundles[0].pool);
    assert_ptr_equal(fit.member, f->m[2]);
    assert_int_equal(pg->users, 1);
    /* the node's own pool is not touched: the bundle holds its share */
    assert_int_equal(avail(f->m[2]->pool, "CPU"), 4 * U);
    fit = fit_of(f, &d, f->m[1]);
    fit.pg = pg;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(fit.bundle, 1);
    assert_ptr_equal(fit.member, f->m[3]);
    /* the bundle asked for, though bundle 2 has room; full: wait */
    fit = fit_of(f, &d, NULL);
    fit.pg = pg;
    fit.bundle_index = 1;
    assert_int_equal(beam_fit_take(&f->node, &fit), -EAGAIN);
    assert_int_equal(pg->users, 2);
    assert_int_equal(avail(&pg->bundles[2].pool, "CPU"), 2 * U);
    fit.bundle_index = 2;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(fit.bundle, 2);
    assert_ptr_equal(fit.member, f->m[1]);
    assert_int_equal(pg->users, 3);
    /* a node affinity does not move an actor out of its group */
    beam_pool_give(&pg->bundles[2].pool, &f->grant); /* (that actor is gone) */
    fit = fit_of(f, &d, NULL);
    fit.pg = pg;
    fit.has_affinity = 1;
    fit.affinity = f->m[3]->node_id;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(fit.bundle, 2);
    /* the bundle is reset for a fit outside any group */
    fit = fit_of(f, &d, NULL);
    fit.bundle = 7;
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(fit.bundle, -1);
    group_free(pg);
}

static void test_group_states(void **state)
{
    fixture_t *f = *state;
    beam_demand_t d = cpus(U);
    int on[] = {0, 2, 3};
    beam_pg_t *pg = group(f, 3, on, BEAM_PG_PENDING);
    beam_fit_t fit = fit_of(f, &d, NULL);
    fit.pg = pg;
    /* not yet placed: wait; removed: never */
    assert_int_equal(beam_fit_take(&f->node, &fit), -EAGAIN);
    pg->state = BEAM_PG_REMOVED;
    assert_int_equal(beam_fit_take(&f->node, &fit), -ECANCELED);
    /* a bundle not placed, and one on a dead node, are skipped; a group
     * rescheduling its lost bundles serves from those it has */
    pg->state = BEAM_PG_RESCHEDULING;
    beam_cluster_member_lost(&f->node, f->m[2], "test");
    assert_int_equal(beam_fit_take(&f->node, &fit), 0);
    assert_int_equal(fit.bundle, 2);
    assert_ptr_equal(fit.member, f->m[3]);
    fit = fit_of(f, &d, NULL);
    fit.pg = pg;
    fit.bundle_index = 1; /* only the dead one */
    assert_int_equal(beam_fit_take(&f->node, &fit), -EAGAIN);
    assert_int_equal(pg->users, 1);
    group_free(pg);
}

/* --- a blocked task's CPU --- */

static void test_lend_and_retake_cpu(void **state)
{
    fixture_t *f = *state;
    beam_pool_t *pool = &f->node.pool;
    assert_int_equal(beam_pool_add(pool, "accel", 2 * U), 0);
    beam_demand_t d = cpus(3 * U);
    assert_int_equal(beam_demand_add(&d, "accel", U), 0);
    beam_grant_t task;
    assert_int_equal(beam_pool_take(pool, &d, &task), 0);
    assert_int_equal(avail(pool, "CPU"), U);
    /* blocked in ray.get: its CPU, and only its CPU, goes back */
    assert_int_equal(beam_fit_lend_cpu(pool, &task), 3 * U);
    assert_int_equal(avail(pool, "CPU"), 4 * U);
    assert_int_equal(avail(pool, "accel"), U);
    /* another takes it meanwhile; the task takes its CPU back anyway */
    beam_demand_t other_d = cpus(4 * U);
    beam_grant_t other;
    assert_int_equal(beam_pool_take(pool, &other_d, &other), 0);
    beam_fit_retake_cpu(pool, &task);
    assert_int_equal(avail(pool, "CPU"), -3 * U);
    assert_int_equal(avail(pool, "accel"), U);
    /* all given back: whole again */
    beam_pool_give(pool, &other);
    beam_pool_give(pool, &task);
    assert_int_equal(avail(pool, "CPU"), 4 * U);
    assert_int_equal(avail(pool, "accel"), 2 * U);
    /* a grant with no CPU lends nothing */
    beam_demand_t a;
    memset(&a, 0, sizeof a);
    assert_int_equal(beam_demand_add(&a, "accel", U), 0);
    assert_int_equal(beam_pool_take(pool, &a, &task), 0);
    assert_int_equal(beam_fit_lend_cpu(pool, &task), 0);
    beam_fit_retake_cpu(pool, &task);
    assert_int_equal(avail(pool, "CPU"), 4 * U);
    assert_int_equal(avail(pool, "accel"), U);
    beam_pool_give(pool, &task);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_owner_first_then_member_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_node_never, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spread_least_loaded_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_placement_cpu_free_not_taken, setup, teardown),
        cmocka_unit_test_setup_teardown(test_affinity_hard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_affinity_soft, setup, teardown),
        cmocka_unit_test_setup_teardown(test_affinity_counts_placement_cpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_bundles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_states, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lend_and_retake_cpu, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
