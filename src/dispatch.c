/* dispatch.c — request handlers: field checks, then the owning module. */
#include "dispatch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors.h"
#include "cluster.h"
#include "port.h"
#include "session.h"
#include "log.h"
#include "objects.h"
#include "placement.h"
#include "procs.h"
#include "sentcalls.h"
#include "fields.h"
#include "status.h"

typedef beam_req_t req_t;

/* The handlers below read fields through fields.h and reach the views of
 * status.h by the short names they have always used. */
#define bad beam_req_bad
#define check beam_req_check
#define dup_str beam_dup_str
#define dup_bin beam_dup_bin
#define has_nul beam_has_nul
#define refs(r, out) beam_req_refs(r, out)
#define id_list beam_req_id_list
#define timeout_field beam_req_timeout
#define has_repeat beam_has_repeat
#define str_array beam_req_str_array
#define env_map beam_req_env
#define add_resource_map beam_req_resource_map
#define demand_field beam_req_demand
#define name_field beam_req_name
#define actor_options beam_req_actor_options
#define bundle_demand beam_req_bundle
#define NAME_MAX_LEN BEAM_NAME_MAX_LEN
#define op_status beam_status
#define op_pg_table beam_status_pg_table

/* A payload bin to keep, as a buffer reference the caller owns: the frame's
 * own buffer when it has one and the payload is most of it (no copy), else a
 * copy. NULL when out of memory. */
static beam_buf_t *keep_bin(beam_req_t *r, const char *s, uint32_t n)
{
    if (r->frame_buf && (size_t)n * 2 >= r->frame_buf->len)
        return beam_buf_ref(r->frame_buf);
    beam_buf_t *b = beam_buf_new(n);
    if (b)
        memcpy(b->data, s, n);
    return b;
}


/* --- hello --- */

static void op_hello(req_t *r)
{
    beam_port_t *c = r->conn;
    const char *role, *token;
    uint32_t role_len, token_len;
    int64_t pid = 0;
    if (c->role != BEAM_ROLE_NONE) {
        beam_port_reply_error(c, r->msgid, "bad_request", "hello was already said on this connection");
        return;
    }
    int logs = 1;
    if (check(r, beam_field_str(r->params, "role", &role, &role_len), "role", "must be a str", 1) ||
        check(r, beam_field_int(r->params, "pid", &pid), "pid", "must be an int", 0) ||
        check(r, beam_field_bool(r->params, "logs", &logs), "logs", "must be a bool", 0))
        return;
    c->no_logs = !logs;
    int kind = beam_str_eq(role, role_len, "driver") ? BEAM_ROLE_DRIVER
             : beam_str_eq(role, role_len, "worker") ? BEAM_ROLE_WORKER
             : beam_str_eq(role, role_len, "ctl")    ? BEAM_ROLE_CTL
                                                     : BEAM_ROLE_NONE;
    if (kind == BEAM_ROLE_NONE) {
        bad(r, "role", "must be driver, worker or ctl");
        return;
    }
    beam_actor_t *a = NULL;
    if (kind == BEAM_ROLE_WORKER) {
        const char *actor;
        if (check(r, beam_field_id(r->params, "actor", BEAM_ACTOR_ID_SIZE, &actor), "actor",
                  "must be a 16-byte bin", 1) ||
            check(r, beam_field_str(r->params, "token", &token, &token_len), "token", "must be a str", 1))
            return;
        char tok[64];
        snprintf(tok, sizeof tok, "%.*s", (int)(token_len < 63 ? token_len : 63), token);
        a = beam_actor_find(r->node, actor);
        if (!a || beam_actor_attach_worker(r->node, a, c, tok) < 0) {
            beam_port_reply_error(c, r->msgid, "denied", "no actor is waiting for this worker");
            beam_port_close(c, "a worker hello that matched no starting actor");
            return;
        }
    }
    c->role = kind;
    if (kind != BEAM_ROLE_WORKER)
        c->job = c->id;
    /* the client's own node: the head itself, or the member it came through */
    const beam_member_t *m = c->member ? c->member : r->node->self;
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_reply_ok(&enc, r->msgid);
    msgpack_pack_map(&enc.pk, 8);
    beam_pack_key(&enc.pk, "node_id");
    beam_pack_bin(&enc.pk, m->node_id, BEAM_NODE_ID_SIZE);
    beam_pack_key(&enc.pk, "node_index");
    msgpack_pack_uint32(&enc.pk, m->index);
    beam_pack_key(&enc.pk, "conn");
    msgpack_pack_uint32(&enc.pk, c->id);
    beam_pack_key(&enc.pk, "job");
    msgpack_pack_uint32(&enc.pk, c->job);
    beam_pack_key(&enc.pk, "node_ip");
    beam_pack_str(&enc.pk, m->ip);
    beam_pack_key(&enc.pk, "version");
    beam_pack_str(&enc.pk, BEAM_VERSION);
    beam_pack_key(&enc.pk, "socket");
    beam_pack_str(&enc.pk, m->socket);
    beam_pack_key(&enc.pk, "pid");
    msgpack_pack_int64(&enc.pk, (int64_t)getpid());
    beam_enc_end(&enc, 0);
    beam_port_send_enc(c, &enc);
    (void)pid;
    /* a worker's first push (init) follows the reply */
    if (a)
        beam_actor_send_init(r->node, a);
}

