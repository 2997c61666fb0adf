/* test_resources.c — resource pools (src/resources.h): named amounts in fixed
 * point, GPUs as fractional devices, all-or-nothing takes, feasibility, grants
 * given back, and demands. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "resources.h"

#define U BEAM_RES_UNIT

/* A node's pool: 8 CPUs, 16 GiB memory, a custom resource, its node:<ip>
 * entry, and ngpus GPUs named "0".."ngpus-1". */
static void pool_make(beam_pool_t *pool, int ngpus)
{
    beam_pool_init(pool);
    assert_int_equal(beam_pool_add(pool, "CPU", 8 * U), 0);
    assert_int_equal(beam_pool_add(pool, "memory", beam_res_units(16.0 * 1024 * 1024 * 1024)), 0);
    assert_int_equal(beam_pool_add(pool, "accel", 2 * U), 0);
    assert_int_equal(beam_pool_add(pool, "node:10.0.0.7", U), 0);
    for (int i = 0; i < ngpus; i++) {
        char id[4] = {(char)('0' + i), 0};
        assert_int_equal(beam_pool_add_gpu(pool, id), 0);
    }
}

static int64_t avail(const beam_pool_t *pool, const char *name)
{
    const beam_res_entry_t *e = beam_pool_find(pool, name);
    assert_non_null(e);
    return e->avail;
}

static void demand1(beam_demand_t *d, const char *name, int64_t amount)
{
    memset(d, 0, sizeof *d);
    assert_int_equal(beam_demand_add(d, name, amount), 0);
}

/* Snapshot of everything a take may change. */
typedef struct snap_s {
    int64_t avail[16];
    int64_t gpu[BEAM_MAX_GPUS];
} snap_t;

static void snap(const beam_pool_t *pool, snap_t *s)
{
    memset(s, 0, sizeof *s);
    assert_true(pool->nres <= 16);
    for (size_t i = 0; i < pool->nres; i++)
        s->avail[i] = pool->res[i].avail;
    for (int i = 0; i < pool->ngpus; i++)
        s->gpu[i] = pool->gpu_avail[i];
}

static void assert_snap_equal(const beam_pool_t *pool, const snap_t *s)
{
    snap_t now;
    snap(pool, &now);
    assert_memory_equal(&now, s, sizeof now);
}

static void test_pool_entries(void **state)
{
    beam_pool_t pool;
    pool_make(&pool, 2);
    assert_int_equal(pool.nres, 5); /* CPU, memory, accel, node:ip, GPU */
    const beam_res_entry_t *e = beam_pool_find(&pool, "CPU");
    assert_non_null(e);
    assert_string_equal(e->name, "CPU");
    assert_int_equal(e->total, 8 * U);
    assert_int_equal(e->avail, 8 * U);
    assert_int_equal(beam_pool_find(&pool, "memory")->total, (int64_t)16 * 1024 * 1024 * 1024 * U);
    assert_int_equal(beam_pool_find(&pool, "node:10.0.0.7")->total, U);
    e = beam_pool_find(&pool, "GPU");
    assert_non_null(e);
    assert_int_equal(e->total, 2 * U);
    assert_int_equal(e->avail, 2 * U);
    assert_int_equal(pool.ngpus, 2);
    assert_string_equal(pool.gpu_ids[0], "0");
    assert_string_equal(pool.gpu_ids[1], "1");
    assert_int_equal(pool.gpu_avail[0], U);
    assert_int_equal(pool.gpu_avail[1], U);
    assert_null(beam_pool_find(&pool, "TPU"));
    assert_null(beam_pool_find(&pool, "cpu")); /* names are case-sensitive */

    /* a name added again is refused, never summed (issue 10, bug 3: a
     * join naming CPU twice overflowed the total); GPU and amounts outside
     * Ray's range are refused too */
    assert_int_equal(beam_pool_add(&pool, "CPU", 2 * U), -EEXIST);
    assert_int_equal(beam_pool_find(&pool, "CPU")->total, 8 * U);
    assert_int_equal(beam_pool_find(&pool, "CPU")->avail, 8 * U);
    assert_int_equal(pool.nres, 5);
    assert_int_equal(beam_pool_add(&pool, "GPU", U), -EINVAL);
    assert_int_equal(beam_pool_add(&pool, "neg", -1), -ERANGE);
    assert_int_equal(beam_pool_add(&pool, "huge", BEAM_RES_MAX + 1), -ERANGE);
    assert_int_equal(beam_pool_add(&pool, "huge", INT64_MAX), -ERANGE);
    assert_null(beam_pool_find(&pool, "neg"));
    assert_null(beam_pool_find(&pool, "huge"));
    assert_int_equal(beam_pool_find(&pool, "CPU")->total, 8 * U);
    char long_name[BEAM_RES_NAME_LEN + 1];
    memset(long_name, 'x', BEAM_RES_NAME_LEN);
    long_name[BEAM_RES_NAME_LEN] = '\0';
    /* a name that does not fit is refused (today as -ENOMEM, where
     * beam_demand_add says -EINVAL for the same name) */
    assert_true(beam_pool_add(&pool, long_name, U) < 0);
    assert_null(beam_pool_find(&pool, long_name));
    assert_int_equal(pool.nres, 5);
    long_name[BEAM_RES_NAME_LEN - 1] = '\0'; /* the longest name that fits */
    assert_int_equal(beam_pool_add(&pool, long_name, U), 0);
    assert_non_null(beam_pool_find(&pool, long_name));
    beam_pool_destroy(&pool);
    assert_null(pool.res);
    assert_int_equal(pool.nres, 0);
}

