/* relay.c — the cluster's switches over the links (see relay.h): what the
 * head does with each member's messages, and what a member does with its
 * head's. Every field of every link message is checked; a malformed one
 * closes that link (relay's owner hooks: link.h). */
#define _GNU_SOURCE
#include "relay.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors.h"
#include "clientmsg.h"
#include "fieldspec.h"
#include "cluster.h"
#include "intake.h"
#include "shortcut.h"
#include "session.h"
#include "log.h"
#include "procs.h"

/* ---------- reading a link message: op tables on the field tables ---------- */

/* Every field of every link message is checked as dispatch checks a
 * client's, by field tables (fieldspec.h) and an op table per side and
 * stage: a token holder's malformed message is refused with the link
 * closed (the node is then lost, as any lost node is) and the daemon goes
 * on. */

/* One link message being handled. A handler returns 0, or -EINVAL with what
 * is wrong in err (the link then closes). */
typedef struct relay_msg_s {
    beam_node_t *node;
    beam_link_t *link;
    const beam_msg_t *m;
    char err[160];
} relay_msg_t;

typedef struct relay_op_s {
    const char *name;
    const beam_field_spec_t *fields;
    size_t nfields;
    int (*fn)(relay_msg_t *x, const beam_field_val_t *v);
} relay_op_t;

#define RELAY_OP(name, fields, fn) {(name), (fields), sizeof(fields) / sizeof((fields)[0]), (fn)}
#define RELAY_MAX_FIELDS 12

/* what: how the field is wrong ("must be a str"); "is required": it is missing. */
static int bad_field(relay_msg_t *x, const char *field, const char *what)
{
    int n = (int)(x->m->op_len < 32 ? x->m->op_len : 32);
    if (strcmp(what, "is required") != 0)
        snprintf(x->err, sizeof x->err, "a %.*s with a bad '%s' (it %s)", n, x->m->op, field, what);
    else
        snprintf(x->err, sizeof x->err, "a %.*s without '%s'", n, x->m->op, field);
    return -EINVAL;
}

/* Runs m by ops[0..n): its row's fields checked, then (when run) its
 * handler. 0, or -EINVAL with x->err set (unknown is the end of the error
 * for an op no row has: "which a member does not send"). */
static int relay_run(relay_msg_t *x, const relay_op_t *ops, size_t n, const char *unknown, int run)
{
    beam_field_val_t v[RELAY_MAX_FIELDS];
    const char *field, *what;
    char buf[64];
    const beam_msg_t *m = x->m;
    for (size_t i = 0; i < n; i++) {
        if (!beam_str_eq(m->op, m->op_len, ops[i].name))
            continue;
        assert(ops[i].nfields <= RELAY_MAX_FIELDS);
        if (beam_fields_check(&m->params, ops[i].fields, ops[i].nfields, v, &field, &what, buf, sizeof buf) < 0)
            return bad_field(x, field, what);
        return run ? ops[i].fn(x, v) : 0;
    }
    snprintf(x->err, sizeof x->err, "a '%.*s', %s", (int)(m->op_len < 32 ? m->op_len : 32), m->op, unknown);
    return -EINVAL;
}

/* Closes the link over a malformed message: one warning says which. */
static void refuse(relay_msg_t *x)
{
    beam_log(BEAM_LOG_WARN, "link with %s closed: refused %s", beam_link_peer(x->link), x->err);
    beam_link_close(x->link, x->err, 0);
}

/* Rows the link messages share. */
#define VCONN BEAM_FIELD("vconn", BEAM_F_INT, BEAM_F_REQUIRED, .min = 1, .max = UINT32_MAX, .bound = "is out of range")
#define INT_IN(n, fl, lo, hi) BEAM_FIELD((n), BEAM_F_INT, (fl), .min = (lo), .max = (hi), .bound = "is out of range")
/* A str that must fit cap bytes with its NUL, and hold none. */
#define CSTR(n, fl, cap)                                                                                              \
    BEAM_FIELD((n), BEAM_F_STR, (fl) | BEAM_F_NONUL, .min = 0, .max = (cap) - 1,                                     \
               .bound = "is too long or holds a NUL")