/* --- objects --- */

/* Makes a new object held by the requesting connection. */
static beam_object_t *new_object(req_t *r, const char *id)
{
    beam_object_t *o = beam_object_create(r->node, id);
    if (!o) {
        beam_port_reply_error(r->conn, r->msgid, "exists", "object id is already in use");
        return NULL;
    }
    if (beam_port_hold(&r->conn->held_objects, id, BEAM_OBJECT_ID_SIZE) == 1)
        beam_object_hold(r->node, o);
    return o;
}

static void op_put(req_t *r)
{
    const char *id, *data;
    uint32_t len;
    beam_refs_t rf;
    if (check(r, beam_field_id(r->params, "obj", BEAM_OBJECT_ID_SIZE, &id), "obj", "must be a 28-byte bin", 1) ||
        check(r, beam_field_bin(r->params, "data", &data, &len), "data", "must be a bin", 1) ||
        refs(r, &rf) < 0)
        return;
    beam_buf_t *kept = keep_bin(r, data, len);
    if (!kept) {
        beam_refs_free(&rf);
        beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
        return;
    }
    beam_object_t *o = new_object(r, id);
    if (!o) {
        beam_buf_unref(kept);
        beam_refs_free(&rf);
        return;
    }
    beam_object_complete_buf(r->node, o, BEAM_OBJ_OK, kept, kept == r->frame_buf ? data : kept->data, len, &rf);
    beam_port_reply_empty(r->conn, r->msgid);
}

static void op_get(req_t *r)
{
    const msgpack_object_array *ids;
    int64_t ms;
    if (id_list(r, "objs", &ids) < 0 || timeout_field(r, &ms) < 0)
        return;
    if (r->msgid == 0) {
        bad(r, "msgid", "must not be 0 for get");
        return;
    }
    if (beam_waiter_start(r->node, r->conn, r->msgid, BEAM_WAIT_GET, ids, 0, ms) < 0)
        beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
}

static void op_wait(req_t *r)
{
    const msgpack_object_array *ids;
    int64_t ms, num = 1;
    if (id_list(r, "objs", &ids) < 0 || timeout_field(r, &ms) < 0 ||
        check(r, beam_field_int(r->params, "num_returns", &num), "num_returns", "must be an int", 0))
        return;
    if (num < 1 || num > ids->size) {
        bad(r, "num_returns", "must be between 1 and the number of objects");
        return;
    }
    int dup = has_repeat(ids);
    if (dup < 0) {
        beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
        return;
    }
    if (dup) {
        bad(r, "objs", "must not repeat an id (wait requires unique refs)");
        return;
    }
    if (r->msgid == 0) {
        bad(r, "msgid", "must not be 0 for wait");
        return;
    }
    if (beam_waiter_start(r->node, r->conn, r->msgid, BEAM_WAIT_WAIT, ids, (uint32_t)num, ms) < 0)
        beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
}

