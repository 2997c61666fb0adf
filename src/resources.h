/* resources.h — a pool of resources (a node's, later a bundle's): named
 * amounts in fixed point (1/10000, as Ray), and GPUs as devices each with a
 * fractional capacity. Taking is all-or-nothing and yields a grant that is
 * given back whole. Pure data: no I/O, no loop. */
#ifndef BEAM_RESOURCES_H
#define BEAM_RESOURCES_H

#include <stddef.h>
#include <stdint.h>

#include "beam/protocol.h"
#include "gpu.h"

/* BEAM_RES_UNIT and BEAM_RES_MAX_QUANTITY are in beam/protocol.h */
#define BEAM_RES_MAX ((int64_t)(BEAM_RES_MAX_QUANTITY * BEAM_RES_UNIT))
#define BEAM_RES_NAME_LEN 128
#define BEAM_MAX_DEMAND 32

typedef struct beam_res_entry_s {
    char name[BEAM_RES_NAME_LEN];
    int64_t total;
    int64_t avail;
} beam_res_entry_t;

typedef struct beam_pool_s {
    beam_res_entry_t *res; /* "GPU" is kept here too, as the sum of devices */
    size_t nres, cap;
    int ngpus;
    char gpu_ids[BEAM_MAX_GPUS][BEAM_GPU_ID_LEN];
    int64_t gpu_avail[BEAM_MAX_GPUS];
} beam_pool_t;

typedef struct beam_demand_s {
    size_t n;
    char name[BEAM_MAX_DEMAND][BEAM_RES_NAME_LEN];
    int64_t amount[BEAM_MAX_DEMAND];
} beam_demand_t;

typedef struct beam_grant_s {
    beam_demand_t taken;
    int ngpus;
    int gpu_index[BEAM_MAX_GPUS];
    int64_t gpu_units[BEAM_MAX_GPUS];
} beam_grant_t;

void beam_pool_init(beam_pool_t *pool);
void beam_pool_destroy(beam_pool_t *pool);
/* Adds a named resource of amount units (0..BEAM_RES_MAX). Returns 0,
 * -EINVAL for "GPU" (use add_gpu) or a name that does not fit, -EEXIST if the
 * pool has the name already, -ERANGE for an amount out of range, -ENOMEM. */
int beam_pool_add(beam_pool_t *pool, const char *name, int64_t amount);
/* Adds one whole GPU device named id. */
int beam_pool_add_gpu(beam_pool_t *pool, const char *id);
/* Adds units of capacity (a fraction of one device, or all of it) of the
 * GPU named id; a bundle's pool is made of the devices its grant took. */
int beam_pool_add_gpu_units(beam_pool_t *pool, const char *id, int64_t units);
/* Makes dst a deep copy of src (dst is overwritten, not freed). */
int beam_pool_clone(beam_pool_t *dst, const beam_pool_t *src);
/* A new pool holding exactly what grant took from src. */
int beam_pool_from_grant(beam_pool_t *dst, const beam_pool_t *src, const beam_grant_t *grant);
/* The GPU ids a grant names, comma-separated, into out. */
void beam_grant_gpu_list(const beam_pool_t *pool, const beam_grant_t *grant, char *out, size_t cap);
const beam_res_entry_t *beam_pool_find(const beam_pool_t *pool, const char *name);

/* Converts a float amount to fixed point, rounding to the nearest unit.
 * The amount must be in range (beam_res_amount checks one). */
int64_t beam_res_units(double amount);
/* Checks a peer's amount as Ray does and converts it: 0 and *units set, or
 * -EINVAL (negative, NaN), -ERANGE (above BEAM_RES_MAX_QUANTITY, or above
 * zero but finer than 1/10000: Ray's "precision ... cannot go beyond 0.0001"). */
int beam_res_amount(double amount, int64_t *units);
/* Adds name=amount to a demand. Returns -ENOSPC when full, -EINVAL for a
 * negative amount or a name that does not fit, -ERANGE past BEAM_RES_MAX,
 * -EEXIST for a name already there (a repeat is refused, never summed).
 * Zero amounts are skipped. */
int beam_demand_add(beam_demand_t *d, const char *name, int64_t amount);

/* Returns 0 if the demand could ever fit the pool's totals, -ENOSPC if not. */
int beam_pool_feasible(const beam_pool_t *pool, const beam_demand_t *d);
/* Takes the demand all-or-nothing: 0 and a filled grant, -EAGAIN if it does
 * not fit now, -ENOSPC if it never can. GPUs: a whole amount takes that many
 * free devices, lowest first; a fraction takes the fullest device it fits. */
int beam_pool_take(beam_pool_t *pool, const beam_demand_t *d, beam_grant_t *grant);
void beam_pool_give(beam_pool_t *pool, const beam_grant_t *grant);
/* Takes a grant that was given back again, without checking: what is
 * available may go below zero (oversubscribed until given back). */
void beam_pool_retake(beam_pool_t *pool, const beam_grant_t *grant);

#endif