/* ---------- the head's switch ---------- */

/* The join's resources [[name, total]] and gpus [id] into pool (which the
 * caller initialised and destroys). The amounts' own bounds are
 * resources.c's (beam_pool_add). */
static int pool_from_join(relay_msg_t *x, const msgpack_object_array *res, const msgpack_object_array *gpus,
                          beam_pool_t *pool)
{
    for (uint32_t i = 0; i < res->size; i++) {
        const msgpack_object *e = &res->ptr[i];
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2 ||
            e->via.array.ptr[0].type != MSGPACK_OBJECT_STR ||
            e->via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
            e->via.array.ptr[1].via.u64 > INT64_MAX || e->via.array.ptr[0].via.str.size == 0 ||
            e->via.array.ptr[0].via.str.size >= BEAM_RES_NAME_LEN ||
            memchr(e->via.array.ptr[0].via.str.ptr, '\0', e->via.array.ptr[0].via.str.size))
            return bad_field(x, "resources", "must be [[name str, total uint]]");
        char name[BEAM_RES_NAME_LEN];
        snprintf(name, sizeof name, "%.*s", (int)e->via.array.ptr[0].via.str.size, e->via.array.ptr[0].via.str.ptr);
        if (strcmp(name, "GPU") != 0 && beam_pool_add(pool, name, (int64_t)e->via.array.ptr[1].via.u64) < 0)
            return bad_field(x, "resources", "holds an amount or a resource the pool refuses");
    }
    for (uint32_t i = 0; i < gpus->size; i++) {
        const msgpack_object *g = &gpus->ptr[i]; /* a str without NUL (its row) */
        if (g->via.str.size == 0 || g->via.str.size >= BEAM_GPU_ID_LEN)
            return bad_field(x, "gpus", "must be an array of GPU id strs");
        char id[BEAM_GPU_ID_LEN];
        snprintf(id, sizeof id, "%.*s", (int)g->via.str.size, g->via.str.ptr);
        if (beam_pool_add_gpu(pool, id) < 0)
            return bad_field(x, "gpus", "holds GPU ids the pool refuses");
    }
    return 0;
}

static void pack_strv(msgpack_packer *pk, char *const *v)
{
    size_t n = 0;
    for (char *const *p = v; p && *p; p++)
        n++;
    msgpack_pack_array(pk, n);
    for (char *const *p = v; p && *p; p++)
        beam_pack_str(pk, *p);
}

/* The member ops of a node reached over its link: spawn and kill as messages. */
static int member_spawn_remote(beam_node_t *node, beam_member_t *m, const beam_spawn_t *s, long *pid)
{
    (void)node;
    (void)pid;
    if (!m->link)
        return UV_EHOSTUNREACH;
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "spawn", 10);
    beam_pack_key(&enc.pk, "actor");
    beam_pack_bin(&enc.pk, s->actor, BEAM_ACTOR_ID_SIZE);
    beam_pack_key(&enc.pk, "class_name");
    beam_pack_str(&enc.pk, s->class_name);
    beam_pack_key(&enc.pk, "python");
    beam_pack_str(&enc.pk, s->python);
    beam_pack_key(&enc.pk, "cwd");
    beam_pack_str(&enc.pk, s->cwd ? s->cwd : "");
    beam_pack_key(&enc.pk, "env");
    pack_strv(&enc.pk, s->env);
    beam_pack_key(&enc.pk, "sys_path");
    pack_strv(&enc.pk, s->sys_path);
    beam_pack_key(&enc.pk, "gpus");
    beam_pack_str(&enc.pk, s->gpus);
    beam_pack_key(&enc.pk, "token");
    beam_pack_str(&enc.pk, s->token);
    beam_pack_key(&enc.pk, "noset_cuda");
    msgpack_pack_int(&enc.pk, s->noset_cuda);
    beam_pack_key(&enc.pk, "owner_pid");
    msgpack_pack_uint32(&enc.pk, s->owner_pid);
    beam_enc_end(&enc, 0);
    return beam_link_send_enc(m->link, &enc);
}

