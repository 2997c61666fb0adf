/* fields.c — a request's fields as the handlers read them: the error reply
 * for a bad field, copies of what a handler keeps, id lists, timeouts, and
 * create_actor's and pg_create's options (names, env, resource amounts).
 * Every function that takes a request replies itself when it fails. */
#include "fields.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void beam_req_bad(beam_req_t *r, const char *field, const char *what)
{
    beam_port_reply_error(r->conn, r->msgid, "bad_request", "field '%s' %s", field, what);
}

/* Reports a field error from a beam_field_* code and returns -1, else 0. */
int beam_req_check(beam_req_t *r, int rc, const char *field, const char *what, int required)
{
    if (rc == 0 || (rc == -ENOENT && !required))
        return 0;
    beam_req_bad(r, field, rc == -ENOENT ? "is required" : what);
    return -1;
}

char *beam_dup_str(const char *s, uint32_t n)
{
    char *d = malloc((size_t)n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

char *beam_dup_bin(const char *s, uint32_t n)
{
    char *d = malloc(n ? n : 1);
    if (d)
        memcpy(d, s, n);
    return d;
}

int beam_has_nul(const char *s, uint32_t n)
{
    return memchr(s, '\0', n) != NULL;
}

int beam_req_refs(beam_req_t *r, beam_refs_t *out)
{
    char err[160];
    if (beam_refs_parse(r->params, out, err, sizeof err) < 0) {
        beam_port_reply_error(r->conn, r->msgid, "bad_request", "%s", err);
        return -1;
    }
    return 0;
}

int beam_req_id_list(beam_req_t *r, const char *field, const msgpack_object_array **ids)
{
    if (beam_req_check(r, beam_field_array(r->params, field, ids), field, "must be an array of ids", 1))
        return -1;
    for (uint32_t i = 0; i < (*ids)->size; i++) {
        const msgpack_object *o = &(*ids)->ptr[i];
        if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != BEAM_OBJECT_ID_SIZE) {
            beam_req_bad(r, field, "must hold 28-byte bin object ids");
            return -1;
        }
    }
    return 0;
}

int beam_req_timeout(beam_req_t *r, int64_t *ms)
{
    *ms = -1;
    if (beam_req_check(r, beam_field_int(r->params, "timeout_ms", ms), "timeout_ms", "must be an int", 0))
        return -1;
    if (*ms < -1) {
        beam_req_bad(r, "timeout_ms", "must be -1 (forever) or >= 0");
        return -1;
    }
    return 0;
}

static int cmp_id(const void *a, const void *b)
{
    return memcmp(*(const char *const *)a, *(const char *const *)b, BEAM_OBJECT_ID_SIZE);
}

/* 1 if some id appears twice (sorted copy: n log n, so a huge wait cannot
 * stall the loop), 0 if not, -1 without memory. */
int beam_has_repeat(const msgpack_object_array *ids)
{
    if (ids->size < 2)
        return 0;
    const char **v = malloc(ids->size * sizeof *v);
    if (!v)
        return -1;
    for (uint32_t i = 0; i < ids->size; i++)
        v[i] = ids->ptr[i].via.bin.ptr;
    qsort(v, ids->size, sizeof *v, cmp_id);
    int dup = 0;
    for (uint32_t i = 1; i < ids->size && !dup; i++)
        dup = memcmp(v[i - 1], v[i], BEAM_OBJECT_ID_SIZE) == 0;
    free(v);
    return dup;
}

char **beam_req_str_array(beam_req_t *r, const char *field)
{
    const msgpack_object_array *a;
    int rc = beam_field_array(r->params, field, &a);
    if (beam_req_check(r, rc, field, "must be an array of str", 0))
        return NULL;
    uint32_t n = rc == 0 ? a->size : 0;
    char **v = calloc((size_t)n + 1, sizeof *v);
    if (!v) {
        beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *o = &a->ptr[i];
        if (o->type != MSGPACK_OBJECT_STR || beam_has_nul(o->via.str.ptr, o->via.str.size) ||
            !(v[i] = beam_dup_str(o->via.str.ptr, o->via.str.size))) {
            for (uint32_t j = 0; j < i; j++)
                free(v[j]);
            free(v);
            beam_req_bad(r, field, "must be an array of str without NUL");
            return NULL;
        }
    }
    return v;
}

/* runtime_env's env_vars as "K=V" strings, NULL-terminated with no NULL
 * before the end. On any failure it replies (bad_request or internal) and
 * returns NULL, so the request gets its one reply. */
char **beam_req_env(beam_req_t *r)
{
    const msgpack_object_map *m;
    int rc = beam_field_map(r->params, "env", &m);
    if (beam_req_check(r, rc, "env", "must be a map of str to str", 0))
        return NULL;
    uint32_t n = rc == 0 ? m->size : 0;
    char **v = calloc((size_t)n + 1, sizeof *v);
    if (!v) {
        beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *k = &m->ptr[i].key, *val = &m->ptr[i].val;
        if (k->type != MSGPACK_OBJECT_STR || val->type != MSGPACK_OBJECT_STR || k->via.str.size == 0 ||
            beam_has_nul(k->via.str.ptr, k->via.str.size) || memchr(k->via.str.ptr, '=', k->via.str.size) ||
            beam_has_nul(val->via.str.ptr, val->via.str.size)) {
            beam_strv_free(v);
            beam_req_bad(r, "env", "must map variable names (no '=' or NUL) to str values");
            return NULL;
        }
        size_t len = (size_t)k->via.str.size + val->via.str.size + 2;
        if (!(v[i] = malloc(len))) {
            beam_strv_free(v);
            beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
            return NULL;
        }
        snprintf(v[i], len, "%.*s=%.*s", (int)k->via.str.size, k->via.str.ptr, (int)val->via.str.size,
                 val->via.str.ptr);
    }
    return v;
}

/* A resource map holds at most this many names (zero amounts included), so
 * the repeat beam_req_check below stays small. */
#define MAX_RESOURCE_NAMES 256

/* Adds a map of resource name to amount to d, naming field in errors.
 * Amounts are checked as Ray does (beam_res_amount); a name given twice is
 * refused, never summed. For `resources=` (plain) CPU, GPU, memory and
 * object_store_memory are refused, as Ray refuses them there. */
int beam_req_resource_map(beam_req_t *r, const char *field, const msgpack_object_map *m, beam_demand_t *d, int plain)
{
    if (m->size > MAX_RESOURCE_NAMES)
        return beam_req_bad(r, field, "must name at most 256 resources"), -1;
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key, *v = &m->ptr[i].val;
        double amount;
        int64_t units = 0;
        if (k->type != MSGPACK_OBJECT_STR || k->via.str.size == 0 || k->via.str.size >= BEAM_RES_NAME_LEN ||
            beam_has_nul(k->via.str.ptr, k->via.str.size))
            return beam_req_bad(r, field, "resource names must be str of 1..127 bytes"), -1;
        for (uint32_t j = 0; j < i; j++)
            if (m->ptr[j].key.via.str.size == k->via.str.size &&
                memcmp(m->ptr[j].key.via.str.ptr, k->via.str.ptr, k->via.str.size) == 0)
                return beam_req_bad(r, field, "must not name a resource twice"), -1;
        char name[BEAM_RES_NAME_LEN];
        snprintf(name, sizeof name, "%.*s", (int)k->via.str.size, k->via.str.ptr);
        if (plain && (strcmp(name, "CPU") == 0 || strcmp(name, "GPU") == 0))
            return beam_req_bad(r, field, "must not hold CPU or GPU: use num_cpus and num_gpus "
                                 "(Use the 'num_cpus' and 'num_gpus' keyword instead of 'CPU' and 'GPU' "
                                 "in 'resources' keyword)"), -1;
        if (plain && (strcmp(name, "memory") == 0 || strcmp(name, "object_store_memory") == 0))
            return beam_req_bad(r, field, "must not hold memory or object_store_memory (The resources dictionary "
                                 "must not contain the key 'memory' or 'object_store_memory')"), -1;
        if (v->type == MSGPACK_OBJECT_FLOAT64 || v->type == MSGPACK_OBJECT_FLOAT32)
            amount = v->via.f64;
        else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            amount = (double)v->via.u64;
        else
            return beam_req_bad(r, field, "amounts must be numbers >= 0"), -1;
        int rc = beam_res_amount(amount, &units);
        if (rc == -ERANGE)
            return beam_req_bad(r, field, "amounts must be 0, or from 0.0001 up to 1e14 (Ray's range)"), -1;
        if (rc < 0)
            return beam_req_bad(r, field, "amounts must be numbers >= 0"), -1;
        if (beam_demand_add(d, name, units) < 0)
            return beam_req_bad(r, field, "must name at most 32 resources above zero"), -1;
    }
    return 0;
}