/* hold and release share their shape: arrays of object and actor ids. */
static void hold_or_release(req_t *r, int hold)
{
    beam_refs_t rf;
    if (refs(r, &rf) < 0)
        return;
    beam_port_t *c = r->conn;
    for (uint32_t i = 0; i < rf.nobjs; i++) {
        const char *id = rf.objs + (size_t)i * BEAM_OBJECT_ID_SIZE;
        beam_object_t *o = beam_object_find(r->node, id);
        if (hold) {
            if (o && beam_port_hold(&c->held_objects, id, BEAM_OBJECT_ID_SIZE) == 1)
                beam_object_hold(r->node, o);
        } else if (beam_port_unhold(&c->held_objects, id, BEAM_OBJECT_ID_SIZE) && o) {
            beam_object_unhold(r->node, o);
        }
    }
    for (uint32_t i = 0; i < rf.nactors; i++) {
        const char *id = rf.actors + (size_t)i * BEAM_ACTOR_ID_SIZE;
        beam_actor_t *a = beam_actor_find(r->node, id);
        if (hold) {
            if (a && beam_port_hold(&c->held_actors, id, BEAM_ACTOR_ID_SIZE) == 1)
                beam_actor_hold(r->node, a);
        } else if (beam_port_unhold(&c->held_actors, id, BEAM_ACTOR_ID_SIZE) && a) {
            beam_actor_unhold(r->node, a);
        }
    }
    beam_refs_free(&rf);
    beam_port_reply_empty(c, r->msgid);
}

static void op_hold(req_t *r) { hold_or_release(r, 1); }
static void op_release(req_t *r) { hold_or_release(r, 0); }

/* --- actors --- */