static void member_kill_remote(beam_node_t *node, beam_member_t *m, const char *actor)
{
    (void)node;
    if (!m->link)
        return;
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "kill_worker", 1);
    beam_pack_key(&enc.pk, "actor");
    beam_pack_bin(&enc.pk, actor, BEAM_ACTOR_ID_SIZE);
    beam_enc_end(&enc, 0);
    beam_link_send_enc(m->link, &enc);
}

static const beam_member_ops_t remote_member_ops = {member_spawn_remote, member_kill_remote, NULL};

enum { J_NODE_ID, J_NODE_IP, J_HOSTNAME, J_SOCKET, J_MAX_FRAME, J_RESOURCES, J_GPUS };
static const beam_field_spec_t join_fields[] = {
    [J_NODE_ID] = BEAM_FIELD("node_id", BEAM_F_ID, BEAM_F_REQUIRED, .size = BEAM_NODE_ID_SIZE),
    [J_NODE_IP] = CSTR("node_ip", BEAM_F_REQUIRED, 64),
    [J_HOSTNAME] = CSTR("hostname", BEAM_F_REQUIRED, 256),
    [J_SOCKET] = CSTR("socket", BEAM_F_REQUIRED, 108),
    [J_MAX_FRAME] = INT_IN("max_frame", 0, 0, UINT32_MAX),
    [J_RESOURCES] = BEAM_FIELD("resources", BEAM_F_ARRAY, BEAM_F_REQUIRED),
    [J_GPUS] = BEAM_FIELD("gpus", BEAM_F_STRS, BEAM_F_REQUIRED | BEAM_F_NONUL),
};

static int head_on_join(relay_msg_t *x, const beam_field_val_t *v)
{
    beam_node_t *node = x->node;
    beam_member_t *m = NULL;
    char ip[64], host[256], sock[108];
    beam_pool_t pool;
    beam_pool_init(&pool);
    if (pool_from_join(x, v[J_RESOURCES].a, v[J_GPUS].a, &pool) < 0)
        goto cleanup;
    beam_field_cstr(&v[J_NODE_IP], ip, sizeof ip);
    beam_field_cstr(&v[J_HOSTNAME], host, sizeof host);
    beam_field_cstr(&v[J_SOCKET], sock, sizeof sock);
    beam_member_t *old = beam_cluster_find_id(node, v[J_NODE_ID].s);
    if (old && old->alive) {
        snprintf(x->err, sizeof x->err, "a join with a node id that is already a live member");
        goto cleanup;
    }
    m = beam_cluster_add(node, v[J_NODE_ID].s, ip, host, sock, &pool, &remote_member_ops, x->link);
    if (!m) {
        snprintf(x->err, sizeof x->err, "a join while the cluster is full");
        goto cleanup;
    }
    beam_link_set_up(x->link, v[J_MAX_FRAME].i, m);
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "welcome", 3);
    beam_pack_key(&enc.pk, "max_frame");
    msgpack_pack_uint32(&enc.pk, node->limits.max_frame);
    beam_pack_key(&enc.pk, "node_index");
    msgpack_pack_uint32(&enc.pk, m->index);
    beam_pack_key(&enc.pk, "head_id");
    beam_pack_bin(&enc.pk, node->node_id, BEAM_NODE_ID_SIZE);
    beam_enc_end(&enc, 0);
    beam_link_send_enc(x->link, &enc);
    /* actors and groups waiting for resources may fit on the newcomer */
    beam_actors_schedule(node);
cleanup:
    beam_pool_destroy(&pool);
    return m ? 0 : -EINVAL;
}

/* The actor a member reports on, if it is one the head placed there (a
 * report on another node's actor, or one gone meanwhile, changes nothing). */
static beam_actor_t *own_actor(beam_node_t *node, beam_link_t *l, const char *id)
{
    beam_actor_t *a = beam_actor_find(node, id);
    return a && beam_actor_member(a) == beam_link_data(l) ? a : NULL;
}

enum { CF_VCONN, CF_FRAME };
static const beam_field_spec_t client_frame_fields[] = {
    [CF_VCONN] = VCONN,
    [CF_FRAME] = BEAM_FIELD("frame", BEAM_F_BIN, BEAM_F_REQUIRED),
};

