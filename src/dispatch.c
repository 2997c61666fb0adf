/* dispatch.c — request handlers: each op's field table (checked by
 * beam_req_fields), then the owning module. Handlers reply once; each that
 * frees anything does it at its one `cleanup:`. */
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
#include "spawn.h"
#include "request.h"
#include "status.h"

typedef beam_req_t req_t;

/* Field rows the ops share. */
#define ACTOR_ID(n, fl) BEAM_FIELD((n), BEAM_F_ID, (fl), .size = BEAM_ACTOR_ID_SIZE)
#define OBJECT_ID(n, fl) BEAM_FIELD((n), BEAM_F_ID, (fl), .size = BEAM_OBJECT_ID_SIZE)
#define PG_ID(n, fl) BEAM_FIELD((n), BEAM_F_ID, (fl), .size = BEAM_PG_ID_SIZE)

static void reply_oom(req_t *r)
{
    beam_port_reply_error(r->conn, r->msgid, "internal", "out of memory");
}

/* --- hello --- */

/* Whether the client may share values in memory with this beamd (shm.h): a
 * client on this node, which keeps its values (not a member's, relayed). */
static int may_share(const req_t *r)
{
    return r->conn->member == r->node->self && !r->node->is_member;
}

enum { H_ROLE, H_PID, H_LOGS };
static const beam_field_spec_t hello_fields[] = {
    [H_ROLE] = BEAM_FIELD("role", BEAM_F_STR, BEAM_F_REQUIRED),
    [H_PID] = BEAM_FIELD("pid", BEAM_F_INT, 0),
    [H_LOGS] = BEAM_FIELD("logs", BEAM_F_BOOL, 0, .def = 1),
};
enum { HW_ACTOR, HW_TOKEN };
static const beam_field_spec_t hello_worker_fields[] = {
    [HW_ACTOR] = ACTOR_ID("actor", BEAM_F_REQUIRED),
    [HW_TOKEN] = BEAM_FIELD("token", BEAM_F_STR, BEAM_F_REQUIRED),
};