static void op_create_actor(req_t *r)
{
    const char *id, *cls, *cdata, *args, *python, *cwd = "";
    uint32_t cls_len, cdata_len, args_len, python_len, cwd_len = 0;
    char nm[NAME_MAX_LEN + 1], ns[NAME_MAX_LEN + 1], job_ns[NAME_MAX_LEN + 1];
    int noset = 0, capture = 0;
    int64_t bundle_index = -1;
    double place_cpus = 0;
    const char *pg_id = NULL;
    beam_pg_t *pg = NULL;
    beam_demand_t demand;
    beam_actor_spec_t spec;
    beam_actor_options_t opts;
    memset(&spec, 0, sizeof spec);
    if (check(r, beam_field_id(r->params, "actor", BEAM_ACTOR_ID_SIZE, &id), "actor", "must be a 16-byte bin", 1) ||
        check(r, beam_field_str(r->params, "class_name", &cls, &cls_len), "class_name", "must be a str", 1) ||
        check(r, beam_field_bin(r->params, "class_data", &cdata, &cdata_len), "class_data", "must be a bin", 1) ||
        check(r, beam_field_bin(r->params, "args", &args, &args_len), "args", "must be a bin", 1) ||
        check(r, beam_field_str(r->params, "python", &python, &python_len), "python", "must be a str", 1) ||
        check(r, beam_field_str(r->params, "cwd", &cwd, &cwd_len), "cwd", "must be a str", 0) ||
        name_field(r, "name", nm, 0) < 0 || name_field(r, "namespace", ns, 0) < 0 ||
        name_field(r, "job_namespace", job_ns, 0) < 0 || actor_options(r, &opts) < 0 ||
        check(r, beam_field_bool(r->params, "noset_cuda", &noset), "noset_cuda", "must be a bool", 0) ||
        check(r, beam_field_id(r->params, "placement_group", BEAM_PG_ID_SIZE, &pg_id), "placement_group",
              "must be an 18-byte bin", 0) ||
        check(r, beam_field_int(r->params, "bundle_index", &bundle_index), "bundle_index", "must be an int", 0) ||
        check(r, beam_field_bool(r->params, "capture_child_tasks", &capture), "capture_child_tasks",
              "must be a bool", 0) ||
        check(r, beam_field_float(r->params, "placement_cpus", &place_cpus), "placement_cpus", "must be a number",
              0) ||
        demand_field(r, &demand) < 0)
        return;
    if (!(place_cpus >= 0 && place_cpus <= 1e9)) {
        bad(r, "placement_cpus", "must be >= 0");
        return;
    }
    if (pg_id) {
        pg = beam_pg_find(r->node, pg_id);
        if (!pg) {
            beam_port_reply_error(r->conn, r->msgid, "not_found", "no such placement group");
            return;
        }
        /* (a removed group's row keeps no bundles: the actor dies with it) */
        if (bundle_index < -1 || (pg->state != BEAM_PG_REMOVED && bundle_index >= (int64_t)pg->nbundles)) {
            bad(r, "bundle_index", "is outside the placement group's bundles");
            return;
        }
    }
    if ((opts.has_affinity || opts.spread) && pg) {
        bad(r, opts.spread ? "spread" : "node_id", "and placement_group exclude each other");
        return;
    }
    if (opts.has_affinity && opts.spread) {
        bad(r, "spread", "and node_id exclude each other");
        return;
    }
    if (cls_len == 0 || cls_len > 256 || has_nul(cls, cls_len) || python_len == 0 || has_nul(python, python_len) ||
        has_nul(cwd, cwd_len)) {
        bad(r, "class_name", "python and cwd must be str without NUL (class_name 1..256 bytes)");
        return;
    }
    if (beam_actor_find(r->node, id)) {
        beam_port_reply_error(r->conn, r->msgid, "exists", "actor id is already in use");
        return;
    }
    if (*nm && beam_actor_find_name(r->node, ns, nm)) {
        beam_port_reply_error(r->conn, r->msgid, "exists", "The name %s (namespace=%s) is already taken.", nm, ns);
        return;
    }
    if (!(spec.sys_path = str_array(r, "sys_path")))
        return;
    if (!(spec.env = env_map(r))) {
        beam_strv_free(spec.sys_path);
        return;
    }
    if (refs(r, &spec.refs) < 0) {
        spec.refs = (beam_refs_t){0};
        goto fail_quiet;
    }
    spec.class_data = dup_bin(cdata, cdata_len);
    spec.class_len = cdata_len;
    spec.args = dup_bin(args, args_len);
    spec.args_len = args_len;
    spec.python = dup_str(python, python_len);
    spec.cwd = dup_str(cwd, cwd_len);
    spec.noset_cuda = noset;
    spec.place_cpu = beam_res_units(place_cpus);
    char *class_name = dup_str(cls, cls_len);
    opts.name = strdup(nm);
    opts.namespace = strdup(ns);
    opts.job_namespace = strdup(job_ns);
    if (!spec.class_data || !spec.args || !spec.python || !spec.cwd || !class_name || !opts.name ||
        !opts.namespace || !opts.job_namespace) {
        free(class_name);
        beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
        goto fail_quiet;
    }
    int rc = beam_actor_create(r->node, r->conn, id, class_name, &opts, &spec, &demand, pg,
                               (int)bundle_index, capture);
    if (rc < 0) {
        free(class_name);
        beam_port_reply_error(r->conn, r->msgid, rc == -EEXIST ? "exists" : "internal",
                              "the actor could not be created: %s", strerror(-rc));
        goto fail_quiet;
    }
    beam_port_reply_empty(r->conn, r->msgid);
    return;
fail_quiet:
    free(opts.name);
    free(opts.namespace);
    free(opts.job_namespace);
    free(spec.class_data);
    free(spec.args);
    free(spec.python);
    free(spec.cwd);
    beam_refs_free(&spec.refs);
    beam_strv_free(spec.sys_path);
    beam_strv_free(spec.env);
}

static void op_submit(req_t *r)
{
    const char *actor, *obj, *method, *args;
    uint32_t method_len, args_len;
    beam_refs_t rf;
    if (check(r, beam_field_id(r->params, "actor", BEAM_ACTOR_ID_SIZE, &actor), "actor", "must be a 16-byte bin", 1) ||
        check(r, beam_field_id(r->params, "obj", BEAM_OBJECT_ID_SIZE, &obj), "obj", "must be a 28-byte bin", 1) ||
        check(r, beam_field_str(r->params, "method", &method, &method_len), "method", "must be a str", 1) ||
        check(r, beam_field_bin(r->params, "args", &args, &args_len), "args", "must be a bin", 1))
        return;
    if (method_len == 0 || method_len > 1024 || has_nul(method, method_len)) {
        bad(r, "method", "must be a name of 1..1024 bytes");
        return;
    }
    if (refs(r, &rf) < 0)
        return;
    beam_object_t *o = new_object(r, obj);
    if (!o) {
        beam_refs_free(&rf);
        return;
    }
    beam_actor_t *a = beam_actor_find(r->node, actor);
    if (!a) {
        beam_refs_free(&rf);
        beam_object_fail(r->node, o, BEAM_OBJ_ACTOR_DIED,
                         "The actor died unexpectedly before finishing this task: beamd knows no such actor "
                         "(it ended and was forgotten, or never existed).");
        beam_port_reply_empty(r->conn, r->msgid);
        return;
    }
    char *m = dup_str(method, method_len);
    beam_buf_t *kept = keep_bin(r, args, args_len);
    if (!m || !kept) {
        free(m);
        beam_buf_unref(kept);
        beam_refs_free(&rf);
        beam_object_fail(r->node, o, BEAM_OBJ_LOST, "beamd ran out of memory queueing the call");
        beam_port_reply_empty(r->conn, r->msgid); /* the object carries the failure */
        return;
    }
    beam_actor_submit(r->node, a, obj, m, kept, kept == r->frame_buf ? args : kept->data, args_len, &rf);
    beam_port_reply_empty(r->conn, r->msgid);
}