static void test_pool_many_entries(void **state)
{
    beam_pool_t pool;
    beam_pool_init(&pool);
    char name[16];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "r%d", i);
        assert_int_equal(beam_pool_add(&pool, name, i * U), 0);
    }
    assert_int_equal(pool.nres, 100);
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "r%d", i);
        assert_int_equal(beam_pool_find(&pool, name)->total, (int64_t)i * U);
    }
    beam_pool_destroy(&pool);
}

static void test_pool_gpu_limit(void **state)
{
    beam_pool_t pool;
    beam_pool_init(&pool);
    char id[16];
    for (int i = 0; i < BEAM_MAX_GPUS; i++) {
        snprintf(id, sizeof id, "g%d", i);
        assert_int_equal(beam_pool_add_gpu(&pool, id), 0);
    }
    /* a device named twice would let two actors share it unknowingly */
    assert_int_equal(beam_pool_add_gpu(&pool, "g0"), -EEXIST);
    assert_int_equal(beam_pool_add_gpu(&pool, "g64"), -ENOSPC);
    assert_int_equal(pool.ngpus, BEAM_MAX_GPUS);
    assert_int_equal(beam_pool_find(&pool, "GPU")->total, (int64_t)BEAM_MAX_GPUS * U);
    beam_pool_destroy(&pool);
}

static void test_units(void **state)
{
    assert_int_equal(beam_res_units(1.0), 10000);
    assert_int_equal(beam_res_units(0.5), 5000);
    assert_int_equal(beam_res_units(0.001), 10);
    assert_int_equal(beam_res_units(0.0101), 101);
    assert_int_equal(beam_res_units(0.0001), 1);
    assert_int_equal(beam_res_units(0.00004), 0);
    assert_int_equal(beam_res_units(0.00005), 1);     /* half rounds away from zero */
    assert_int_equal(beam_res_units(0.29), 2900);     /* 0.29 * 10000 is 2899.9999... */
    assert_int_equal(beam_res_units(1.0 / 3.0), 3333);
    assert_int_equal(beam_res_units(0.0), 0);
    assert_true(beam_res_units(-0.5) == -5000);
    assert_true(beam_res_units(1e6) == INT64_C(10000000000));
}

static void test_demand_add(void **state)
{
    beam_demand_t d;
    memset(&d, 0, sizeof d);
    assert_int_equal(beam_demand_add(&d, "CPU", U), 0);
    assert_int_equal(beam_demand_add(&d, "GPU", U / 2), 0);
    assert_int_equal(beam_demand_add(&d, "CPU", 2 * U), -EEXIST); /* repeats are refused */
    assert_int_equal(beam_demand_add(&d, "CPU", 0), -EEXIST);
    assert_int_equal(d.n, 2);
    assert_string_equal(d.name[0], "CPU");
    assert_int_equal(d.amount[0], U);
    /* (9.2e14 twice once summed past INT64_MAX into a negative demand) */
    assert_int_equal(beam_demand_add(&d, "big", BEAM_RES_MAX), 0);
    assert_int_equal(beam_demand_add(&d, "big", BEAM_RES_MAX), -EEXIST);
    assert_int_equal(beam_demand_add(&d, "bigger", BEAM_RES_MAX + 1), -ERANGE);
    d.n = 2;
    assert_string_equal(d.name[1], "GPU");
    assert_int_equal(d.amount[1], U / 2);
    assert_int_equal(beam_demand_add(&d, "CPU", -1), -EINVAL);
    assert_int_equal(beam_demand_add(&d, "new", -U), -EINVAL);
    assert_int_equal(d.amount[0], U);
    assert_int_equal(d.n, 2);
    assert_int_equal(beam_demand_add(&d, "zero", 0), 0); /* skipped */
    assert_int_equal(d.n, 2);
    char long_name[BEAM_RES_NAME_LEN + 1];
    memset(long_name, 'x', BEAM_RES_NAME_LEN);
    long_name[BEAM_RES_NAME_LEN] = '\0';
    assert_int_equal(beam_demand_add(&d, long_name, U), -EINVAL);
    assert_int_equal(d.n, 2);

    /* full: new names are refused, and repeats as always */
    memset(&d, 0, sizeof d);
    char name[16];
    for (int i = 0; i < BEAM_MAX_DEMAND; i++) {
        snprintf(name, sizeof name, "r%d", i);
        assert_int_equal(beam_demand_add(&d, name, U), 0);
    }
    assert_int_equal(beam_demand_add(&d, "one-more", U), -ENOSPC);
    assert_int_equal(beam_demand_add(&d, "r0", U), -EEXIST);
    assert_int_equal(d.amount[0], U);
    assert_int_equal(d.n, BEAM_MAX_DEMAND);
}