static void op_hello(req_t *r)
{
    beam_port_t *c = r->conn;
    beam_field_val_t v[3], w[2];
    if (c->role != BEAM_ROLE_NONE) {
        beam_port_reply_error(c, r->msgid, "bad_request", "hello was already said on this connection");
        return;
    }
    if (BEAM_REQ_FIELDS(r, hello_fields, v) < 0)
        return;
    const char *role = v[H_ROLE].s;
    uint32_t role_len = v[H_ROLE].len;
    int kind = beam_str_eq(role, role_len, "driver") ? BEAM_ROLE_DRIVER
             : beam_str_eq(role, role_len, "worker") ? BEAM_ROLE_WORKER
             : beam_str_eq(role, role_len, "ctl")    ? BEAM_ROLE_CTL
                                                     : BEAM_ROLE_NONE;
    if (kind == BEAM_ROLE_NONE) {
        beam_req_bad(r, "role", "must be driver, worker or ctl");
        return;
    }
    c->no_logs = !v[H_LOGS].i;
    beam_actor_t *a = NULL;
    if (kind == BEAM_ROLE_WORKER) {
        if (BEAM_REQ_FIELDS(r, hello_worker_fields, w) < 0)
            return;
        char tok[64];
        beam_field_cstr(&w[HW_TOKEN], tok, sizeof tok);
        a = beam_actor_find(r->node, w[HW_ACTOR].s);
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
    msgpack_pack_map(&enc.pk, 9);
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
    beam_pack_key(&enc.pk, "shm"); /* this node keeps its clients' values: they may share memory with it */
    msgpack_pack_int(&enc.pk, may_share(r));
    beam_enc_end(&enc, 0);
    beam_port_send_enc(c, &enc);
    /* a worker's first push (init) follows the reply */
    if (a)
        beam_actor_send_init(r->node, a);
}

/* --- objects --- */

/* The node index of the requesting client's node (hello's node_index). */
static uint32_t client_node(const req_t *r)
{
    return beam_cluster_client_node(r->node, r->conn);
}

/* Makes a new object held by the requesting connection: NULL after
 * replying when the id is not one this client made (ids.h: so no client
 * takes an id another will use) or is in use; *why says which. */
static beam_object_t *new_object(req_t *r, const char *id, const char **why)
{
    if (!beam_id_made_by(id, client_node(r), r->conn->id)) {
        *why = "the object id was not made by this client (" BEAM_ID_NOT_OWN ")";
        beam_req_bad(r, "obj", "must be an object id this client made (" BEAM_ID_NOT_OWN ")");
        return NULL;
    }
    beam_object_t *o = beam_object_create(r->node, id);
    if (!o) {
        *why = "object id is already in use";
        beam_port_reply_error(r->conn, r->msgid, "exists", "%s", *why);
        return NULL;
    }
    if (beam_port_hold(&r->conn->held_objects, id, BEAM_OBJECT_ID_SIZE) == 1)
        beam_object_hold(r->node, o);
    return o;
}

enum { PUT_OBJ, PUT_DATA, PUT_STATUS };
static const beam_field_spec_t put_fields[] = {
    [PUT_OBJ] = OBJECT_ID("obj", BEAM_F_REQUIRED),
    [PUT_DATA] = BEAM_FIELD("data", BEAM_F_BIN, BEAM_F_REQUIRED),
    /* a task error the client owns: a direct call's, promoted (docs/DESIGN.md, "Direct calls") */
    [PUT_STATUS] = BEAM_FIELD("status", BEAM_F_INT, 0, .min = BEAM_OBJ_OK, .max = BEAM_OBJ_TASK_ERROR,
                              .bound = "must be 0 (a value) or 1 (a task error)"),
};

static void op_put(req_t *r)
{
    beam_field_val_t v[3];
    beam_refs_t rf = {0};
    beam_buf_t *kept = NULL;
    const char *data;
    size_t len;
    if (BEAM_REQ_FIELDS(r, put_fields, v) < 0 || beam_req_refs(r, &rf) < 0 ||
        beam_req_value(r, &v[PUT_DATA], &kept, &data, &len) < 0)
        goto cleanup;
    const char *why;
    beam_object_t *o = new_object(r, v[PUT_OBJ].s, &why);
    if (!o)
        goto cleanup;
    beam_object_complete_buf(r->node, o, (int)v[PUT_STATUS].i, kept, data, len, &rf);
    kept = NULL;
    rf = (beam_refs_t){0};
    beam_port_reply_empty(r->conn, r->msgid);
cleanup:
    beam_buf_unref(kept);
    beam_refs_free(&rf);
}

enum { G_OBJS, G_TIMEOUT, G_NUM };
static const beam_field_spec_t wait_fields[] = {
    [G_OBJS] = BEAM_FIELD("objs", BEAM_F_IDS, BEAM_F_REQUIRED, .size = BEAM_OBJECT_ID_SIZE),
    [G_TIMEOUT] = BEAM_FIELD("timeout_ms", BEAM_F_INT, 0, .def = -1, .min = -1, .max = INT64_MAX,
                             .bound = "must be -1 (forever) or >= 0"),
    [G_NUM] = BEAM_FIELD("num_returns", BEAM_F_INT, 0, .def = 1),
};
/* get reads the first two of wait's fields */
#define GET_NFIELDS 2

static void op_get(req_t *r)
{
    beam_field_val_t v[GET_NFIELDS];
    if (beam_req_fields(r, wait_fields, GET_NFIELDS, v) < 0)
        return;
    if (r->msgid == 0) {
        beam_req_bad(r, "msgid", "must not be 0 for get");
        return;
    }
    r->node->gets++;
    if (beam_waiter_start(r->node, r->conn, r->msgid, BEAM_WAIT_GET, v[G_OBJS].a, 0, v[G_TIMEOUT].i) < 0)
        reply_oom(r);
}

static void op_wait(req_t *r)
{
    beam_field_val_t v[3];
    if (BEAM_REQ_FIELDS(r, wait_fields, v) < 0)
        return;
    const msgpack_object_array *ids = v[G_OBJS].a;
    int64_t num = v[G_NUM].i;
    if (num < 1 || num > ids->size) {
        beam_req_bad(r, "num_returns", "must be between 1 and the number of objects");
        return;
    }
    int dup = beam_has_repeat(ids);
    if (dup < 0) {
        reply_oom(r);
        return;
    }
    if (dup) {
        beam_req_bad(r, "objs", "must not repeat an id (wait requires unique refs)");
        return;
    }
    if (r->msgid == 0) {
        beam_req_bad(r, "msgid", "must not be 0 for wait");
        return;
    }
    if (beam_waiter_start(r->node, r->conn, r->msgid, BEAM_WAIT_WAIT, ids, (uint32_t)num, v[G_TIMEOUT].i) < 0)
        reply_oom(r);
}

/* hold and release share their shape: arrays of object and actor ids. */
static void hold_or_release(req_t *r, int hold)
{
    beam_refs_t rf;
    if (beam_req_refs(r, &rf) < 0)
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
    beam_actor_req_t q;
    char *class_name = NULL;
    beam_actor_spec_t spec;
    memset(&spec, 0, sizeof spec);
    if (beam_req_create_actor(r, &q) < 0)
        goto cleanup;
    if (beam_actor_find(r->node, q.id)) {
        beam_port_reply_error(r->conn, r->msgid, "exists", "actor id is already in use");
        goto cleanup;
    }
    if (*q.name && beam_actor_find_name(r->node, q.namespace, q.name)) {
        beam_port_reply_error(r->conn, r->msgid, "exists", "The name %s (namespace=%s) is already taken.", q.name,
                              q.namespace);
        goto cleanup;
    }
    if (!(spec.sys_path = beam_req_str_array(r, "sys_path")) || !(spec.env = beam_req_env(r)) ||
        beam_req_refs(r, &spec.refs) < 0)
        goto cleanup;
    spec.class_data = beam_dup_bin(q.class_data.s, q.class_data.len);
    spec.class_len = q.class_data.len;
    spec.args = beam_dup_bin(q.args.s, q.args.len);
    spec.args_len = q.args.len;
    spec.python = beam_dup_str(q.python.s, q.python.len);
    spec.cwd = beam_dup_str(q.cwd.s, q.cwd.len);
    spec.noset_cuda = q.noset_cuda;
    spec.place_cpu = beam_res_units(q.place_cpus);
    class_name = beam_dup_str(q.class_name.s, q.class_name.len);
    q.opts.name = strdup(q.name);
    q.opts.namespace = strdup(q.namespace);
    q.opts.job_namespace = strdup(q.job_namespace);
    if (!spec.class_data || !spec.args || !spec.python || !spec.cwd || !class_name || !q.opts.name ||
        !q.opts.namespace || !q.opts.job_namespace) {
        reply_oom(r);
        goto cleanup;
    }
    int rc = beam_actor_create(r->node, r->conn, q.id, class_name, &q.opts, &spec, &q.demand, q.pg, q.bundle_index,
                               q.capture);
    if (rc < 0) {
        beam_port_reply_error(r->conn, r->msgid, rc == -EEXIST ? "exists" : "internal",
                              "the actor could not be created: %s", strerror(-rc));
        goto cleanup;
    }
    beam_port_reply_empty(r->conn, r->msgid);
    return; /* the actor owns class_name, q.opts' strings and spec now */
cleanup:
    free(class_name);
    free(q.opts.name);
    free(q.opts.namespace);
    free(q.opts.job_namespace);
    free(spec.class_data);
    free(spec.args);
    free(spec.python);
    free(spec.cwd);
    beam_refs_free(&spec.refs);
    beam_strv_free(spec.sys_path);
    beam_strv_free(spec.env);
}

/* submit's table is shared with a member's local calls (fieldspec.h) */
enum { S_ACTOR = BEAM_SUBMIT_ACTOR, S_OBJ = BEAM_SUBMIT_OBJ, S_METHOD = BEAM_SUBMIT_METHOD, S_ARGS = BEAM_SUBMIT_ARGS };

static void op_submit(req_t *r)
{
    beam_field_val_t v[BEAM_SUBMIT_NFIELDS];
    beam_refs_t rf = {0};
    char *method = NULL;
    beam_buf_t *kept = NULL;
    if (beam_req_fields(r, beam_submit_fields, BEAM_SUBMIT_NFIELDS, v) < 0 || beam_req_refs(r, &rf) < 0)
        goto cleanup;
    const char *why;
    beam_object_t *o = new_object(r, v[S_OBJ].s, &why);
    if (!o) {
        /* refused: a waiter of its pushed result is answered too (an error) */
        if (v[BEAM_SUBMIT_PUSH].i)
            beam_result_push_refused(r->node, r->conn, v[S_OBJ].s, why);
        goto cleanup;
    }
    /* push: the result goes to the caller when it is ready, however it ends */
    if (v[BEAM_SUBMIT_PUSH].i && beam_waiter_push(r->node, r->conn, o) < 0) {
        beam_port_close(r->conn, "beamd ran out of memory");
        goto cleanup;
    }
    beam_actor_t *a = beam_actor_find(r->node, v[S_ACTOR].s);
    if (!a) {
        beam_object_fail(r->node, o, BEAM_OBJ_ACTOR_DIED,
                         "The actor died unexpectedly before finishing this task: beamd knows no such actor "
                         "(it ended and was forgotten, or never existed).");
        beam_port_reply_empty(r->conn, r->msgid);
        goto cleanup;
    }
    method = beam_dup_str(v[S_METHOD].s, v[S_METHOD].len);
    kept = beam_req_keep_bin(r, v[S_ARGS].s, v[S_ARGS].len);
    if (!method || !kept) {
        beam_object_fail(r->node, o, BEAM_OBJ_LOST, "beamd ran out of memory queueing the call");
        beam_port_reply_empty(r->conn, r->msgid); /* the object carries the failure */
        goto cleanup;
    }
    /* the actor takes method, kept and rf */
    beam_actor_submit(r->node, a, v[S_OBJ].s, method, kept, beam_req_kept_data(r, kept, v[S_ARGS].s), v[S_ARGS].len, &rf);
    method = NULL;
    kept = NULL;
    rf = (beam_refs_t){0};
    beam_port_reply_empty(r->conn, r->msgid);
cleanup:
    free(method);
    beam_buf_unref(kept);
    beam_refs_free(&rf);
}

enum { K_ACTOR, K_NO_RESTART };
static const beam_field_spec_t kill_fields[] = {
    [K_ACTOR] = ACTOR_ID("actor", BEAM_F_REQUIRED),
    [K_NO_RESTART] = BEAM_FIELD("no_restart", BEAM_F_BOOL, 0, .def = 1),
};

static void op_kill(req_t *r)
{
    beam_field_val_t v[2];
    if (BEAM_REQ_FIELDS(r, kill_fields, v) < 0)
        return;
    beam_actor_t *a = beam_actor_find(r->node, v[K_ACTOR].s);
    if (a) /* local: a kill from its worker's member cuts its local calls (actors.h) */
        beam_actor_cut_local(r->node, a, r->conn->member);
    if (a && v[K_NO_RESTART].i)
        beam_actor_kill(r->node, a, "The actor is dead because it was killed by `ray.kill`.");
    else if (a) /* it restarts if it may (max_restarts) */
        beam_actor_kill_restart(r->node, a, "The actor was killed by `ray.kill` with no_restart=False.");
    beam_port_reply_empty(r->conn, r->msgid);
}

enum { GA_NAME, GA_NS };
static const beam_field_spec_t get_actor_fields[] = {
    [GA_NAME] = BEAM_FIELD("name", BEAM_F_STR, BEAM_F_REQUIRED), /* any str: a bad one names no actor */
    [GA_NS] = BEAM_FIELD_NAME("namespace", 0),
};

static void op_get_actor(req_t *r)
{
    beam_field_val_t v[2];
    char nm[BEAM_NAME_MAX_LEN + 1], ns[BEAM_NAME_MAX_LEN + 1];
    if (BEAM_REQ_FIELDS(r, get_actor_fields, v) < 0)
        return;
    const char *name = v[GA_NAME].s;
    uint32_t len = v[GA_NAME].len;
    beam_field_cstr(&v[GA_NAME], nm, sizeof nm);
    beam_field_cstr(&v[GA_NS], ns, sizeof ns);
    /* a name longer than any create_actor takes names no actor: not found */
    beam_actor_t *a = len > BEAM_NAME_MAX_LEN || beam_has_nul(name, len) ? NULL
                                                                         : beam_actor_find_name(r->node, ns, nm);
    if (!a) {
        beam_port_reply_error(r->conn, r->msgid, "not_found",
                              "Failed to look up actor with name '%s'. This could because 1. You are trying to look "
                              "up a named actor you didn't create. 2. The named actor died. 3. You did not use a "
                              "namespace matching the namespace of the actor.", nm);
        return;
    }
    /* no hold: a handle got by name is weak, as in Ray (it keeps no actor alive) */
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_reply_ok(&enc, r->msgid);
    msgpack_pack_map(&enc.pk, 2);
    beam_pack_key(&enc.pk, "actor");
    beam_pack_bin(&enc.pk, beam_actor_id(a), BEAM_ACTOR_ID_SIZE);
    beam_pack_key(&enc.pk, "class_name");
    beam_pack_str(&enc.pk, beam_actor_class_name(a));
    beam_enc_end(&enc, 0);
    beam_port_send_enc(r->conn, &enc);
}

/* --- placement groups --- */

enum { PC_PG, PC_STRATEGY, PC_BUNDLES, PC_NAME, PC_DETACHED };
static const beam_field_spec_t pg_create_fields[] = {
    [PC_PG] = PG_ID("pg", BEAM_F_REQUIRED),
    [PC_STRATEGY] = BEAM_FIELD("strategy", BEAM_F_STR, BEAM_F_REQUIRED),
    [PC_BUNDLES] = BEAM_FIELD("bundles", BEAM_F_ARRAY, BEAM_F_REQUIRED, .min = 1, .max = BEAM_PG_MAX_BUNDLES,
                              .bound = "must hold 1..1024 bundles", .what = "must be an array of maps"),
    [PC_NAME] = BEAM_FIELD_NAME("name", 0),
    [PC_DETACHED] = BEAM_FIELD("detached", BEAM_F_BOOL, 0),
};

static void op_pg_create(req_t *r)
{
    beam_field_val_t v[5];
    beam_demand_t *d = NULL;
    char *nm = NULL;
    if (BEAM_REQ_FIELDS(r, pg_create_fields, v) < 0)
        goto cleanup;
    int strat = beam_pg_strategy(v[PC_STRATEGY].s, v[PC_STRATEGY].len);
    if (strat < 0) {
        beam_req_bad(r, "strategy", "must be PACK, SPREAD, STRICT_PACK or STRICT_SPREAD");
        goto cleanup;
    }
    if (beam_pg_find(r->node, v[PC_PG].s)) {
        beam_port_reply_error(r->conn, r->msgid, "exists", "placement group id is already in use");
        goto cleanup;
    }
    const msgpack_object_array *bundles = v[PC_BUNDLES].a;
    d = calloc(bundles->size, sizeof *d);
    nm = beam_dup_str(v[PC_NAME].s, v[PC_NAME].len);
    if (!d || !nm) {
        reply_oom(r);
        goto cleanup;
    }
    for (uint32_t i = 0; i < bundles->size; i++)
        if (beam_req_bundle(r, &bundles->ptr[i], &d[i]) < 0)
            goto cleanup;
    int rc = beam_pg_create(r->node, r->conn, v[PC_PG].s, nm, strat, d, bundles->size, (int)v[PC_DETACHED].i);
    if (rc < 0) {
        beam_port_reply_error(r->conn, r->msgid, "internal", "the placement group could not be created: %s",
                              strerror(-rc));
        goto cleanup;
    }
    nm = NULL; /* the group's now */
    beam_port_reply_empty(r->conn, r->msgid);
cleanup:
    free(d);
    free(nm);
}

enum { PR_PG, PR_OBJ, PR_VALUE };
static const beam_field_spec_t pg_ready_fields[] = {
    [PR_PG] = PG_ID("pg", BEAM_F_REQUIRED),
    [PR_OBJ] = OBJECT_ID("obj", BEAM_F_REQUIRED),
    [PR_VALUE] = BEAM_FIELD("value", BEAM_F_BIN, BEAM_F_REQUIRED),
};
/* pg_remove reads the first of pg_ready's fields */
#define PG_REMOVE_NFIELDS 1

/* The group the request's "pg" names; NULL after replying not_found. */
static beam_pg_t *find_pg(req_t *r, const beam_field_val_t *pg_id)
{
    beam_pg_t *pg = beam_pg_find(r->node, pg_id->s);
    if (!pg)
        beam_port_reply_error(r->conn, r->msgid, "not_found", "no such placement group");
    return pg;
}

static void op_pg_remove(req_t *r)
{
    beam_field_val_t v[PG_REMOVE_NFIELDS];
    beam_pg_t *pg;
    if (beam_req_fields(r, pg_ready_fields, PG_REMOVE_NFIELDS, v) < 0 || !(pg = find_pg(r, &v[PR_PG])))
        return;
    /* answered once the group's workers are gone and its bundles are back */
    beam_pg_remove(r->node, pg, r->conn, r->msgid);
}

static void op_pg_ready(req_t *r)
{
    beam_field_val_t v[3];
    beam_pg_t *pg;
    char *copy = NULL;
    if (BEAM_REQ_FIELDS(r, pg_ready_fields, v) < 0 || !(pg = find_pg(r, &v[PR_PG])))
        goto cleanup;
    if (!(copy = beam_dup_bin(v[PR_VALUE].s, v[PR_VALUE].len))) {
        reply_oom(r);
        goto cleanup;
    }
    const char *why;
    beam_object_t *o = new_object(r, v[PR_OBJ].s, &why);
    if (!o)
        goto cleanup;
    if (beam_pg_ready(r->node, pg, v[PR_OBJ].s, copy, v[PR_VALUE].len) < 0) {
        beam_object_fail(r->node, o, BEAM_OBJ_LOST, "beamd ran out of memory waiting for the placement group");
        reply_oom(r);
        goto cleanup;
    }
    copy = NULL; /* the group's now */
    beam_port_reply_empty(r->conn, r->msgid);
cleanup:
    free(copy);
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

enum { AR_OK, AR_ERROR };
static const beam_field_spec_t actor_ready_fields[] = {
    [AR_OK] = BEAM_FIELD("ok", BEAM_F_BOOL, BEAM_F_REQUIRED),
    [AR_ERROR] = BEAM_FIELD("error", BEAM_F_STR, 0),
};

static void op_actor_ready(req_t *r)
{
    beam_field_val_t v[2];
    beam_actor_t *a = worker_actor(r);
    if (!a || BEAM_REQ_FIELDS(r, actor_ready_fields, v) < 0)
        return;
    beam_actor_ready(r->node, a, (int)v[AR_OK].i, v[AR_ERROR].s, v[AR_ERROR].len);
    beam_port_reply_empty(r->conn, r->msgid);
}

/* The worker ends on purpose now (sys.exit() or exit_actor() in a method):
 * the death that follows does not restart its actor (max_restarts). */
static void op_exiting(req_t *r)
{
    beam_actor_t *a = worker_actor(r);
    if (!a)
        return;
    beam_actor_worker_exiting(a);
    beam_port_reply_empty(r->conn, r->msgid);
}

static const beam_field_spec_t blocked_fields[] = {BEAM_FIELD("blocked", BEAM_F_BOOL, BEAM_F_REQUIRED)};

/* The worker waits in ray.get/ray.wait ("blocked": true) or is back. */
static void op_blocked(req_t *r)
{
    beam_field_val_t v[1];
    beam_actor_t *a = worker_actor(r);
    if (!a || BEAM_REQ_FIELDS(r, blocked_fields, v) < 0)
        return;
    beam_actor_set_blocked(r->node, a, (int)v[0].i);
    beam_port_reply_empty(r->conn, r->msgid);
}

enum { TD_OBJ, TD_STATUS, TD_DATA, TD_EXITING };
static const beam_field_spec_t task_done_fields[] = {
    [TD_OBJ] = OBJECT_ID("obj", BEAM_F_REQUIRED),
    [TD_STATUS] = BEAM_FIELD("status", BEAM_F_INT, BEAM_F_REQUIRED, .min = BEAM_OBJ_OK, .max = BEAM_OBJ_TASK_ERROR,
                             .bound = "must be 0 (ok) or 1 (task error)"),
    [TD_DATA] = BEAM_FIELD("data", BEAM_F_BIN, BEAM_F_REQUIRED),
    [TD_EXITING] = BEAM_FIELD("exiting", BEAM_F_BOOL, 0),
};

static void op_task_done(req_t *r)
{
    beam_field_val_t v[4];
    beam_refs_t rf = {0};
    beam_buf_t *kept = NULL;
    beam_actor_t *a = worker_actor(r);
    const char *data;
    size_t len;
    if (!a || BEAM_REQ_FIELDS(r, task_done_fields, v) < 0 || beam_req_refs(r, &rf) < 0 ||
        beam_req_value(r, &v[TD_DATA], &kept, &data, &len) < 0)
        goto cleanup;
    int dead = beam_actor_is_dead(a);
    if (v[TD_EXITING].i)
        beam_actor_worker_exiting(a); /* its worker ends after this: never pooled */
    /* the actor takes kept and rf */
    int rc = beam_actor_task_done(r->node, a, v[TD_OBJ].s, (int)v[TD_STATUS].i, kept, data, len,
                                  &rf);
    kept = NULL;
    rf = (beam_refs_t){0};
    if (rc < 0 && !dead) {
        /* (a dead actor's late results are dropped quietly: its calls already failed) */
        beam_port_reply_error(r->conn, r->msgid, "not_found", "this worker was given no call with that id");
        goto cleanup;
    }
    beam_port_reply_empty(r->conn, r->msgid);
cleanup:
    beam_buf_unref(kept);
    beam_refs_free(&rf);
}

/* The client maps values in shared memory from now on (shm.h): only a
 * client of the node that keeps its values, which can open beamd's fds. */
static void op_shm(req_t *r)
{
    if (!may_share(r)) {
        beam_port_reply_error(r->conn, r->msgid, "denied", "values are shared in memory only on the head's node");
        return;
    }
    r->conn->shm = 1;
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
    {"status", beam_status},      {"get_actor", op_get_actor}, {"actor_ready", op_actor_ready},
    {"task_done", op_task_done}, {"pg_create", op_pg_create}, {"pg_remove", op_pg_remove},
    {"pg_ready", op_pg_ready},   {"pg_table", beam_status_pg_table}, {"blocked", op_blocked}, {"shm", op_shm},
    {"exiting", op_exiting},     {"board", beam_status_board},
    {NULL, NULL},
};

void beam_dispatch(beam_port_t *c, const char *frame, size_t len, beam_buf_t *buf)
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