static void op_kill(req_t *r)
{
    const char *actor;
    int no_restart = 1;
    if (check(r, beam_field_id(r->params, "actor", BEAM_ACTOR_ID_SIZE, &actor), "actor", "must be a 16-byte bin", 1) ||
        check(r, beam_field_bool(r->params, "no_restart", &no_restart), "no_restart", "must be a bool", 0))
        return;
    beam_actor_t *a = beam_actor_find(r->node, actor);
    if (a) /* local: a kill from its worker's member cuts its local calls (sentcalls.h) */
        beam_actor_cut_local(r->node, a, r->conn->member);
    if (a)
        beam_actor_kill(r->node, a, "The actor is dead because it was killed by `ray.kill`.");
    beam_port_reply_empty(r->conn, r->msgid);
}

static void op_get_actor(req_t *r)
{
    char nm[NAME_MAX_LEN + 1], ns[NAME_MAX_LEN + 1];
    const char *name;
    uint32_t len;
    if (check(r, beam_field_str(r->params, "name", &name, &len), "name", "must be a str", 1) ||
        name_field(r, "namespace", ns, 0) < 0)
        return;
    /* a name longer than any create_actor takes names no actor: not found */
    snprintf(nm, sizeof nm, "%.*s", (int)(len < NAME_MAX_LEN ? len : NAME_MAX_LEN), name);
    beam_actor_t *a = len > NAME_MAX_LEN || has_nul(name, len) ? NULL : beam_actor_find_name(r->node, ns, nm);
    if (!a) {
        beam_port_reply_error(r->conn, r->msgid, "not_found",
                              "Failed to look up actor with name '%s'. This could because 1. You are trying to look "
                              "up a named actor you didn't create. 2. The named actor died. 3. You did not use a "
                              "namespace matching the namespace of the actor.", nm);
        return;
    }
    if (beam_port_hold(&r->conn->held_actors, a->id, BEAM_ACTOR_ID_SIZE) == 1)
        beam_actor_hold(r->node, a);
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_reply_ok(&enc, r->msgid);
    msgpack_pack_map(&enc.pk, 2);
    beam_pack_key(&enc.pk, "actor");
    beam_pack_bin(&enc.pk, a->id, BEAM_ACTOR_ID_SIZE);
    beam_pack_key(&enc.pk, "class_name");
    beam_pack_str(&enc.pk, a->class_name);
    beam_enc_end(&enc, 0);
    beam_port_send_enc(r->conn, &enc);
}

/* --- placement groups --- */