/* A peer's amount, as Ray checks it: >= 0, at most 1e14
 * (MAX_RESOURCE_QUANTITY), and no finer than 0.0001 unless zero. */
static void test_res_amount(void **state)
{
    int64_t u = -7;
    assert_int_equal(beam_res_amount(0, &u), 0);
    assert_int_equal(u, 0);
    assert_int_equal(beam_res_amount(0.0001, &u), 0);
    assert_int_equal(u, 1);
    assert_int_equal(beam_res_amount(2.5, &u), 0);
    assert_int_equal(u, 25000);
    assert_int_equal(beam_res_amount(100e12, &u), 0);
    assert_int_equal(u, BEAM_RES_MAX);
    u = -7;
    assert_int_equal(beam_res_amount(-1, &u), -EINVAL);
    assert_int_equal(beam_res_amount(-0.0, &u), 0); /* -0.0 == 0 */
    u = -7;
    assert_int_equal(beam_res_amount(NAN, &u), -EINVAL);
    assert_int_equal(beam_res_amount(INFINITY, &u), -ERANGE);
    assert_int_equal(beam_res_amount(-INFINITY, &u), -EINVAL);
    assert_int_equal(beam_res_amount(100e12 * 1.0001, &u), -ERANGE);
    assert_int_equal(beam_res_amount(9.2e14, &u), -ERANGE);
    assert_int_equal(beam_res_amount(0.00005, &u), -ERANGE);
    assert_int_equal(beam_res_amount(1e-300, &u), -ERANGE);
    assert_int_equal(u, -7); /* untouched on error */
}

static void test_take_and_give_named(void **state)
{
    beam_pool_t pool;
    beam_demand_t d;
    beam_grant_t g1, g2;
    snap_t before;
    pool_make(&pool, 0);
    snap(&pool, &before);
    memset(&d, 0, sizeof d);
    assert_int_equal(beam_demand_add(&d, "CPU", 3 * U), 0);
    assert_int_equal(beam_demand_add(&d, "accel", beam_res_units(0.001)), 0);
    assert_int_equal(beam_demand_add(&d, "node:10.0.0.7", beam_res_units(0.001)), 0);
    assert_int_equal(beam_pool_take(&pool, &d, &g1), 0);
    assert_int_equal(avail(&pool, "CPU"), 5 * U);
    assert_int_equal(avail(&pool, "accel"), 2 * U - 10);
    assert_int_equal(avail(&pool, "node:10.0.0.7"), U - 10);
    assert_int_equal(g1.ngpus, 0);
    assert_int_equal(g1.taken.n, 3);
    assert_int_equal(g1.taken.amount[0], 3 * U);
    assert_int_equal(beam_pool_take(&pool, &d, &g2), 0);
    assert_int_equal(avail(&pool, "CPU"), 2 * U);
    /* a third does not fit now, but could later */
    beam_grant_t g3;
    snap_t mid;
    snap(&pool, &mid);
    assert_int_equal(beam_pool_take(&pool, &d, &g3), -EAGAIN);
    assert_snap_equal(&pool, &mid);
    beam_pool_give(&pool, &g1);
    assert_int_equal(avail(&pool, "CPU"), 5 * U);
    beam_pool_give(&pool, &g2);
    assert_snap_equal(&pool, &before);
    /* totals never move */
    assert_int_equal(beam_pool_find(&pool, "CPU")->total, 8 * U);
    beam_pool_destroy(&pool);
}