static int head_client_frame(relay_msg_t *x, const beam_field_val_t *v)
{
    beam_intake_frame(x->node, x->link, (uint32_t)v[CF_VCONN].i, v[CF_FRAME].s, v[CF_FRAME].len);
    return 0;
}

static const beam_field_spec_t local_batch_fields[] = {BEAM_FIELD("msgs", BEAM_F_ARRAY, BEAM_F_REQUIRED)};

/* local: the member's held records, in order */
static int head_local_batch(relay_msg_t *x, const beam_field_val_t *v)
{
    return beam_intake_batch(x->node, x->link, v[0].a, x->err, sizeof x->err);
}

enum { CO_VCONN, CO_PID, CO_UID };
static const beam_field_spec_t client_open_fields[] = {
    [CO_VCONN] = VCONN,
    [CO_PID] = INT_IN("pid", BEAM_F_REQUIRED, 0, INT32_MAX),
    [CO_UID] = INT_IN("uid", BEAM_F_REQUIRED, 0, UINT32_MAX),
};

static int head_client_open(relay_msg_t *x, const beam_field_val_t *v)
{
    beam_node_t *node = x->node;
    beam_member_t *member = beam_link_data(x->link);
    uint32_t vconn = (uint32_t)v[CO_VCONN].i;
    if (beam_session_find_remote(node, x->link, vconn)) {
        snprintf(x->err, sizeof x->err, "a client_open for vconn %u, already open", vconn);
        return -EINVAL;
    }
    if (member->clients >= (node->max_member_clients ? node->max_member_clients : BEAM_MAX_MEMBER_CLIENTS)) {
        beam_log(BEAM_LOG_WARN, "node %s has %u clients open, the most one node may have: its new one is closed",
                 member->ip, member->clients);
        beam_clientmsg_close(x->link, vconn); /* that client only */
    } else if (!beam_session_open_remote(node, x->link, member, vconn, (long)v[CO_PID].i, (unsigned)v[CO_UID].i)) {
        beam_clientmsg_close(x->link, vconn); /* out of memory: that client only */
    }
    return 0;
}

static const beam_field_spec_t vconn_fields[] = {VCONN};

static int head_client_closed(relay_msg_t *x, const beam_field_val_t *v)
{
    beam_session_t *c = beam_session_find_remote(x->node, x->link, (uint32_t)v[0].i);
    if (c) {
        c->remote_closed = 1;
        beam_session_close(c, "disconnected");
    }
    return 0;
}

enum { WS_ACTOR, WS_PID };
static const beam_field_spec_t worker_started_fields[] = {
    [WS_ACTOR] = BEAM_FIELD_ACTOR_ID("actor", BEAM_F_REQUIRED),
    [WS_PID] = INT_IN("pid", BEAM_F_REQUIRED, 1, INT32_MAX),
};

static int head_worker_started(relay_msg_t *x, const beam_field_val_t *v)
{
    if (own_actor(x->node, x->link, v[WS_ACTOR].s))
        beam_actor_worker_started(x->node, v[WS_ACTOR].s, (long)v[WS_PID].i);
    return 0;
}

enum { WL_ACTOR, WL_STREAM, WL_TEXT };
static const beam_field_spec_t worker_log_fields[] = {
    [WL_ACTOR] = BEAM_FIELD_ACTOR_ID("actor", BEAM_F_REQUIRED),
    [WL_STREAM] = INT_IN("stream", BEAM_F_REQUIRED, 1, 2),
    [WL_TEXT] = BEAM_FIELD("text", BEAM_F_STR, BEAM_F_REQUIRED),
};

static int head_worker_log(relay_msg_t *x, const beam_field_val_t *v)
{
    beam_member_t *member = beam_link_data(x->link);
    if (own_actor(x->node, x->link, v[WL_ACTOR].s)) {
        beam_log(BEAM_LOG_INFO, "[%s] %.*s", member->ip, (int)v[WL_TEXT].len, v[WL_TEXT].s);
        beam_actor_worker_output(x->node, v[WL_ACTOR].s, (int)v[WL_STREAM].i, v[WL_TEXT].s, v[WL_TEXT].len);
    }
    return 0;
}