/* One of num_cpus, num_gpus, memory: checked as a resources= amount. */
static int demand_number(beam_req_t *r, const char *field, const char *name, beam_demand_t *d)
{
    double amount = 0;
    int64_t units = 0;
    if (beam_req_check(r, beam_field_float(r->params, field, &amount), field, "must be a number", 0))
        return -1;
    int rc = beam_res_amount(amount, &units);
    if (rc == -ERANGE)
        return beam_req_bad(r, field, "must be 0, or from 0.0001 up to 1e14 (Ray's range)"), -1;
    if (rc < 0 || beam_demand_add(d, name, units) < 0)
        return beam_req_bad(r, field, "must be a number >= 0"), -1;
    return 0;
}

int beam_req_demand(beam_req_t *r, beam_demand_t *d)
{
    const msgpack_object_map *m;
    memset(d, 0, sizeof *d);
    if (demand_number(r, "num_cpus", "CPU", d) < 0 || demand_number(r, "num_gpus", "GPU", d) < 0 ||
        demand_number(r, "memory", "memory", d) < 0)
        return -1;
    int rc = beam_field_map(r->params, "resources", &m);
    if (beam_req_check(r, rc, "resources", "must be a map of str to number", 0))
        return -1;
    if (rc == 0 && beam_req_resource_map(r, "resources", m, d, 1) < 0)
        return -1;
    return 0;
}