static void test_fixed_point_sums(void **state)
{
    beam_pool_t pool;
    beam_demand_t d;
    beam_grant_t g[200];
    beam_pool_init(&pool);
    assert_int_equal(beam_pool_add(&pool, "CPU", beam_res_units(1.0)), 0);
    /* 0.0101 * 99 = 0.9999 fits, a 100th does not: no float drift */
    demand1(&d, "CPU", beam_res_units(0.0101));
    for (int i = 0; i < 99; i++)
        assert_int_equal(beam_pool_take(&pool, &d, &g[i]), 0);
    assert_int_equal(avail(&pool, "CPU"), 1);
    assert_int_equal(beam_pool_take(&pool, &d, &g[99]), -EAGAIN);
    for (int i = 0; i < 99; i++)
        beam_pool_give(&pool, &g[i]);
    assert_int_equal(avail(&pool, "CPU"), U);
    /* 0.001 exactly 1000 times */
    demand1(&d, "CPU", beam_res_units(0.001));
    for (int i = 0; i < 200; i++)
        assert_int_equal(beam_pool_take(&pool, &d, &g[i]), 0);
    assert_int_equal(avail(&pool, "CPU"), U - 200 * 10);
    for (int i = 0; i < 200; i++)
        beam_pool_give(&pool, &g[i]);
    assert_int_equal(avail(&pool, "CPU"), U);
    beam_pool_destroy(&pool);
}

static void test_whole_gpus_lowest_first(void **state)
{
    beam_pool_t pool;
    beam_demand_t d;
    beam_grant_t g1, g2, g3, g4;
    pool_make(&pool, 4);
    demand1(&d, "GPU", U);
    assert_int_equal(beam_pool_take(&pool, &d, &g1), 0);
    assert_int_equal(g1.ngpus, 1);
    assert_int_equal(g1.gpu_index[0], 0);
    assert_int_equal(g1.gpu_units[0], U);
    demand1(&d, "GPU", 2 * U);
    assert_int_equal(beam_pool_take(&pool, &d, &g2), 0);
    assert_int_equal(g2.ngpus, 2);
    assert_int_equal(g2.gpu_index[0], 1);
    assert_int_equal(g2.gpu_index[1], 2);
    assert_int_equal(pool.gpu_avail[0], 0);
    assert_int_equal(pool.gpu_avail[1], 0);
    assert_int_equal(pool.gpu_avail[2], 0);
    assert_int_equal(pool.gpu_avail[3], U);
    assert_int_equal(avail(&pool, "GPU"), U);
    /* give back the first: the next single GPU is device 0 again */
    beam_pool_give(&pool, &g1);
    assert_int_equal(pool.gpu_avail[0], U);
    demand1(&d, "GPU", 2 * U);
    assert_int_equal(beam_pool_take(&pool, &d, &g3), 0);
    assert_int_equal(g3.gpu_index[0], 0);
    assert_int_equal(g3.gpu_index[1], 3);
    assert_int_equal(avail(&pool, "GPU"), 0);
    demand1(&d, "GPU", U);
    assert_int_equal(beam_pool_take(&pool, &d, &g4), -EAGAIN);
    beam_pool_give(&pool, &g2);
    beam_pool_give(&pool, &g3);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pool.gpu_avail[i], U);
    assert_int_equal(avail(&pool, "GPU"), 4 * U);
    beam_pool_destroy(&pool);
}

static void test_fractional_gpus_best_fit(void **state)
{
    beam_pool_t pool;
    beam_demand_t half, whole, quarter;
    beam_grant_t a, b, c, q1, q2;
    pool_make(&pool, 2);
    demand1(&half, "GPU", U / 2);
    demand1(&whole, "GPU", U);
    demand1(&quarter, "GPU", U / 4);
    /* two halves share device 0 */
    assert_int_equal(beam_pool_take(&pool, &half, &a), 0);
    assert_int_equal(a.ngpus, 1);
    assert_int_equal(a.gpu_index[0], 0);
    assert_int_equal(a.gpu_units[0], U / 2);
    assert_int_equal(beam_pool_take(&pool, &half, &b), 0);
    assert_int_equal(b.gpu_index[0], 0);
    assert_int_equal(pool.gpu_avail[0], 0);
    /* then a whole one goes to device 1 */
    assert_int_equal(beam_pool_take(&pool, &whole, &c), 0);
    assert_int_equal(c.ngpus, 1);
    assert_int_equal(c.gpu_index[0], 1);
    assert_int_equal(avail(&pool, "GPU"), 0);
    beam_pool_give(&pool, &c);
    beam_pool_give(&pool, &b);
    /* device 0 has 0.5 free, device 1 has 1.0: a quarter goes to the fuller 0 */
    assert_int_equal(beam_pool_take(&pool, &quarter, &q1), 0);
    assert_int_equal(q1.gpu_index[0], 0);
    assert_int_equal(pool.gpu_avail[0], U / 4);
    /* a half no longer fits on 0: it goes to 1 */
    assert_int_equal(beam_pool_take(&pool, &half, &q2), 0);
    assert_int_equal(q2.gpu_index[0], 1);
    assert_int_equal(pool.gpu_avail[1], U / 2);
    beam_pool_give(&pool, &a);
    beam_pool_give(&pool, &q1);
    beam_pool_give(&pool, &q2);
    assert_int_equal(pool.gpu_avail[0], U);
    assert_int_equal(pool.gpu_avail[1], U);
    assert_int_equal(avail(&pool, "GPU"), 2 * U);
    beam_pool_destroy(&pool);
}

