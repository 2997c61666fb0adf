/* relay.c — the cluster's switches over the links (see relay.h): what the
 * head does with each member's messages, and what a member does with its
 * head's. Every field of every link message is checked; a malformed one
 * closes that link (relay's owner hooks: link.h). */
#define _GNU_SOURCE
#include "relay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors.h"
#include "cluster.h"
#include "headup.h"
#include "local.h"
#include "session.h"
#include "log.h"
#include "procs.h"

/* ---------- checking a link message's fields ---------- */

/* Every field of every link message is checked as dispatch checks a
 * client's: a token holder's malformed message is refused with the link
 * closed (the node is then lost, as any lost node is) and the daemon goes
 * on. Each getter returns 0, or -EINVAL with what is wrong in f->err. A field
 * that is absent (or nil) is wrong only when required. */
typedef struct fields_s {
    const beam_msg_t *m;
    char err[160];
} fields_t;

/* what: how the field is wrong ("must be a str"); NULL: it is missing. */
static int bad_field(fields_t *f, const char *field, const char *what)
{
    int n = (int)(f->m->op_len < 32 ? f->m->op_len : 32);
    if (what)
        snprintf(f->err, sizeof f->err, "a %.*s with a bad '%s' (it %s)", n, f->m->op, field, what);
    else
        snprintf(f->err, sizeof f->err, "a %.*s without '%s'", n, f->m->op, field);
    return -EINVAL;
}

static int check_field(fields_t *f, int rc, const char *field, const char *what, int required)
{
    if (rc == 0 || (rc == -ENOENT && !required))
        return 0;
    return bad_field(f, field, rc == -ENOENT ? NULL : what);
}

/* An int within lo..hi; *v is left as it was when the field is absent. */
static int get_int(fields_t *f, const char *key, int64_t lo, int64_t hi, int required, int64_t *v)
{
    int64_t got;
    int rc = beam_field_int(&f->m->params, key, &got);
    if (check_field(f, rc, key, "must be an int", required) < 0)
        return -EINVAL;
    if (rc == 0 && (got < lo || got > hi))
        return bad_field(f, key, "is out of range");
    if (rc == 0)
        *v = got;
    return 0;
}

/* A str copied into out (n bytes, its NUL included; "" when absent): one
 * too long for out, or holding a NUL, is wrong, never cut. */
static int get_str(fields_t *f, const char *key, char *out, size_t n, int required)
{
    const char *s;
    uint32_t len;
    out[0] = '\0';
    int rc = beam_field_str(&f->m->params, key, &s, &len);
    if (check_field(f, rc, key, "must be a str", required) < 0)
        return -EINVAL;
    if (rc != 0)
        return 0;
    if (len >= n || memchr(s, '\0', len))
        return bad_field(f, key, "is too long or holds a NUL");
    memcpy(out, s, len);
    out[len] = '\0';
    return 0;
}

static int get_id(fields_t *f, const char *key, size_t size, const char **id)
{
    char what[40];
    snprintf(what, sizeof what, "must be a %zu-byte bin", size);
    return check_field(f, beam_field_id(&f->m->params, key, size, id), key, what, 1);
}

static int get_vconn(fields_t *f, uint32_t *vconn)
{
    int64_t v = 0;
    if (get_int(f, "vconn", 1, UINT32_MAX, 1, &v) < 0)
        return -EINVAL;
    *vconn = (uint32_t)v;
    return 0;
}

/* A required bin (client frames). */
static int get_bin(fields_t *f, const char *key, const char **s, uint32_t *len)
{
    return check_field(f, beam_field_bin(&f->m->params, key, s, len), key, "must be a bin", 1);
}

static int is_op(const beam_msg_t *m, const char *op)
{
    return beam_str_eq(m->op, m->op_len, op);
}

/* Closes the link over a malformed message: one warning says which. */
static void refuse(beam_link_t *l, fields_t *f)
{
    beam_log(BEAM_LOG_WARN, "link with %s closed: refused %s", beam_link_peer(l), f->err);
    beam_link_close(l, f->err, 1);
}

/* ---------- the head's switch ---------- */

/* The join's resources [[name, total]] and gpus [id] into pool (which the
 * caller initialised and destroys). The amounts' own bounds are
 * resources.c's (beam_pool_add). */