enum { WE_ACTOR, WE_PID, WE_STATUS, WE_SIGNAL };
static const beam_field_spec_t worker_exit_fields[] = {
    [WE_ACTOR] = BEAM_FIELD_ACTOR_ID("actor", BEAM_F_REQUIRED),
    [WE_PID] = INT_IN("pid", BEAM_F_REQUIRED, 0, INT32_MAX),
    [WE_STATUS] = BEAM_FIELD("status", BEAM_F_INT, BEAM_F_REQUIRED),
    [WE_SIGNAL] = INT_IN("signal", BEAM_F_REQUIRED, 0, 255),
};

static int head_worker_exit(relay_msg_t *x, const beam_field_val_t *v)
{
    beam_node_t *node = x->node;
    const char *actor = v[WE_ACTOR].s;
    beam_actor_t *a = own_actor(node, x->link, actor);
    if (a) /* local: its member took no result after this */
        beam_actor_close_local(node, a);
    if (a)
        beam_actor_worker_exited(node, actor, (long)v[WE_PID].i, v[WE_STATUS].i, (int)v[WE_SIGNAL].i);
    return 0;
}

/* What a member may send before it is up, and after. */
static const relay_op_t head_greeting[] = {RELAY_OP("join", join_fields, head_on_join)};
static const relay_op_t head_ops[] = {
    RELAY_OP("client_frame", client_frame_fields, head_client_frame),
    RELAY_OP("local_batch", local_batch_fields, head_local_batch),
    RELAY_OP("client_open", client_open_fields, head_client_open),
    RELAY_OP("client_closed", vconn_fields, head_client_closed),
    RELAY_OP("worker_started", worker_started_fields, head_worker_started),
    RELAY_OP("worker_log", worker_log_fields, head_worker_log),
    RELAY_OP("worker_exit", worker_exit_fields, head_worker_exit),
};

#define HEAD_NOPS (sizeof head_ops / sizeof head_ops[0])
#define FROM_MEMBER_UNKNOWN "which a member does not send"

/* A member is up once its join is taken (it then has its member). */
static void head_on_frame(beam_node_t *node, beam_link_t *l, const beam_msg_t *m)
{
    relay_msg_t x = {.node = node, .link = l, .m = m};
    int rc;
    if (beam_link_data(l))
        rc = relay_run(&x, head_ops, HEAD_NOPS, FROM_MEMBER_UNKNOWN, 1);
    else if (beam_str_eq(m->op, m->op_len, "join"))
        rc = relay_run(&x, head_greeting, 1, "", 1);
    else
        rc = 0, beam_link_close(l, "expected join", 0);
    if (rc < 0)
        refuse(&x);
}

/* A member's link ended: the node is gone, its actors die of that, then the
 * connections that came over this link close without a word back. */
static void head_on_close(beam_node_t *node, beam_link_t *l, const char *why)
{
    beam_member_t *m = beam_link_data(l);
    if (!m)
        return;
    beam_cluster_member_lost(node, m, why);
    for (beam_session_t *s = node->sessions; s; s = s->next)
        if (s->link == l && !beam_port_closing(&s->port)) {
            s->remote_closed = 1;
            beam_session_close(s, "its node's link closed");
        }
}

/* ---------- a member's switch ---------- */

/* Authenticated: the join says who this node is and what it offers. */
static void member_hello(beam_node_t *node, beam_link_t *l)
{
    beam_pool_t *pool = &node->pool;
    /* a (re)join is a new node to the head, as a restarted raylet is to Ray */
    beam_random(node->node_id, BEAM_NODE_ID_SIZE);
    beam_id_hex(node->node_id, BEAM_NODE_ID_SIZE, node->node_hex);
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "join", 7);
    beam_pack_key(&enc.pk, "max_frame");
    msgpack_pack_uint32(&enc.pk, node->limits.max_frame);
    beam_pack_key(&enc.pk, "node_id");
    beam_pack_bin(&enc.pk, node->node_id, BEAM_NODE_ID_SIZE);
    beam_pack_key(&enc.pk, "node_ip");
    beam_pack_str(&enc.pk, node->node_ip);
    beam_pack_key(&enc.pk, "hostname");
    beam_pack_str(&enc.pk, node->hostname);
    beam_pack_key(&enc.pk, "socket");
    beam_pack_str(&enc.pk, node->socket_path);
    beam_pack_key(&enc.pk, "resources");
    msgpack_pack_array(&enc.pk, pool->nres);
    for (size_t i = 0; i < pool->nres; i++) {
        msgpack_pack_array(&enc.pk, 2);
        beam_pack_str(&enc.pk, pool->res[i].name);
        msgpack_pack_int64(&enc.pk, pool->res[i].total);
    }
    beam_pack_key(&enc.pk, "gpus");
    msgpack_pack_array(&enc.pk, pool->ngpus);
    for (int i = 0; i < pool->ngpus; i++)
        beam_pack_str(&enc.pk, pool->gpu_ids[i]);
    beam_enc_end(&enc, 0);
    beam_link_send_enc(l, &enc);
}