/* 1.0 GPU free in sum, but spread over two half-used devices. */
static void test_whole_gpu_needs_a_free_device(void **state)
{
    beam_pool_t pool;
    beam_demand_t d, w;
    beam_grant_t g[3], gw;
    pool_make(&pool, 2);
    demand1(&d, "GPU", U / 2);
    assert_int_equal(beam_pool_take(&pool, &d, &g[0]), 0);
    assert_int_equal(beam_pool_take(&pool, &d, &g[1]), 0);
    assert_int_equal(beam_pool_take(&pool, &d, &g[2]), 0);
    assert_int_equal(g[2].gpu_index[0], 1);
    beam_pool_give(&pool, &g[1]); /* device 0 and 1 are each half used */
    assert_int_equal(pool.gpu_avail[0], U / 2);
    assert_int_equal(pool.gpu_avail[1], U / 2);
    assert_int_equal(avail(&pool, "GPU"), U);
    snap_t s;
    snap(&pool, &s);
    demand1(&w, "GPU", U);
    assert_int_equal(beam_pool_feasible(&pool, &w), 0);
    assert_int_equal(beam_pool_take(&pool, &w, &gw), -EAGAIN);
    assert_snap_equal(&pool, &s);
    /* a 0.6 does not fit either, a 0.5 does */
    demand1(&w, "GPU", beam_res_units(0.6));
    assert_int_equal(beam_pool_take(&pool, &w, &gw), -EAGAIN);
    assert_snap_equal(&pool, &s);
    beam_pool_give(&pool, &g[0]);
    beam_pool_give(&pool, &g[2]);
    beam_pool_destroy(&pool);
}

static void test_infeasible(void **state)
{
    beam_pool_t pool;
    beam_demand_t d;
    beam_grant_t g;
    snap_t s;
    pool_make(&pool, 2);
    snap(&pool, &s);

    demand1(&d, "CPU", 9 * U);
    assert_int_equal(beam_pool_feasible(&pool, &d), -ENOSPC);
    assert_int_equal(beam_pool_take(&pool, &d, &g), -ENOSPC);
    demand1(&d, "GPU", 3 * U);
    assert_int_equal(beam_pool_feasible(&pool, &d), -ENOSPC);
    assert_int_equal(beam_pool_take(&pool, &d, &g), -ENOSPC);
    demand1(&d, "GPU", beam_res_units(1.5)); /* past one GPU it must be whole */
    assert_int_equal(beam_pool_feasible(&pool, &d), -ENOSPC);
    assert_int_equal(beam_pool_take(&pool, &d, &g), -ENOSPC);
    demand1(&d, "TPU", 1);
    assert_int_equal(beam_pool_feasible(&pool, &d), -ENOSPC);
    assert_int_equal(beam_pool_take(&pool, &d, &g), -ENOSPC);
    demand1(&d, "node:10.0.0.8", 1); /* another node's ip */
    assert_int_equal(beam_pool_take(&pool, &d, &g), -ENOSPC);
    /* one infeasible entry makes the whole demand infeasible */
    memset(&d, 0, sizeof d);
    assert_int_equal(beam_demand_add(&d, "CPU", U), 0);
    assert_int_equal(beam_demand_add(&d, "TPU", U), 0);
    assert_int_equal(beam_pool_take(&pool, &d, &g), -ENOSPC);
    assert_snap_equal(&pool, &s);

    /* feasible ones: the exact totals, 2.0 GPUs, 0.5 GPU */
    demand1(&d, "CPU", 8 * U);
    assert_int_equal(beam_pool_feasible(&pool, &d), 0);
    demand1(&d, "GPU", 2 * U);
    assert_int_equal(beam_pool_feasible(&pool, &d), 0);
    demand1(&d, "GPU", U / 2);
    assert_int_equal(beam_pool_feasible(&pool, &d), 0);
    memset(&d, 0, sizeof d);
    assert_int_equal(beam_pool_feasible(&pool, &d), 0); /* the empty demand */
    assert_int_equal(beam_pool_take(&pool, &d, &g), 0);
    assert_int_equal(g.taken.n, 0);
    beam_pool_give(&pool, &g);
    assert_snap_equal(&pool, &s);

    /* no GPUs at all */
    beam_pool_t cpu_only;
    pool_make(&cpu_only, 0);
    demand1(&d, "GPU", U / 10);
    assert_int_equal(beam_pool_take(&cpu_only, &d, &g), -ENOSPC);
    beam_pool_destroy(&cpu_only);
    beam_pool_destroy(&pool);
}