static int pool_from_join(fields_t *f, beam_pool_t *pool)
{
    const msgpack_object_array *res, *gpus;
    if (check_field(f, beam_field_array(&f->m->params, "resources", &res), "resources", "must be an array", 1) < 0 ||
        check_field(f, beam_field_array(&f->m->params, "gpus", &gpus), "gpus", "must be an array", 1) < 0)
        return -EINVAL;
    for (uint32_t i = 0; i < res->size; i++) {
        const msgpack_object *e = &res->ptr[i];
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2 ||
            e->via.array.ptr[0].type != MSGPACK_OBJECT_STR ||
            e->via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
            e->via.array.ptr[1].via.u64 > INT64_MAX || e->via.array.ptr[0].via.str.size == 0 ||
            e->via.array.ptr[0].via.str.size >= BEAM_RES_NAME_LEN ||
            memchr(e->via.array.ptr[0].via.str.ptr, '\0', e->via.array.ptr[0].via.str.size))
            return bad_field(f, "resources", "must be [[name str, total uint]]");
        char name[BEAM_RES_NAME_LEN];
        snprintf(name, sizeof name, "%.*s", (int)e->via.array.ptr[0].via.str.size, e->via.array.ptr[0].via.str.ptr);
        if (strcmp(name, "GPU") != 0 && beam_pool_add(pool, name, (int64_t)e->via.array.ptr[1].via.u64) < 0)
            return bad_field(f, "resources", "holds an amount or a resource the pool refuses");
    }
    for (uint32_t i = 0; i < gpus->size; i++) {
        const msgpack_object *g = &gpus->ptr[i];
        if (g->type != MSGPACK_OBJECT_STR || g->via.str.size == 0 || g->via.str.size >= BEAM_GPU_ID_LEN ||
            memchr(g->via.str.ptr, '\0', g->via.str.size))
            return bad_field(f, "gpus", "must be an array of GPU id strs");
        char id[BEAM_GPU_ID_LEN];
        snprintf(id, sizeof id, "%.*s", (int)g->via.str.size, g->via.str.ptr);
        if (beam_pool_add_gpu(pool, id) < 0)
            return bad_field(f, "gpus", "holds GPU ids the pool refuses");
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

static void head_on_join(beam_node_t *node, beam_link_t *l, const beam_msg_t *msg)
{
    beam_member_t *m = NULL;
    fields_t f = {.m = msg};
    const char *id;
    char ip[64], host[256], sock[108];
    int64_t peer_max = 0;
    beam_pool_t pool;
    beam_pool_init(&pool);
    if (get_id(&f, "node_id", BEAM_NODE_ID_SIZE, &id) < 0 || get_str(&f, "node_ip", ip, sizeof ip, 1) < 0 ||
        get_str(&f, "hostname", host, sizeof host, 1) < 0 || get_str(&f, "socket", sock, sizeof sock, 1) < 0 ||
        get_int(&f, "max_frame", 0, UINT32_MAX, 0, &peer_max) < 0 || pool_from_join(&f, &pool) < 0)
        goto cleanup;
    beam_member_t *old = beam_cluster_find_id(node, id);
    if (old && old->alive) {
        snprintf(f.err, sizeof f.err, "a join with a node id that is already a live member");
        goto cleanup;
    }
    m = beam_cluster_add(node, id, ip, host, sock, &pool, &remote_member_ops, l);
    if (!m) {
        snprintf(f.err, sizeof f.err, "a join while the cluster is full");
        goto cleanup;
    }
    beam_link_set_up(l, peer_max, m);
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
    beam_link_send_enc(l, &enc);
    /* actors and groups waiting for resources may fit on the newcomer */
    beam_actors_schedule(node);
cleanup:
    beam_pool_destroy(&pool);
    if (!m)
        refuse(l, &f);
}

/* The actor a member reports on, if it is one the head placed there (a
 * report on another node's actor, or one gone meanwhile, changes nothing). */
static beam_actor_t *own_actor(beam_node_t *node, beam_link_t *l, const char *id)
{
    beam_actor_t *a = beam_actor_find(node, id);
    return a && beam_actor_member(a) == beam_link_data(l) ? a : NULL;
}

static void head_on_up(beam_node_t *node, beam_link_t *l, const beam_msg_t *m)
{
    beam_member_t *member = beam_link_data(l);
    fields_t f = {.m = m};
    uint32_t vconn, len;
    const char *actor, *body;
    int64_t pid = 0, status = 0, sig = 0, stream = 0, uid = 0;
    const msgpack_object_array *msgs;
    beam_session_t *c;
    if (is_op(m, "client_frame")) {
        if (get_vconn(&f, &vconn) < 0 || get_bin(&f, "frame", &body, &len) < 0)
            goto bad;
        beam_headup_frame(node, l, vconn, body, len);
    } else if (is_op(m, "local_batch")) { /* local: the member's held records, in order */
        if (check_field(&f, beam_field_array(&m->params, "msgs", &msgs), "msgs", "must be an array", 1) < 0 ||
            beam_headup_batch(node, l, msgs, f.err, sizeof f.err) < 0)
            goto bad;
    } else if (is_op(m, "client_open")) {
        if (get_vconn(&f, &vconn) < 0 || get_int(&f, "pid", 0, INT32_MAX, 1, &pid) < 0 ||
            get_int(&f, "uid", 0, UINT32_MAX, 1, &uid) < 0)
            goto bad;
        if (beam_session_find_remote(node, l, vconn)) {
            snprintf(f.err, sizeof f.err, "a client_open for vconn %u, already open", vconn);
            goto bad;
        }
        if (member->clients >= (node->max_member_clients ? node->max_member_clients : BEAM_MAX_MEMBER_CLIENTS)) {
            beam_log(BEAM_LOG_WARN, "node %s has %u clients open, the most one node may have: its new one is closed",
                     member->ip, member->clients);
            beam_link_close_client(l, vconn); /* that client only */
        } else if (!beam_session_open_remote(node, l, member, vconn, (long)pid, (unsigned)uid))
            beam_link_close_client(l, vconn); /* out of memory: that client only */
    } else if (is_op(m, "client_closed")) {
        if (get_vconn(&f, &vconn) < 0)
            goto bad;
        if ((c = beam_session_find_remote(node, l, vconn))) {
            c->remote_closed = 1;
            beam_session_close(c, "disconnected");
        }
    } else if (is_op(m, "worker_started")) {
        if (get_id(&f, "actor", BEAM_ACTOR_ID_SIZE, &actor) < 0 || get_int(&f, "pid", 1, INT32_MAX, 1, &pid) < 0)
            goto bad;
        if (own_actor(node, l, actor))
            beam_actor_worker_started(node, actor, (long)pid);
    } else if (is_op(m, "worker_log")) {
        if (get_id(&f, "actor", BEAM_ACTOR_ID_SIZE, &actor) < 0 || get_int(&f, "stream", 1, 2, 1, &stream) < 0 ||
            check_field(&f, beam_field_str(&m->params, "text", &body, &len), "text", "must be a str", 1) < 0)
            goto bad;
        if (own_actor(node, l, actor)) {
            beam_log(BEAM_LOG_INFO, "[%s] %.*s", member->ip, (int)len, body);
            beam_actor_worker_output(node, actor, (int)stream, body, len);
        }
    } else if (is_op(m, "worker_exit")) {
        if (get_id(&f, "actor", BEAM_ACTOR_ID_SIZE, &actor) < 0 || get_int(&f, "pid", 0, INT32_MAX, 1, &pid) < 0 ||
            get_int(&f, "status", INT64_MIN, INT64_MAX, 1, &status) < 0 ||
            get_int(&f, "signal", 0, 255, 1, &sig) < 0)
            goto bad;
        beam_actor_t *a = own_actor(node, l, actor);
        if (a) /* local: its member took no result after this */
            beam_actor_close_local(node, a);
        if (a)
            beam_actor_worker_exited(node, actor, (long)pid, status, (int)sig);
    } else {
        snprintf(f.err, sizeof f.err, "a '%.*s', which a member does not send", (int)(m->op_len < 32 ? m->op_len : 32),
                 m->op);
        goto bad;
    }
    return;
bad:
    refuse(l, &f);
}

/* A member is up once its join is taken (it then has its member). */
static void head_on_frame(beam_node_t *node, beam_link_t *l, const beam_msg_t *m)
{
    if (beam_link_data(l))
        head_on_up(node, l, m);
    else if (!is_op(m, "join"))
        beam_link_close(l, "expected join", 0);
    else
        head_on_join(node, l, m);
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

/* A required array of strs as a NULL-terminated vector (freed with
 * beam_strv_free): 0 with *out set (NULL when out of memory), or -EINVAL when
 * the field is malformed. */
static int get_strv(fields_t *f, const char *key, char ***out)
{
    const msgpack_object_array *a;
    *out = NULL;
    if (check_field(f, beam_field_array(&f->m->params, key, &a), key, "must be an array of strs", 1) < 0)
        return -EINVAL;
    for (uint32_t i = 0; i < a->size; i++)
        if (a->ptr[i].type != MSGPACK_OBJECT_STR || memchr(a->ptr[i].via.str.ptr, '\0', a->ptr[i].via.str.size))
            return bad_field(f, key, "must be an array of strs");
    char **v = calloc((size_t)a->size + 1, sizeof *v);
    for (uint32_t i = 0; v && i < a->size; i++)
        if (!(v[i] = strndup(a->ptr[i].via.str.ptr, a->ptr[i].via.str.size))) {
            beam_strv_free(v);
            v = NULL;
        }
    *out = v;
    return 0;
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

/* Starts the worker the head placed here; -EINVAL (f->err set) if the spawn
 * message is malformed. A worker that cannot start is reported gone. */
static int member_spawn(beam_node_t *node, beam_link_t *l, fields_t *f)
{
    const char *actor;
    char cls[257], python[4096], cwd[4096], gpus[BEAM_MAX_GPUS * (BEAM_GPU_ID_LEN + 1)], token[64];
    int64_t noset = 0, owner_pid = 0;
    char **env = NULL, **path = NULL;
    int rc = -EINVAL;
    if (get_id(f, "actor", BEAM_ACTOR_ID_SIZE, &actor) < 0 || get_str(f, "class_name", cls, sizeof cls, 1) < 0 ||
        get_str(f, "python", python, sizeof python, 1) < 0 || get_str(f, "cwd", cwd, sizeof cwd, 0) < 0 ||
        get_str(f, "gpus", gpus, sizeof gpus, 0) < 0 || get_str(f, "token", token, sizeof token, 1) < 0 ||
        get_int(f, "noset_cuda", 0, 1, 0, &noset) < 0 || get_int(f, "owner_pid", 0, UINT32_MAX, 0, &owner_pid) < 0 ||
        get_strv(f, "env", &env) < 0 || get_strv(f, "sys_path", &path) < 0)
        goto cleanup;
    rc = 0;
    beam_spawn_t s = {.actor = actor, .class_name = cls, .python = python, .cwd = cwd, .env = env,
                      .sys_path = path, .gpus = gpus, .token = token, .noset_cuda = (int)noset,
                      .owner_pid = (uint32_t)owner_pid};
    long pid = 0;
    int spawned = (env && path) ? beam_proc_spawn(node, &s, &pid) : UV_ENOMEM;
    if (spawned < 0)
        send_worker_event(l, "worker_exit", actor, 0, 127, 0);
    else
        send_worker_event(l, "worker_started", actor, pid, 0, 0);
cleanup:
    beam_strv_free(env);
    beam_strv_free(path);
    return rc;
}

static void member_on_welcome(beam_node_t *node, beam_link_t *l, fields_t *f)
{
    int64_t index = 0, peer_max = 0;
    const char *head_id;
    if (get_int(f, "node_index", 1, UINT32_MAX, 1, &index) < 0 ||
        get_int(f, "max_frame", 0, UINT32_MAX, 0, &peer_max) < 0 ||
        check_field(f, beam_field_id(&f->m->params, "head_id", BEAM_NODE_ID_SIZE, &head_id), "head_id",
                    "must be a 28-byte bin", 0) < 0) {
        refuse(l, f);
        return;
    }
    node->node_index = (uint32_t)index;
    beam_link_set_up(l, peer_max, node);
    beam_log(BEAM_LOG_INFO, "joined the head at %s as node %s (member %u)", beam_link_peer(l), node->node_hex,
             node->node_index);
    if (node->on_joined)
        node->on_joined(node);
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

static void member_on_frame(beam_node_t *node, beam_link_t *l, const beam_msg_t *m)
{
    fields_t f = {.m = m};
    const char *body, *actor;
    uint32_t len, vconn;
    beam_session_t *c;
    if (!beam_link_data(l)) {
        if (is_op(m, "welcome"))
            member_on_welcome(node, l, &f);
        else
            beam_link_close(l, "expected welcome", 0);
        return;
    }
    if (is_op(m, "client_frame")) {
        if (get_vconn(&f, &vconn) < 0 || get_bin(&f, "frame", &body, &len) < 0)
            goto bad;
        if (beam_session_find_local(node, vconn))
            beam_local_down(node, vconn, body, len); /* local: learns workers and counts calls */
        member_to_client(node, vconn, body, len);
    } else if (is_op(m, "close_client")) {
        if (get_vconn(&f, &vconn) < 0)
            goto bad;
        if ((c = beam_session_find_local(node, vconn))) {
            c->remote_closed = 1;
            beam_session_close(c, "closed by the head");
        }
    } else if (is_op(m, "spawn")) {
        if (member_spawn(node, l, &f) < 0)
            goto bad;
    } else if (is_op(m, "kill_worker")) {
        if (get_id(&f, "actor", BEAM_ACTOR_ID_SIZE, &actor) < 0)
            goto bad;
        beam_proc_kill(node, actor);
    } else {
        snprintf(f.err, sizeof f.err, "a '%.*s', which the head does not send", (int)(m->op_len < 32 ? m->op_len : 32),
                 m->op);
        goto bad;
    }
    return;
bad:
    refuse(l, &f);
}

/* The head is lost: its clients' work cannot go on here. */
static void member_on_close(beam_node_t *node, beam_link_t *l, const char *why)
{
    (void)l;
    (void)why;
    beam_local_reset(node); /* local */
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
    beam_local_flush(node); /* local: what is held goes first */
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
    beam_local_worker_gone(node, actor); /* local: before the head hears of it */
    beam_local_flush(node);
    beam_link_t *l = beam_link_up(node);
    if (l)
        send_worker_event(l, "worker_exit", actor, pid, status, sig);
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
    int rc = node->local ? 0 : beam_local_init(node);
    return rc < 0 ? rc : beam_link_join(node, &co);
}