/* An array of strs (checked by its row) as a NULL-terminated vector the
 * caller frees with beam_strv_free; NULL when out of memory. */
static char **strv_copy(const msgpack_object_array *a)
{
    char **v = calloc((size_t)a->size + 1, sizeof *v);
    for (uint32_t i = 0; v && i < a->size; i++)
        if (!(v[i] = strndup(a->ptr[i].via.str.ptr, a->ptr[i].via.str.size))) {
            beam_strv_free(v);
            v = NULL;
        }
    return v;
}

static void send_worker_event(beam_link_t *l, const char *op, const char *actor, long pid, int64_t status, int sig)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, op, 4);
    beam_pack_key(&enc.pk, "actor");
    beam_pack_bin(&enc.pk, actor, BEAM_ACTOR_ID_SIZE);
    beam_pack_key(&enc.pk, "pid");
    msgpack_pack_int64(&enc.pk, pid);
    beam_pack_key(&enc.pk, "status");
    msgpack_pack_int64(&enc.pk, status);
    beam_pack_key(&enc.pk, "signal");
    msgpack_pack_int(&enc.pk, sig);
    beam_enc_end(&enc, 0);
    beam_link_send_enc(l, &enc);
}

enum { SP_ACTOR, SP_CLASS, SP_PYTHON, SP_CWD, SP_GPUS, SP_TOKEN, SP_NOSET, SP_OWNER, SP_ENV, SP_PATH };
static const beam_field_spec_t spawn_fields[] = {
    [SP_ACTOR] = BEAM_FIELD_ACTOR_ID("actor", BEAM_F_REQUIRED),
    [SP_CLASS] = CSTR("class_name", BEAM_F_REQUIRED, 257),
    [SP_PYTHON] = CSTR("python", BEAM_F_REQUIRED, 4096),
    [SP_CWD] = CSTR("cwd", 0, 4096),
    [SP_GPUS] = CSTR("gpus", 0, BEAM_MAX_GPUS * (BEAM_GPU_ID_LEN + 1)),
    [SP_TOKEN] = CSTR("token", BEAM_F_REQUIRED, 64),
    [SP_NOSET] = INT_IN("noset_cuda", 0, 0, 1),
    [SP_OWNER] = INT_IN("owner_pid", 0, 0, UINT32_MAX),
    [SP_ENV] = BEAM_FIELD("env", BEAM_F_STRS, BEAM_F_REQUIRED | BEAM_F_NONUL),
    [SP_PATH] = BEAM_FIELD("sys_path", BEAM_F_STRS, BEAM_F_REQUIRED | BEAM_F_NONUL),
};

/* Starts the worker the head placed here. A worker that cannot start is
 * reported gone. */