static void test_all_or_nothing(void **state)
{
    beam_pool_t pool;
    beam_demand_t d, gpu;
    beam_grant_t g, hold;
    snap_t s;
    pool_make(&pool, 1);
    demand1(&gpu, "GPU", U);
    assert_int_equal(beam_pool_take(&pool, &gpu, &hold), 0);
    snap(&pool, &s);
    /* fits CPU, not GPU: CPU is left untouched */
    memset(&d, 0, sizeof d);
    assert_int_equal(beam_demand_add(&d, "CPU", 2 * U), 0);
    assert_int_equal(beam_demand_add(&d, "memory", U), 0);
    assert_int_equal(beam_demand_add(&d, "GPU", U), 0);
    assert_int_equal(beam_pool_take(&pool, &d, &g), -EAGAIN);
    assert_snap_equal(&pool, &s);
    assert_int_equal(avail(&pool, "CPU"), 8 * U);
    /* GPU listed first, CPU short later: the GPU device is left untouched */
    beam_pool_give(&pool, &hold);
    snap(&pool, &s);
    memset(&d, 0, sizeof d);
    assert_int_equal(beam_demand_add(&d, "GPU", U / 2), 0);
    assert_int_equal(beam_demand_add(&d, "accel", 2 * U), 0);
    beam_demand_t accel;
    beam_grant_t ga;
    demand1(&accel, "accel", U);
    assert_int_equal(beam_pool_take(&pool, &accel, &ga), 0);
    snap(&pool, &s);
    assert_int_equal(beam_pool_take(&pool, &d, &g), -EAGAIN);
    assert_snap_equal(&pool, &s);
    assert_int_equal(pool.gpu_avail[0], U);
    beam_pool_give(&pool, &ga);
    /* and now it fits, whole */
    assert_int_equal(beam_pool_take(&pool, &d, &g), 0);
    assert_int_equal(pool.gpu_avail[0], U / 2);
    assert_int_equal(avail(&pool, "accel"), 0);
    assert_int_equal(avail(&pool, "GPU"), U / 2);
    beam_pool_give(&pool, &g);
    assert_int_equal(pool.gpu_avail[0], U);
    assert_int_equal(avail(&pool, "accel"), 2 * U);
    beam_pool_destroy(&pool);
}

/* Many random-ish takes and gives in a mixed order end exactly where they began. */
static void test_give_restores_exactly(void **state)
{
    beam_pool_t pool;
    beam_demand_t d[4];
    beam_grant_t g[64];
    int taken[64] = {0};
    snap_t s;
    pool_make(&pool, 4);
    snap(&pool, &s);
    memset(d, 0, sizeof d);
    assert_int_equal(beam_demand_add(&d[0], "GPU", beam_res_units(0.3)), 0);
    assert_int_equal(beam_demand_add(&d[0], "CPU", beam_res_units(0.25)), 0);
    assert_int_equal(beam_demand_add(&d[1], "GPU", U), 0);
    assert_int_equal(beam_demand_add(&d[2], "GPU", beam_res_units(0.0101)), 0);
    assert_int_equal(beam_demand_add(&d[2], "node:10.0.0.7", beam_res_units(0.001)), 0);
    assert_int_equal(beam_demand_add(&d[3], "GPU", 2 * U), 0);
    assert_int_equal(beam_demand_add(&d[3], "memory", beam_res_units(1e9)), 0);
    uint32_t x = 12345;
    for (int round = 0; round < 2000; round++) {
        x = x * 1103515245u + 12345u;
        int i = (int)((x >> 8) % 64);
        if (taken[i]) {
            beam_pool_give(&pool, &g[i]);
            taken[i] = 0;
        } else {
            int rc = beam_pool_take(&pool, &d[i % 4], &g[i]);
            assert_true(rc == 0 || rc == -EAGAIN);
            taken[i] = rc == 0;
        }
        /* the GPU entry is always the sum of its devices */
        int64_t sum = 0;
        for (int k = 0; k < pool.ngpus; k++) {
            assert_true(pool.gpu_avail[k] >= 0 && pool.gpu_avail[k] <= U);
            sum += pool.gpu_avail[k];
        }
        assert_int_equal(sum, avail(&pool, "GPU"));
        assert_true(avail(&pool, "CPU") >= 0);
    }
    for (int i = 0; i < 64; i++)
        if (taken[i])
            beam_pool_give(&pool, &g[i]);
    assert_snap_equal(&pool, &s);
    beam_pool_destroy(&pool);
}