static void op_pg_create(req_t *r)
{
    const char *id, *strategy, *name = "";
    uint32_t slen, name_len = 0;
    int detached = 0;
    const msgpack_object_array *bundles;
    if (check(r, beam_field_id(r->params, "pg", BEAM_PG_ID_SIZE, &id), "pg", "must be an 18-byte bin", 1) ||
        check(r, beam_field_str(r->params, "strategy", &strategy, &slen), "strategy", "must be a str", 1) ||
        check(r, beam_field_array(r->params, "bundles", &bundles), "bundles", "must be an array of maps", 1) ||
        check(r, beam_field_str(r->params, "name", &name, &name_len), "name", "must be a str", 0) ||
        check(r, beam_field_bool(r->params, "detached", &detached), "detached", "must be a bool", 0))
        return;
    int strat = beam_pg_strategy(strategy, slen);
    if (strat < 0)
        {
            bad(r, "strategy", "must be PACK, SPREAD, STRICT_PACK or STRICT_SPREAD");
            return;
        }
    if (bundles->size == 0 || bundles->size > BEAM_PG_MAX_BUNDLES)
        {
            bad(r, "bundles", "must hold 1..1024 bundles");
            return;
        }
    if (has_nul(name, name_len) || name_len > 1024)
        {
            bad(r, "name", "must be a str of at most 1024 bytes without NUL");
            return;
        }
    if (beam_pg_find(r->node, id)) {
        beam_port_reply_error(r->conn, r->msgid, "exists", "placement group id is already in use");
        return;
    }
    beam_demand_t *d = calloc(bundles->size, sizeof *d);
    char *nm = dup_str(name, name_len);
    if (!d || !nm) {
        free(d);
        free(nm);
        beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
        return;
    }
    for (uint32_t i = 0; i < bundles->size; i++)
        if (bundle_demand(r, &bundles->ptr[i], &d[i]) < 0) {
            free(d);
            free(nm);
            return;
        }
    int rc = beam_pg_create(r->node, r->conn, id, nm, strat, d, bundles->size, detached);
    free(d);
    if (rc < 0) {
        free(nm);
        beam_port_reply_error(r->conn, r->msgid, "internal", "the placement group could not be created: %s",
                              strerror(-rc));
        return;
    }
    beam_port_reply_empty(r->conn, r->msgid);
}

static beam_pg_t *pg_field(req_t *r)
{
    const char *id;
    if (check(r, beam_field_id(r->params, "pg", BEAM_PG_ID_SIZE, &id), "pg", "must be an 18-byte bin", 1))
        return NULL;
    beam_pg_t *pg = beam_pg_find(r->node, id);
    if (!pg)
        beam_port_reply_error(r->conn, r->msgid, "not_found", "no such placement group");
    return pg;
}

static void op_pg_remove(req_t *r)
{
    beam_pg_t *pg = pg_field(r);
    if (!pg)
        return;
    /* answered once the group's workers are gone and its bundles are back */
    beam_pg_remove(r->node, pg, r->conn, r->msgid);
}

static void op_pg_ready(req_t *r)
{
    const char *obj, *value = "";
    uint32_t len = 0;
    beam_pg_t *pg = pg_field(r);
    if (!pg ||
        check(r, beam_field_id(r->params, "obj", BEAM_OBJECT_ID_SIZE, &obj), "obj", "must be a 28-byte bin", 1) ||
        check(r, beam_field_bin(r->params, "value", &value, &len), "value", "must be a bin", 1))
        return;
    char *copy = dup_bin(value, len);
    if (!copy) {
        beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
        return;
    }
    beam_object_t *o = new_object(r, obj);
    if (!o) {
        free(copy);
        return;
    }
    if (beam_pg_ready(r->node, pg, obj, copy, len) < 0) {
        free(copy);
        beam_object_fail(r->node, o, BEAM_OBJ_LOST, "beamd ran out of memory waiting for the placement group");
        beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
        return;
    }
    beam_port_reply_empty(r->conn, r->msgid);
}

/* --- worker ops --- */

static beam_actor_t *worker_actor(req_t *r)
{
    if (r->conn->role != BEAM_ROLE_WORKER || !r->conn->actor) {
        beam_port_reply_error(r->conn, r->msgid, "denied", "only an actor's worker may send this");
        return NULL;
    }
    return r->conn->actor;
}

static void op_actor_ready(req_t *r)
{
    beam_actor_t *a = worker_actor(r);
    const char *error = "";
    uint32_t len = 0;
    int ok;
    if (!a || check(r, beam_field_bool(r->params, "ok", &ok), "ok", "must be a bool", 1) ||
        check(r, beam_field_str(r->params, "error", &error, &len), "error", "must be a str", 0))
        return;
    beam_actor_ready(r->node, a, ok, error, len);
    beam_port_reply_empty(r->conn, r->msgid);
}