/* A str field of at most BEAM_NAME_MAX_LEN bytes without NUL, copied into out
 * (NUL-terminated); absent is "" unless required. Replies and returns -1 on
 * a beam_req_bad one. */
int beam_req_name(beam_req_t *r, const char *field, char out[BEAM_NAME_MAX_LEN + 1], int required)
{
    const char *s = "";
    uint32_t n = 0;
    if (beam_req_check(r, beam_field_str(r->params, field, &s, &n), field, "must be a str", required))
        return -1;
    if (n > BEAM_NAME_MAX_LEN || beam_has_nul(s, n)) {
        beam_req_bad(r, field, "must be a str of at most 1024 bytes without NUL");
        return -1;
    }
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

/* The scheduling options of create_actor beyond the placement group:
 * lifetime, concurrency and node affinity. Replies and returns -1 on a beam_req_bad
 * field. */
int beam_req_actor_options(beam_req_t *r, beam_actor_options_t *o)
{
    int64_t conc = 1;
    const char *node_id = NULL;
    memset(o, 0, sizeof *o);
    if (beam_req_check(r, beam_field_bool(r->params, "detached", &o->detached), "detached", "must be a bool", 0) ||
        beam_req_check(r, beam_field_int(r->params, "max_concurrency", &conc), "max_concurrency", "must be an int", 0) ||
        beam_req_check(r, beam_field_id(r->params, "node_id", BEAM_NODE_ID_SIZE, &node_id), "node_id",
              "must be a 28-byte bin", 0) ||
        beam_req_check(r, beam_field_bool(r->params, "soft", &o->affinity_soft), "soft", "must be a bool", 0) ||
        beam_req_check(r, beam_field_bool(r->params, "spread", &o->spread), "spread", "must be a bool", 0) ||
        beam_req_check(r, beam_field_bool(r->params, "task", &o->task), "task", "must be a bool", 0))
        return -1;
    if (conc < 1 || conc > 100000) {
        beam_req_bad(r, "max_concurrency", "must be 1..100000");
        return -1;
    }
    o->max_concurrency = (int)conc;
    if (node_id) {
        o->has_affinity = 1;
        memcpy(o->affinity, node_id, BEAM_NODE_ID_SIZE);
    }
    return 0;
}

/* A bundle: a map of resource name to amount (at least one above zero). */
int beam_req_bundle(beam_req_t *r, const msgpack_object *o, beam_demand_t *d)
{
    memset(d, 0, sizeof *d);
    if (o->type != MSGPACK_OBJECT_MAP || o->via.map.size == 0)
        return beam_req_bad(r, "bundles", "must hold non-empty maps of resource name to amount"), -1;
    if (beam_req_resource_map(r, "bundles", &o->via.map, d, 0) < 0)
        return -1;
    if (d->n == 0)
        return beam_req_bad(r, "bundles", "must not be all zero"), -1;
    return 0;
}