static void test_add_gpu_units(void **state)
{
    beam_pool_t pool;
    beam_demand_t d;
    beam_grant_t g;
    beam_pool_init(&pool);
    assert_int_equal(beam_pool_add_gpu_units(&pool, "3", 0), -EINVAL);
    assert_int_equal(beam_pool_add_gpu_units(&pool, "3", -U), -EINVAL);
    assert_int_equal(beam_pool_add_gpu_units(&pool, "3", U + 1), -EINVAL);
    assert_null(beam_pool_find(&pool, "GPU"));
    assert_int_equal(beam_pool_add_gpu_units(&pool, "3", U / 2), 0);
    assert_int_equal(beam_pool_add_gpu_units(&pool, "3", U / 4), -EEXIST);
    assert_int_equal(beam_pool_add_gpu_units(&pool, "5", U), 0);
    assert_int_equal(pool.ngpus, 2);
    assert_string_equal(pool.gpu_ids[0], "3");
    assert_int_equal(pool.gpu_avail[0], U / 2);
    assert_int_equal(pool.gpu_avail[1], U);
    assert_int_equal(beam_pool_find(&pool, "GPU")->total, U + U / 2);
    /* a fraction goes to the part device (best fit); a whole one needs device "5" */
    demand1(&d, "GPU", U / 2);
    assert_int_equal(beam_pool_take(&pool, &d, &g), 0);
    assert_int_equal(g.gpu_index[0], 0);
    beam_pool_give(&pool, &g);
    demand1(&d, "GPU", U);
    assert_int_equal(beam_pool_take(&pool, &d, &g), 0);
    assert_int_equal(g.gpu_index[0], 1);
    beam_pool_give(&pool, &g);
    beam_pool_destroy(&pool);

    beam_pool_init(&pool);
    char id[8];
    for (int i = 0; i < BEAM_MAX_GPUS; i++) {
        snprintf(id, sizeof id, "%d", i);
        assert_int_equal(beam_pool_add_gpu_units(&pool, id, U), 0);
    }
    assert_int_equal(beam_pool_add_gpu_units(&pool, "extra", U), -ENOSPC);
    beam_pool_destroy(&pool);
}

static void test_clone(void **state)
{
    beam_pool_t pool, copy, empty, empty_copy;
    beam_demand_t d;
    beam_grant_t g;
    pool_make(&pool, 2);
    assert_int_equal(beam_pool_clone(&copy, &pool), 0);
    assert_ptr_not_equal(copy.res, pool.res);
    assert_int_equal(copy.nres, pool.nres);
    assert_int_equal(copy.ngpus, 2);
    assert_string_equal(copy.gpu_ids[1], "1");
    memset(&d, 0, sizeof d);
    assert_int_equal(beam_demand_add(&d, "CPU", 8 * U), 0);
    assert_int_equal(beam_demand_add(&d, "GPU", U), 0);
    assert_int_equal(beam_pool_take(&copy, &d, &g), 0);
    assert_int_equal(avail(&copy, "CPU"), 0);
    assert_int_equal(copy.gpu_avail[0], 0);
    /* the original is untouched */
    assert_int_equal(avail(&pool, "CPU"), 8 * U);
    assert_int_equal(pool.gpu_avail[0], U);
    /* and the copy grows on its own */
    assert_int_equal(beam_pool_add(&copy, "extra1", U), 0);
    assert_int_equal(beam_pool_add(&copy, "extra2", U), 0);
    assert_int_equal(beam_pool_add(&copy, "extra3", U), 0);
    assert_int_equal(beam_pool_add(&copy, "extra4", U), 0);
    assert_null(beam_pool_find(&pool, "extra4"));
    beam_pool_destroy(&copy);
    beam_pool_destroy(&pool);

    beam_pool_init(&empty);
    assert_int_equal(beam_pool_clone(&empty_copy, &empty), 0);
    assert_null(empty_copy.res);
    assert_int_equal(beam_pool_add(&empty_copy, "CPU", U), 0);
    beam_pool_destroy(&empty_copy);
    beam_pool_destroy(&empty);
}

/* A node with GPUs named "7", "3", "5" (as CUDA_VISIBLE_DEVICES=7,3,5). */
static void pool_named_gpus(beam_pool_t *pool)
{
    pool_make(pool, 0);
    assert_int_equal(beam_pool_add_gpu(pool, "7"), 0);
    assert_int_equal(beam_pool_add_gpu(pool, "3"), 0);
    assert_int_equal(beam_pool_add_gpu(pool, "5"), 0);
}