static int member_spawn(relay_msg_t *x, const beam_field_val_t *v)
{
    const char *actor = v[SP_ACTOR].s;
    char cls[257], python[4096], cwd[4096], gpus[BEAM_MAX_GPUS * (BEAM_GPU_ID_LEN + 1)], token[64];
    beam_field_cstr(&v[SP_CLASS], cls, sizeof cls);
    beam_field_cstr(&v[SP_PYTHON], python, sizeof python);
    beam_field_cstr(&v[SP_CWD], cwd, sizeof cwd);
    beam_field_cstr(&v[SP_GPUS], gpus, sizeof gpus);
    beam_field_cstr(&v[SP_TOKEN], token, sizeof token);
    char **env = strv_copy(v[SP_ENV].a), **path = strv_copy(v[SP_PATH].a);
    beam_spawn_t s = {.actor = actor, .class_name = cls, .python = python, .cwd = cwd, .env = env,
                      .sys_path = path, .gpus = gpus, .token = token, .noset_cuda = (int)v[SP_NOSET].i,
                      .owner_pid = (uint32_t)v[SP_OWNER].i};
    long pid = 0;
    int spawned = (env && path) ? beam_proc_spawn(x->node, &s, &pid) : UV_ENOMEM;
    if (spawned < 0)
        send_worker_event(x->link, "worker_exit", actor, 0, 127, 0);
    else
        send_worker_event(x->link, "worker_started", actor, pid, 0, 0);
    beam_strv_free(env);
    beam_strv_free(path);
    return 0;
}

enum { W_NODE_INDEX, W_MAX_FRAME, W_HEAD_ID };
static const beam_field_spec_t welcome_fields[] = {
    [W_NODE_INDEX] = INT_IN("node_index", BEAM_F_REQUIRED, 1, UINT32_MAX),
    [W_MAX_FRAME] = INT_IN("max_frame", 0, 0, UINT32_MAX),
    [W_HEAD_ID] = BEAM_FIELD("head_id", BEAM_F_ID, 0, .size = BEAM_NODE_ID_SIZE),
};

static int member_on_welcome(relay_msg_t *x, const beam_field_val_t *v)
{
    beam_node_t *node = x->node;
    node->node_index = (uint32_t)v[W_NODE_INDEX].i;
    beam_link_set_up(x->link, v[W_MAX_FRAME].i, node);
    beam_log(BEAM_LOG_INFO, "joined the head at %s as node %s (member %u)", beam_link_peer(x->link), node->node_hex,
             node->node_index);
    if (node->on_joined)
        node->on_joined(node);
    return 0;
}

/* A frame from the head for local client vconn. */
static void member_to_client(beam_node_t *node, uint32_t vconn, const char *body, uint32_t len)
{
    beam_session_t *c = beam_session_find_local(node, vconn);
    char *frame = c ? malloc((size_t)len + BEAM_FRAME_HEADER) : NULL;
    if (!frame)
        return; /* gone meanwhile (or out of memory: that reply is lost) */
    beam_put_u32be(frame, len);
    memcpy(frame + BEAM_FRAME_HEADER, body, len);
    beam_port_send(&c->port, frame, (size_t)len + BEAM_FRAME_HEADER);
}

static int member_client_frame(relay_msg_t *x, const beam_field_val_t *v)
{
    uint32_t vconn = (uint32_t)v[CF_VCONN].i;
    if (beam_session_find_local(x->node, vconn))
        beam_shortcut_down(x->node, vconn, v[CF_FRAME].s, v[CF_FRAME].len); /* local: learns workers and counts calls */
    member_to_client(x->node, vconn, v[CF_FRAME].s, v[CF_FRAME].len);
    return 0;
}

static int member_close_client(relay_msg_t *x, const beam_field_val_t *v)
{
    beam_session_t *c = beam_session_find_local(x->node, (uint32_t)v[0].i);
    if (c) {
        c->remote_closed = 1;
        beam_session_close(c, "closed by the head");
    }
    return 0;
}

static const beam_field_spec_t actor_fields[] = {BEAM_FIELD_ACTOR_ID("actor", BEAM_F_REQUIRED)};

static int member_kill_worker(relay_msg_t *x, const beam_field_val_t *v)
{
    beam_proc_kill(x->node, v[0].s);
    return 0;
}

/* What the head may send before it has welcomed this node, and after. */
static const relay_op_t member_greeting[] = {RELAY_OP("welcome", welcome_fields, member_on_welcome)};
static const relay_op_t member_ops[] = {
    RELAY_OP("client_frame", client_frame_fields, member_client_frame),
    RELAY_OP("close_client", vconn_fields, member_close_client),
    RELAY_OP("spawn", spawn_fields, member_spawn),
    RELAY_OP("kill_worker", actor_fields, member_kill_worker),
};

