/* resources.c — resource pools, demands and grants. */
#include "resources.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void beam_pool_init(beam_pool_t *pool)
{
    memset(pool, 0, sizeof *pool);
}

void beam_pool_destroy(beam_pool_t *pool)
{
    free(pool->res);
    memset(pool, 0, sizeof *pool);
}

static beam_res_entry_t *entry(beam_pool_t *pool, const char *name)
{
    for (size_t i = 0; i < pool->nres; i++)
        if (strcmp(pool->res[i].name, name) == 0)
            return &pool->res[i];
    return NULL;
}

const beam_res_entry_t *beam_pool_find(const beam_pool_t *pool, const char *name)
{
    return entry((beam_pool_t *)pool, name);
}

/* A new entry (the caller checked the name is not there yet and fits). */
static beam_res_entry_t *entry_add(beam_pool_t *pool, const char *name)
{
    beam_res_entry_t *e;
    if (pool->nres == pool->cap) {
        size_t cap = pool->cap ? pool->cap * 2 : 8;
        beam_res_entry_t *nr = realloc(pool->res, cap * sizeof *nr);
        if (!nr)
            return NULL;
        pool->res = nr;
        pool->cap = cap;
    }
    e = &pool->res[pool->nres++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    return e;
}

int beam_pool_add(beam_pool_t *pool, const char *name, int64_t amount)
{
    if (strcmp(name, "GPU") == 0 || strlen(name) >= BEAM_RES_NAME_LEN)
        return -EINVAL;
    if (amount < 0 || amount > BEAM_RES_MAX)
        return -ERANGE;
    if (entry(pool, name))
        return -EEXIST;
    beam_res_entry_t *e = entry_add(pool, name);
    if (!e)
        return -ENOMEM;
    e->total = amount;
    e->avail = amount;
    return 0;
}

int beam_pool_add_gpu_units(beam_pool_t *pool, const char *id, int64_t units)
{
    if (units <= 0 || units > BEAM_RES_UNIT)
        return -EINVAL;
    for (int i = 0; i < pool->ngpus; i++)
        if (strcmp(pool->gpu_ids[i], id) == 0)
            return -EEXIST;
    if (pool->ngpus >= BEAM_MAX_GPUS)
        return -ENOSPC;
    beam_res_entry_t *e = entry(pool, "GPU");
    if (!e && !(e = entry_add(pool, "GPU")))
        return -ENOMEM;
    snprintf(pool->gpu_ids[pool->ngpus], BEAM_GPU_ID_LEN, "%s", id);
    pool->gpu_avail[pool->ngpus++] = units;
    e->total += units;
    e->avail += units;
    return 0;
}

int beam_pool_clone(beam_pool_t *dst, const beam_pool_t *src)
{
    *dst = *src;
    dst->res = NULL;
    dst->cap = dst->nres;
    if (src->nres == 0)
        return 0;
    dst->res = malloc(src->nres * sizeof *dst->res);
    if (!dst->res) {
        dst->nres = dst->cap = 0;
        return -ENOMEM;
    }
    memcpy(dst->res, src->res, src->nres * sizeof *dst->res);
    return 0;
}

int beam_pool_from_grant(beam_pool_t *dst, const beam_pool_t *src, const beam_grant_t *grant)
{
    beam_pool_init(dst);
    for (size_t i = 0; i < grant->taken.n; i++)
        if (strcmp(grant->taken.name[i], "GPU") != 0 &&
            beam_pool_add(dst, grant->taken.name[i], grant->taken.amount[i]) < 0)
            goto fail;
    for (int i = 0; i < grant->ngpus; i++)
        if (beam_pool_add_gpu_units(dst, src->gpu_ids[grant->gpu_index[i]], grant->gpu_units[i]) < 0)
            goto fail;
    return 0;
fail:
    beam_pool_destroy(dst);
    return -ENOMEM;
}

void beam_grant_gpu_list(const beam_pool_t *pool, const beam_grant_t *grant, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < grant->ngpus && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? "," : "", pool->gpu_ids[grant->gpu_index[i]]);
}

int beam_pool_add_gpu(beam_pool_t *pool, const char *id)
{
    return beam_pool_add_gpu_units(pool, id, BEAM_RES_UNIT);
}

int64_t beam_res_units(double amount)
{
    return (int64_t)llround(amount * BEAM_RES_UNIT);
}