static void test_from_grant(void **state)
{
    beam_pool_t pool, bundle;
    beam_demand_t d;
    beam_grant_t g, inner, quarter;
    pool_named_gpus(&pool);
    memset(&d, 0, sizeof d);
    assert_int_equal(beam_demand_add(&d, "CPU", 2 * U), 0);
    assert_int_equal(beam_demand_add(&d, "GPU", 2 * U), 0);
    assert_int_equal(beam_demand_add(&d, "accel", U / 2), 0);
    assert_int_equal(beam_pool_take(&pool, &d, &g), 0);
    assert_int_equal(beam_pool_from_grant(&bundle, &pool, &g), 0);
    assert_int_equal(bundle.nres, 3); /* CPU, GPU, accel */
    assert_int_equal(beam_pool_find(&bundle, "CPU")->total, 2 * U);
    assert_int_equal(beam_pool_find(&bundle, "accel")->avail, U / 2);
    assert_null(beam_pool_find(&bundle, "memory"));
    assert_int_equal(beam_pool_find(&bundle, "GPU")->total, 2 * U);
    assert_int_equal(bundle.ngpus, 2);
    assert_string_equal(bundle.gpu_ids[0], "7");
    assert_string_equal(bundle.gpu_ids[1], "3");
    assert_int_equal(bundle.gpu_avail[0], U);
    /* taking inside the bundle names the node's devices */
    demand1(&d, "GPU", U);
    assert_int_equal(beam_pool_take(&bundle, &d, &inner), 0);
    char list[32];
    beam_grant_gpu_list(&bundle, &inner, list, sizeof list);
    assert_string_equal(list, "7");
    demand1(&d, "CPU", 3 * U);
    assert_int_equal(beam_pool_take(&bundle, &d, &inner), -ENOSPC);
    beam_pool_destroy(&bundle);

    /* a fractional grant makes a bundle of one part device */
    demand1(&d, "GPU", U / 4);
    assert_int_equal(beam_pool_take(&pool, &d, &quarter), 0);
    assert_int_equal(quarter.gpu_index[0], 2); /* "5", the only free one */
    assert_int_equal(beam_pool_from_grant(&bundle, &pool, &quarter), 0);
    assert_int_equal(bundle.nres, 1);
    assert_int_equal(bundle.ngpus, 1);
    assert_string_equal(bundle.gpu_ids[0], "5");
    assert_int_equal(bundle.gpu_avail[0], U / 4);
    assert_int_equal(beam_pool_find(&bundle, "GPU")->total, U / 4);
    demand1(&d, "GPU", U / 4);
    assert_int_equal(beam_pool_take(&bundle, &d, &inner), 0);
    demand1(&d, "GPU", U / 2);
    assert_int_equal(beam_pool_take(&bundle, &d, &inner), -ENOSPC);
    beam_pool_destroy(&bundle);

    beam_pool_give(&pool, &quarter);
    beam_pool_give(&pool, &g);
    beam_pool_destroy(&pool);
}

static void test_grant_gpu_list(void **state)
{
    beam_pool_t pool;
    beam_demand_t d;
    beam_grant_t g, none;
    char list[32];
    pool_named_gpus(&pool);
    demand1(&d, "GPU", 3 * U);
    assert_int_equal(beam_pool_take(&pool, &d, &g), 0);
    beam_grant_gpu_list(&pool, &g, list, sizeof list);
    assert_string_equal(list, "7,3,5");
    demand1(&d, "CPU", U);
    assert_int_equal(beam_pool_take(&pool, &d, &none), 0);
    strcpy(list, "junk");
    beam_grant_gpu_list(&pool, &none, list, sizeof list);
    assert_string_equal(list, "");
    /* a short buffer is cut, terminated, and not overrun */
    char small[4];
    memset(small, 'Z', sizeof small);
    beam_grant_gpu_list(&pool, &g, small, 3);
    assert_string_equal(small, "7,");
    assert_int_equal(small[3], 'Z');
    beam_grant_gpu_list(&pool, &g, small, 1);
    assert_string_equal(small, "");
    beam_pool_give(&pool, &g);
    beam_pool_give(&pool, &none);
    beam_pool_destroy(&pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_entries),
        cmocka_unit_test(test_pool_many_entries),
        cmocka_unit_test(test_pool_gpu_limit),
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_demand_add),
        cmocka_unit_test(test_take_and_give_named),
        cmocka_unit_test(test_fixed_point_sums),
        cmocka_unit_test(test_whole_gpus_lowest_first),
        cmocka_unit_test(test_fractional_gpus_best_fit),
        cmocka_unit_test(test_whole_gpu_needs_a_free_device),
        cmocka_unit_test(test_infeasible),
        cmocka_unit_test(test_all_or_nothing),
        cmocka_unit_test(test_give_restores_exactly),
        cmocka_unit_test(test_add_gpu_units),
        cmocka_unit_test(test_res_amount),
        cmocka_unit_test(test_clone),
        cmocka_unit_test(test_from_grant),
        cmocka_unit_test(test_grant_gpu_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