/* The worker waits in ray.get/ray.wait ("blocked": true) or is back. */
static void op_blocked(req_t *r)
{
    beam_actor_t *a = worker_actor(r);
    int blocked;
    if (!a || check(r, beam_field_bool(r->params, "blocked", &blocked), "blocked", "must be a bool", 1))
        return;
    beam_actor_set_blocked(r->node, a, blocked);
    beam_port_reply_empty(r->conn, r->msgid);
}

static void op_task_done(req_t *r)
{
    beam_actor_t *a = worker_actor(r);
    const char *obj, *data;
    uint32_t len;
    int64_t status;
    int exiting = 0;
    beam_refs_t rf;
    if (!a || check(r, beam_field_id(r->params, "obj", BEAM_OBJECT_ID_SIZE, &obj), "obj", "must be a 28-byte bin", 1) ||
        check(r, beam_field_int(r->params, "status", &status), "status", "must be an int", 1) ||
        check(r, beam_field_bin(r->params, "data", &data, &len), "data", "must be a bin", 1) ||
        check(r, beam_field_bool(r->params, "exiting", &exiting), "exiting", "must be a bool", 0))
        return;
    if (status != BEAM_OBJ_OK && status != BEAM_OBJ_TASK_ERROR) {
        bad(r, "status", "must be 0 (ok) or 1 (task error)");
        return;
    }
    if (refs(r, &rf) < 0)
        return;
    beam_buf_t *kept = keep_bin(r, data, len);
    if (!kept) {
        beam_refs_free(&rf);
        beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
        return;
    }
    int dead = a->state == BEAM_ACTOR_DEAD;
    if (exiting)
        a->exiting = 1; /* its worker ends after this: never pooled */
    if (beam_actor_task_done(r->node, a, obj, (int)status, kept, kept == r->frame_buf ? data : kept->data, len,
                             &rf) < 0 && !dead) {
        /* (a dead actor's late results are dropped quietly: its calls already failed) */
        beam_port_reply_error(r->conn, r->msgid, "not_found", "this worker was given no call with that id");
        return;
    }
    beam_port_reply_empty(r->conn, r->msgid);
}

/* --- the table --- */

typedef struct op_s {
    const char *name;
    void (*fn)(req_t *r);
} op_t;

static const op_t ops[] = {
    {"hello", op_hello},         {"put", op_put},           {"get", op_get},
    {"wait", op_wait},           {"submit", op_submit},     {"create_actor", op_create_actor},
    {"kill", op_kill},           {"hold", op_hold},         {"release", op_release},
    {"status", op_status},       {"get_actor", op_get_actor}, {"actor_ready", op_actor_ready},
    {"task_done", op_task_done}, {"pg_create", op_pg_create}, {"pg_remove", op_pg_remove},
    {"pg_ready", op_pg_ready},   {"pg_table", op_pg_table},   {"blocked", op_blocked},
    {NULL, NULL},
};

void beam_dispatch(beam_port_t *c, const char *frame, size_t len)
{
    beam_dispatch_frame(c, frame, len, NULL);
}

void beam_dispatch_frame(beam_port_t *c, const char *frame, size_t len, beam_buf_t *buf)
{
    beam_msg_t msg;
    char err[200];
    if (beam_port_closing(c))
        return;
    if (beam_msg_parse(frame, len, &c->node->limits, &msg, err, sizeof err) < 0) {
        beam_port_reply_error(c, 0, "bad_request", "protocol error: %s", err);
        beam_port_close(c, err);
        return;
    }
    if (msg.type != BEAM_MSG_REQUEST) {
        beam_port_reply_error(c, 0, "bad_request", "protocol error: clients send requests only");
        beam_port_close(c, "a client sent a reply or push");
        beam_msg_destroy(&msg);
        return;
    }
    req_t r = {.conn = c, .node = c->node, .msgid = msg.msgid, .params = &msg.params, .frame_buf = buf};
    const op_t *op = ops;
    while (op->name && !beam_str_eq(msg.op, msg.op_len, op->name))
        op++;
    if (!op->name)
        beam_port_reply_error(c, msg.msgid, "unknown_op", "unknown op '%.*s'", (int)(msg.op_len < 64 ? msg.op_len : 64),
                              msg.op);
    else if (c->role == BEAM_ROLE_NONE && op->fn != op_hello)
        beam_port_reply_error(c, msg.msgid, "denied", "say hello first");
    else
        op->fn(&r);
    beam_msg_destroy(&msg);
}
