/* request.c — a request's fields as the handlers read them: the field table's
 * checker, the error reply for a bad field, copies of what a handler keeps,
 * and create_actor's and pg_create's options (names, env, resource
 * amounts). Every function that takes a request replies itself when it
 * fails, and returns 0 or a negative errno. */
#include "request.h"

#include "shm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void beam_req_bad(beam_req_t *r, const char *field, const char *what)
{
    beam_port_reply_error(r->conn, r->msgid, "bad_request", "field '%s' %s", field, what);
}

/* beam_req_bad, then -EINVAL for the caller to return. */
static int refuse(beam_req_t *r, const char *field, const char *what)
{
    beam_req_bad(r, field, what);
    return -EINVAL;
}

/* Reports a field error from a beam_field_* code and returns -EINVAL, else 0. */
static int req_check(beam_req_t *r, int rc, const char *field, const char *what, int required)
{
    if (rc == 0 || (rc == -ENOENT && !required))
        return 0;
    beam_req_bad(r, field, rc == -ENOENT ? "is required" : what);
    return -EINVAL;
}

/* --- the field table --- */

int beam_req_fields(beam_req_t *r, const beam_field_spec_t *spec, size_t n, beam_field_val_t *out)
{
    char buf[64];
    const char *field = NULL, *what = NULL;
    if (beam_fields_check(r->params, spec, n, out, &field, &what, buf, sizeof buf) < 0)
        return refuse(r, field, what);
    return 0;
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

int beam_req_refs(beam_req_t *r, beam_refs_t *out)
{
    char err[160];
    if (beam_refs_parse(r->params, out, err, sizeof err) < 0) {
        beam_port_reply_error(r->conn, r->msgid, "bad_request", "%s", err);
        return -EINVAL;
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
        return -ENOMEM;
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
    if (req_check(r, rc, field, "must be an array of str", 0))
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
    if (req_check(r, rc, "env", "must be a map of str to str", 0))
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
static int resource_map(beam_req_t *r, const char *field, const msgpack_object_map *m, beam_demand_t *d, int plain)
{
    if (m->size > MAX_RESOURCE_NAMES)
        return refuse(r, field, "must name at most 256 resources");
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key, *v = &m->ptr[i].val;
        double amount;
        int64_t units = 0;
        if (k->type != MSGPACK_OBJECT_STR || k->via.str.size == 0 || k->via.str.size >= BEAM_RES_NAME_LEN ||
            beam_has_nul(k->via.str.ptr, k->via.str.size))
            return refuse(r, field, "resource names must be str of 1..127 bytes");
        for (uint32_t j = 0; j < i; j++)
            if (m->ptr[j].key.via.str.size == k->via.str.size &&
                memcmp(m->ptr[j].key.via.str.ptr, k->via.str.ptr, k->via.str.size) == 0)
                return refuse(r, field, "must not name a resource twice");
        char name[BEAM_RES_NAME_LEN];
        snprintf(name, sizeof name, "%.*s", (int)k->via.str.size, k->via.str.ptr);
        if (plain && (strcmp(name, "CPU") == 0 || strcmp(name, "GPU") == 0))
            return refuse(r, field, "must not hold CPU or GPU: use num_cpus and num_gpus "
                                 "(Use the 'num_cpus' and 'num_gpus' keyword instead of 'CPU' and 'GPU' "
                                 "in 'resources' keyword)");
        if (plain && (strcmp(name, "memory") == 0 || strcmp(name, "object_store_memory") == 0))
            return refuse(r, field, "must not hold memory or object_store_memory (The resources dictionary "
                                 "must not contain the key 'memory' or 'object_store_memory')");
        if (v->type == MSGPACK_OBJECT_FLOAT64 || v->type == MSGPACK_OBJECT_FLOAT32)
            amount = v->via.f64;
        else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            amount = (double)v->via.u64;
        else
            return refuse(r, field, "amounts must be numbers >= 0");
        int rc = beam_res_amount(amount, &units);
        if (rc == -ERANGE)
            return refuse(r, field, "amounts must be 0, or from 0.0001 up to 1e14 (Ray's range)");
        if (rc < 0)
            return refuse(r, field, "amounts must be numbers >= 0");
        if (beam_demand_add(d, name, units) < 0)
            return refuse(r, field, "must name at most 32 resources above zero");
    }
    return 0;
}

/* One of num_cpus, num_gpus, memory (a checked number, 0 when absent) as
 * a resources= amount of name. */
static int demand_number(beam_req_t *r, const char *field, double amount, const char *name, beam_demand_t *d)
{
    int64_t units = 0;
    int rc = beam_res_amount(amount, &units);
    if (rc == -ERANGE)
        return refuse(r, field, "must be 0, or from 0.0001 up to 1e14 (Ray's range)");
    if (rc < 0 || beam_demand_add(d, name, units) < 0)
        return refuse(r, field, "must be a number >= 0");
    return 0;
}

enum { D_CPUS, D_GPUS, D_MEMORY, D_RESOURCES };
static const beam_field_spec_t demand_fields[] = {
    [D_CPUS] = BEAM_FIELD("num_cpus", BEAM_F_NUMBER, 0),
    [D_GPUS] = BEAM_FIELD("num_gpus", BEAM_F_NUMBER, 0),
    [D_MEMORY] = BEAM_FIELD("memory", BEAM_F_NUMBER, 0),
    [D_RESOURCES] = BEAM_FIELD("resources", BEAM_F_MAP, 0, .what = "must be a map of str to number"),
};

/* num_cpus, num_gpus, memory and resources= as one demand (d is cleared). */
static int demand(beam_req_t *r, beam_demand_t *d)
{
    beam_field_val_t v[4];
    memset(d, 0, sizeof *d);
    int rc = BEAM_REQ_FIELDS(r, demand_fields, v);
    if (rc == 0)
        rc = demand_number(r, "num_cpus", v[D_CPUS].d, "CPU", d);
    if (rc == 0)
        rc = demand_number(r, "num_gpus", v[D_GPUS].d, "GPU", d);
    if (rc == 0)
        rc = demand_number(r, "memory", v[D_MEMORY].d, "memory", d);
    if (rc == 0 && v[D_RESOURCES].present)
        rc = resource_map(r, "resources", v[D_RESOURCES].m, d, 1);
    return rc;
}

enum { O_DETACHED, O_CONCURRENCY, O_NODE, O_SOFT, O_SPREAD, O_TASK, O_RESTARTS, O_TASK_RETRIES, O_NOPTIONS };
static const beam_field_spec_t actor_option_fields[] = {
    [O_DETACHED] = BEAM_FIELD("detached", BEAM_F_BOOL, 0),
    [O_CONCURRENCY] = BEAM_FIELD("max_concurrency", BEAM_F_INT, 0, .def = 1, .min = 1, .max = 100000,
                                 .bound = "must be 1..100000"),
    [O_NODE] = BEAM_FIELD("node_id", BEAM_F_ID, 0, .size = BEAM_NODE_ID_SIZE),
    [O_SOFT] = BEAM_FIELD("soft", BEAM_F_BOOL, 0),
    [O_SPREAD] = BEAM_FIELD("spread", BEAM_F_BOOL, 0),
    [O_TASK] = BEAM_FIELD("task", BEAM_F_BOOL, 0),
    [O_RESTARTS] = BEAM_FIELD("max_restarts", BEAM_F_INT, 0, .min = -1, .max = INT32_MAX,
                              .bound = "must be -1 (without end) or >= 0"),
    [O_TASK_RETRIES] = BEAM_FIELD("max_task_retries", BEAM_F_INT, 0, .min = -1, .max = INT32_MAX,
                                  .bound = "must be -1 (without end) or >= 0"),
};

/* The scheduling options of create_actor beyond the placement group:
 * lifetime, concurrency, node affinity and restarts. */
static int actor_options(beam_req_t *r, beam_actor_options_t *o)
{
    beam_field_val_t v[O_NOPTIONS];
    memset(o, 0, sizeof *o);
    if (BEAM_REQ_FIELDS(r, actor_option_fields, v) < 0)
        return -EINVAL;
    o->detached = (int)v[O_DETACHED].i;
    o->max_concurrency = (int)v[O_CONCURRENCY].i;
    o->affinity_soft = (int)v[O_SOFT].i;
    o->spread = (int)v[O_SPREAD].i;
    o->task = (int)v[O_TASK].i;
    o->max_restarts = (int)v[O_RESTARTS].i;
    o->max_task_retries = (int)v[O_TASK_RETRIES].i;
    if (v[O_NODE].present) {
        o->has_affinity = 1;
        memcpy(o->affinity, v[O_NODE].s, BEAM_NODE_ID_SIZE);
    }
    return 0;
}

enum {
    CA_ACTOR, CA_CLASS, CA_CLASS_DATA, CA_ARGS, CA_PYTHON, CA_CWD, CA_NAME, CA_NS, CA_JOB_NS, CA_NOSET,
    CA_PG, CA_BUNDLE, CA_CAPTURE, CA_PLACE_CPUS, CA_NFIELDS
};
static const beam_field_spec_t create_actor_fields[] = {
    [CA_ACTOR] = BEAM_FIELD("actor", BEAM_F_ID, BEAM_F_REQUIRED, .size = BEAM_ACTOR_ID_SIZE),
    [CA_CLASS] = BEAM_FIELD("class_name", BEAM_F_STR, BEAM_F_REQUIRED),
    [CA_CLASS_DATA] = BEAM_FIELD("class_data", BEAM_F_BIN, BEAM_F_REQUIRED),
    [CA_ARGS] = BEAM_FIELD("args", BEAM_F_BIN, BEAM_F_REQUIRED),
    [CA_PYTHON] = BEAM_FIELD("python", BEAM_F_STR, BEAM_F_REQUIRED),
    [CA_CWD] = BEAM_FIELD("cwd", BEAM_F_STR, 0),
    [CA_NAME] = BEAM_FIELD_NAME("name", 0),
    [CA_NS] = BEAM_FIELD_NAME("namespace", 0),
    [CA_JOB_NS] = BEAM_FIELD_NAME("job_namespace", 0),
    [CA_NOSET] = BEAM_FIELD("noset_cuda", BEAM_F_BOOL, 0),
    [CA_PG] = BEAM_FIELD("placement_group", BEAM_F_ID, 0, .size = BEAM_PG_ID_SIZE),
    [CA_BUNDLE] = BEAM_FIELD("bundle_index", BEAM_F_INT, 0, .def = -1),
    [CA_CAPTURE] = BEAM_FIELD("capture_child_tasks", BEAM_F_BOOL, 0),
    [CA_PLACE_CPUS] = BEAM_FIELD("placement_cpus", BEAM_F_NUMBER, 0),
};

/* create_actor's checks across fields, after each field's own: the group
 * and its bundle, affinity against group and spread, the class and paths. */
static int actor_across(beam_req_t *r, const beam_field_val_t *v, beam_actor_req_t *q)
{
    const beam_field_val_t *cls = &v[CA_CLASS], *py = &v[CA_PYTHON], *cwd = &v[CA_CWD];
    const beam_actor_options_t *o = &q->opts;
    int64_t bundle = v[CA_BUNDLE].i;
    if (!(q->place_cpus >= 0 && q->place_cpus <= 1e9))
        return refuse(r, "placement_cpus", "must be >= 0");
    if (v[CA_PG].present) {
        if (!(q->pg = beam_pg_find(r->node, v[CA_PG].s))) {
            beam_port_reply_error(r->conn, r->msgid, "not_found", "no such placement group");
            return -ENOENT;
        }
        /* (a removed group's row keeps no bundles: the actor dies with it) */
        if (bundle < -1 || (q->pg->state != BEAM_PG_REMOVED && bundle >= (int64_t)q->pg->nbundles))
            return refuse(r, "bundle_index", "is outside the placement group's bundles");
    }
    if ((o->has_affinity || o->spread) && q->pg)
        return refuse(r, o->spread ? "spread" : "node_id", "and placement_group exclude each other");
    if (o->has_affinity && o->spread)
        return refuse(r, "spread", "and node_id exclude each other");
    if (cls->len == 0 || cls->len > 256 || beam_has_nul(cls->s, cls->len) || py->len == 0 ||
        beam_has_nul(py->s, py->len) || beam_has_nul(cwd->s, cwd->len))
        return refuse(r, "class_name", "python and cwd must be str without NUL (class_name 1..256 bytes)");
    return 0;
}

int beam_req_create_actor(beam_req_t *r, beam_actor_req_t *q)
{
    beam_field_val_t v[CA_NFIELDS];
    memset(q, 0, sizeof *q);
    int rc = BEAM_REQ_FIELDS(r, create_actor_fields, v);
    if (rc == 0)
        rc = actor_options(r, &q->opts);
    if (rc == 0)
        rc = demand(r, &q->demand);
    if (rc < 0)
        return rc;
    q->id = v[CA_ACTOR].s;
    q->class_name = v[CA_CLASS];
    q->class_data = v[CA_CLASS_DATA];
    q->args = v[CA_ARGS];
    q->python = v[CA_PYTHON];
    q->cwd = v[CA_CWD];
    beam_field_cstr(&v[CA_NAME], q->name, sizeof q->name);
    beam_field_cstr(&v[CA_NS], q->namespace, sizeof q->namespace);
    beam_field_cstr(&v[CA_JOB_NS], q->job_namespace, sizeof q->job_namespace);
    q->noset_cuda = (int)v[CA_NOSET].i;
    q->capture = (int)v[CA_CAPTURE].i;
    q->bundle_index = (int)v[CA_BUNDLE].i;
    q->place_cpus = v[CA_PLACE_CPUS].d;
    return actor_across(r, v, q);
}

/* A bundle: a map of resource name to amount (at least one above zero). */
int beam_req_bundle(beam_req_t *r, const msgpack_object *o, beam_demand_t *d)
{
    memset(d, 0, sizeof *d);
    if (o->type != MSGPACK_OBJECT_MAP || o->via.map.size == 0)
        return refuse(r, "bundles", "must hold non-empty maps of resource name to amount");
    int rc = resource_map(r, "bundles", &o->via.map, d, 0);
    if (rc < 0)
        return rc;
    if (d->n == 0)
        return refuse(r, "bundles", "must not be all zero");
    return 0;
}

beam_buf_t *beam_req_keep_bin(beam_req_t *r, const char *s, uint32_t n)
{
    if (r->frame_buf && (size_t)n * 2 >= r->frame_buf->len)
        return beam_buf_ref(r->frame_buf);
    beam_buf_t *b = beam_buf_new(n);
    if (b)
        memcpy(b->data, s, n);
    return b;
}

const char *beam_req_kept_data(beam_req_t *r, const beam_buf_t *kept, const char *s)
{
    return kept == r->frame_buf ? s : kept->data;
}

enum { SHM_FD, SHM_SIZE };
static const beam_field_spec_t shm_fields[] = {
    [SHM_FD] = BEAM_FIELD("shm_fd", BEAM_F_INT, 0, .def = -1, .min = -1, .max = INT32_MAX,
                          .bound = "must be a file descriptor"),
    [SHM_SIZE] = BEAM_FIELD("shm_size", BEAM_F_INT, 0, .min = 0, .max = INT64_MAX, .bound = "must be >= 0"),
};

static int adopt(beam_req_t *r, const beam_field_val_t *v, beam_buf_t **buf)
{
    beam_node_t *node = r->node;
    if (!r->conn->shm) {
        beam_req_bad(r, "shm_fd", "needs shared memory, which this connection did not turn on");
        return -1;
    }
    int rc = beam_shm_adopt(node, r->conn->pid, v[SHM_FD].i, (size_t)v[SHM_SIZE].i, buf);
    if (rc == -ENOSPC)
        beam_port_reply_error(r->conn, r->msgid, "store_full",
                              "Failed to put object in object store because it is full. Object size is %lld "
                              "bytes. Plasma store status: %zu of %zu bytes used by %u objects "
                              "(object_store_memory).",
                              (long long)v[SHM_SIZE].i, node->shm_used, node->shm_budget, node->shm_objects);
    else if (rc < 0)
        beam_port_reply_error(r->conn, r->msgid, "denied", "could not adopt the value's memfd: %s", strerror(-rc));
    return rc < 0 ? -1 : 0;
}

int beam_req_value(beam_req_t *r, const beam_field_val_t *bin, beam_buf_t **buf, const char **data, size_t *len)
{
    beam_field_val_t v[2];
    *buf = NULL;
    if (BEAM_REQ_FIELDS(r, shm_fields, v) < 0)
        return -1;
    if (v[SHM_FD].i >= 0) {
        if (adopt(r, v, buf) < 0)
            return -1;
        *data = (*buf)->data;
        *len = (*buf)->len;
        return 0;
    }
    if (!(*buf = beam_req_keep_bin(r, bin->s, bin->len))) {
        beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
        return -1;
    }
    *data = beam_req_kept_data(r, *buf, bin->s);
    *len = bin->len;
    return 0;
}