int beam_res_amount(double amount, int64_t *units)
{
    if (isnan(amount) || amount < 0)
        return -EINVAL;
    if (amount > BEAM_RES_MAX_QUANTITY || (amount > 0 && amount * BEAM_RES_UNIT < 1))
        return -ERANGE;
    *units = beam_res_units(amount);
    return 0;
}

int beam_demand_add(beam_demand_t *d, const char *name, int64_t amount)
{
    if (amount < 0 || strlen(name) >= BEAM_RES_NAME_LEN)
        return -EINVAL;
    if (amount > BEAM_RES_MAX)
        return -ERANGE;
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->name[i], name) == 0)
            return -EEXIST;
    if (amount == 0)
        return 0;
    if (d->n == BEAM_MAX_DEMAND)
        return -ENOSPC;
    snprintf(d->name[d->n], BEAM_RES_NAME_LEN, "%s", name);
    d->amount[d->n++] = amount;
    return 0;
}

int beam_pool_feasible(const beam_pool_t *pool, const beam_demand_t *d)
{
    for (size_t i = 0; i < d->n; i++) {
        const beam_res_entry_t *e = beam_pool_find(pool, d->name[i]);
        if (!e || e->total < d->amount[i])
            return -ENOSPC;
        if (strcmp(d->name[i], "GPU") == 0 && d->amount[i] > BEAM_RES_UNIT &&
            d->amount[i] % BEAM_RES_UNIT != 0)
            return -ENOSPC; /* more than one GPU must be a whole number */
    }
    return 0;
}

/* Picks devices for a GPU amount without changing the pool. */
static int pick_gpus(const beam_pool_t *pool, int64_t amount, beam_grant_t *g)
{
    g->ngpus = 0;
    if (amount >= BEAM_RES_UNIT) {
        int want = (int)(amount / BEAM_RES_UNIT);
        for (int i = 0; i < pool->ngpus && g->ngpus < want; i++)
            if (pool->gpu_avail[i] == BEAM_RES_UNIT) {
                g->gpu_index[g->ngpus] = i;
                g->gpu_units[g->ngpus++] = BEAM_RES_UNIT;
            }
        return g->ngpus == want ? 0 : -EAGAIN;
    }
    int best = -1;
    for (int i = 0; i < pool->ngpus; i++)
        if (pool->gpu_avail[i] >= amount && (best < 0 || pool->gpu_avail[i] < pool->gpu_avail[best]))
            best = i;
    if (best < 0)
        return -EAGAIN;
    g->gpu_index[0] = best;
    g->gpu_units[0] = amount;
    g->ngpus = 1;
    return 0;
}

int beam_pool_take(beam_pool_t *pool, const beam_demand_t *d, beam_grant_t *grant)
{
    memset(grant, 0, sizeof *grant);
    if (beam_pool_feasible(pool, d) < 0)
        return -ENOSPC;
    for (size_t i = 0; i < d->n; i++) {
        const beam_res_entry_t *e = beam_pool_find(pool, d->name[i]);
        if (e->avail < d->amount[i])
            return -EAGAIN;
        if (strcmp(d->name[i], "GPU") == 0 && pick_gpus(pool, d->amount[i], grant) < 0)
            return -EAGAIN;
    }
    for (size_t i = 0; i < d->n; i++)
        entry(pool, d->name[i])->avail -= d->amount[i];
    for (int i = 0; i < grant->ngpus; i++)
        pool->gpu_avail[grant->gpu_index[i]] -= grant->gpu_units[i];
    grant->taken = *d;
    return 0;
}

void beam_pool_give(beam_pool_t *pool, const beam_grant_t *grant)
{
    for (size_t i = 0; i < grant->taken.n; i++) {
        beam_res_entry_t *e = entry(pool, grant->taken.name[i]);
        if (e)
            e->avail += grant->taken.amount[i];
    }
    for (int i = 0; i < grant->ngpus; i++)
        pool->gpu_avail[grant->gpu_index[i]] += grant->gpu_units[i];
}

void beam_pool_retake(beam_pool_t *pool, const beam_grant_t *grant)
{
    for (size_t i = 0; i < grant->taken.n; i++) {
        beam_res_entry_t *e = entry(pool, grant->taken.name[i]);
        if (e)
            e->avail -= grant->taken.amount[i];
    }
    for (int i = 0; i < grant->ngpus; i++)
        pool->gpu_avail[grant->gpu_index[i]] -= grant->gpu_units[i];
}