#define MEMBER_NOPS (sizeof member_ops / sizeof member_ops[0])
#define FROM_HEAD_UNKNOWN "which the head does not send"

static void member_on_frame(beam_node_t *node, beam_link_t *l, const beam_msg_t *m)
{
    relay_msg_t x = {.node = node, .link = l, .m = m};
    int rc;
    if (beam_link_data(l))
        rc = relay_run(&x, member_ops, MEMBER_NOPS, FROM_HEAD_UNKNOWN, 1);
    else if (beam_str_eq(m->op, m->op_len, "welcome"))
        rc = relay_run(&x, member_greeting, 1, "", 1);
    else
        rc = 0, beam_link_close(l, "expected welcome", 0);
    if (rc < 0)
        refuse(&x);
}

/* The head is lost: its clients' work cannot go on here. */
static void member_on_close(beam_node_t *node, beam_link_t *l, const char *why)
{
    (void)l;
    (void)why;
    beam_shortcut_reset(node); /* local */
    for (beam_session_t *s = node->sessions; s; s = s->next) {
        s->remote_closed = 1;
        beam_session_close(s, "this node lost the head");
    }
    beam_procs_kill_all(node);
}

/* A member's hooks for its workers: everything goes to the head. */
static void member_proc_output(beam_node_t *node, const char *actor, int stream, const char *text, size_t len)
{
    beam_link_t *l = beam_link_up(node);
    if (!l)
        return;
    beam_shortcut_flush(node); /* local: what is held goes first */
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "worker_log", 3);
    beam_pack_key(&enc.pk, "actor");
    beam_pack_bin(&enc.pk, actor, BEAM_ACTOR_ID_SIZE);
    beam_pack_key(&enc.pk, "stream");
    msgpack_pack_int(&enc.pk, stream);
    beam_pack_key(&enc.pk, "text");
    beam_pack_strn(&enc.pk, text, len);
    beam_enc_end(&enc, 0);
    beam_link_send_enc(l, &enc);
}

static void member_proc_exit(beam_node_t *node, const char *actor, long pid, int64_t status, int sig)
{
    beam_shortcut_worker_gone(node, actor); /* local: before the head hears of it */
    beam_shortcut_flush(node);
    beam_link_t *l = beam_link_up(node);
    if (l)
        send_worker_event(l, "worker_exit", actor, pid, status, sig);
}

int beam_relay_check(const beam_msg_t *m, int at_head, int up, char *err, size_t errlen)
{
    relay_msg_t x = {.m = m};
    int rc;
    if (m->type != BEAM_MSG_PUSH) {
        snprintf(x.err, sizeof x.err, "a link message that is not a push");
        rc = -EINVAL;
    } else if (at_head) {
        rc = up ? relay_run(&x, head_ops, HEAD_NOPS, FROM_MEMBER_UNKNOWN, 0)
                : relay_run(&x, head_greeting, 1, "which is not a join", 0);
    } else {
        rc = up ? relay_run(&x, member_ops, MEMBER_NOPS, FROM_HEAD_UNKNOWN, 0)
                : relay_run(&x, member_greeting, 1, "which is not a welcome", 0);
    }
    if (rc < 0)
        snprintf(err, errlen, "%s", x.err);
    return rc;
}

/* ---------- starting ---------- */

int beam_relay_listen(beam_node_t *node, const beam_cluster_opts_t *opts, char *err, size_t errlen)
{
    beam_cluster_opts_t co = *opts;
    co.hooks = (beam_link_hooks_t){.on_frame = head_on_frame, .on_close = head_on_close};
    return beam_links_listen(node, &co, err, errlen);
}

int beam_relay_join(beam_node_t *node, const beam_cluster_opts_t *opts)
{
    beam_cluster_opts_t co = *opts;
    co.hooks = (beam_link_hooks_t){.on_up = member_hello, .on_frame = member_on_frame, .on_close = member_on_close};
    node->on_proc_output = member_proc_output;
    node->on_proc_exit = member_proc_exit;
    int rc = node->local ? 0 : beam_shortcut_init(node);
    return rc < 0 ? rc : beam_link_join(node, &co);
}
