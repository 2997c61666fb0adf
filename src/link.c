/* link.c — head and member links over TCP: handshake, join, heartbeats and
 * the message switch on both sides. */
#define _GNU_SOURCE
#include "link.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors.h"
#include "cluster.h"
#include "session.h"
#include "dispatch.h"
#include "log.h"
#include "procs.h"

#define NONCE_BYTES 32
#define PREAUTH_MAX_FRAME 4096
#define RECONNECT_MS 1000

enum { SIDE_HEAD = 0, SIDE_MEMBER = 1 };
enum { S_CONNECTING, S_CHALLENGED, S_AUTHED, S_WAIT_CHALLENGE, S_WAIT_AUTH_OK, S_WAIT_WELCOME, S_UP };

struct beam_link_s {
    uv_tcp_t tcp; /* first: handle data points back here */
    uv_timer_t timer;
    uv_connect_t connect;
    beam_node_t *node;
    int side;
    int state;
    int closing;
    int quiet; /* refused (at accept, or a malformed message): link_close logs at debug only */
    int handles;
    unsigned char my_nonce[NONCE_BYTES], peer_nonce[NONCE_BYTES];
    /* after the handshake every frame body is sealed (XChaCha20-Poly1305
     * secretstream, one stream each way, keyed from the token and both nonces) */
    crypto_secretstream_xchacha20poly1305_state tx, rx;
    int tx_on, rx_on;
    beam_decoder_t dec;
    beam_member_t *member;
    uint64_t born_ms, last_rx_ms;
    char peer[64];
    char peer_ip[48]; /* head: the address alone, for the per-address cap */
    struct beam_link_s *next;
};

/* The cluster side of the node: options, the head's listener and links, a
 * member's reconnect timer. */
typedef struct links_s {
    beam_cluster_opts_t opts;
    uv_tcp_t listener;
    int listening;
    beam_link_t *all;
    uv_timer_t reconnect;
    int reconnect_init;
    int fd_floor;             /* head: an accepted fd this high leaves too few */
    uint64_t refused, refused_logged_ms;
} links_t;

typedef struct write_req_s {
    uv_write_t req;
    char *buf;
} write_req_t;

static void link_close(beam_link_t *l, const char *why);

/* ---------- tokens ---------- */

int beam_token_read(const char *path, unsigned char *token, char *err, size_t errlen)
{
    char hex[2 * BEAM_TOKEN_BYTES + 8] = {0};
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot read the token file %s: %s", path, strerror(errno));
        return -1;
    }
    size_t n = fread(hex, 1, sizeof hex - 1, f);
    fclose(f);
    while (n > 0 && (hex[n - 1] == '\n' || hex[n - 1] == ' '))
        hex[--n] = '\0';
    size_t got = 0;
    if (n != 2 * BEAM_TOKEN_BYTES ||
        sodium_hex2bin(token, BEAM_TOKEN_BYTES, hex, n, NULL, &got, NULL) != 0 || got != BEAM_TOKEN_BYTES) {
        snprintf(err, errlen, "the token file %s must hold %d hex digits", path, 2 * BEAM_TOKEN_BYTES);
        return -1;
    }
    return 0;
}

int beam_token_create(const char *path, unsigned char *token, char *err, size_t errlen)
{
    randombytes_buf(token, BEAM_TOKEN_BYTES);
    char hex[2 * BEAM_TOKEN_BYTES + 2];
    sodium_bin2hex(hex, sizeof hex, token, BEAM_TOKEN_BYTES);
    size_t n = strlen(hex);
    hex[n++] = '\n';
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, hex, n) != (ssize_t)n) {
        snprintf(err, errlen, "cannot write the token file %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    fchmod(fd, 0600);
    close(fd);
    return 0;
}

/* ---------- writing ---------- */

static void on_write(uv_write_t *req, int status)
{
    write_req_t *w = (write_req_t *)req;
    free(w->buf);
    free(w);
}

static int send_raw(beam_link_t *l, char *buf, size_t len)
{
    if (l->closing || !buf) {
        free(buf);
        return -1;
    }
    write_req_t *w = malloc(sizeof *w);
    if (!w) {
        free(buf);
        return -1;
    }
    w->buf = buf;
    uv_buf_t b = uv_buf_init(buf, (unsigned)len);
    int rc = uv_write(&w->req, (uv_stream_t *)&l->tcp, &b, 1, on_write);
    if (rc < 0) {
        free(buf);
        free(w);
        link_close(l, uv_strerror(rc));
        return -1;
    }
    return 0;
}

/* Seals one frame's body for the wire: a new frame holding the ciphertext. */
static char *seal(beam_link_t *l, char *plain, size_t len, size_t *out_len)
{
    size_t body = len - BEAM_FRAME_HEADER, clen = body + crypto_secretstream_xchacha20poly1305_ABYTES;
    char *out = clen <= UINT32_MAX ? malloc(BEAM_FRAME_HEADER + clen) : NULL;
    if (out) {
        crypto_secretstream_xchacha20poly1305_push(&l->tx, (unsigned char *)out + BEAM_FRAME_HEADER, NULL,
                                                   (const unsigned char *)plain + BEAM_FRAME_HEADER, body, NULL, 0,
                                                   crypto_secretstream_xchacha20poly1305_TAG_MESSAGE);
        out[0] = (char)(clen >> 24);
        out[1] = (char)(clen >> 16);
        out[2] = (char)(clen >> 8);
        out[3] = (char)clen;
        *out_len = BEAM_FRAME_HEADER + clen;
    }
    free(plain);
    return out;
}

int beam_link_send_enc(beam_link_t *l, beam_enc_t *enc)
{
    size_t len;
    if (!l || enc->failed) {
        beam_enc_destroy(enc);
        return -1;
    }
    char *buf = beam_enc_take(enc, &len);
    beam_enc_destroy(enc);
    if (buf && l->tx_on && !l->closing)
        buf = seal(l, buf, len, &len); /* one frame per encoder: each is sealed whole */
    return send_raw(l, buf, len);
}

/* [2, op, {vconn, frame}] */
static int send_frame_msg(beam_link_t *l, const char *op, uint32_t vconn, const char *body, size_t len)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, op, 2);
    beam_pack_key(&enc.pk, "vconn");
    msgpack_pack_uint32(&enc.pk, vconn);
    beam_pack_key(&enc.pk, "frame");
    beam_pack_bin(&enc.pk, body, len);
    beam_enc_end(&enc, 0);
    return beam_link_send_enc(l, &enc);
}

static void send_vconn_msg(beam_link_t *l, const char *op, uint32_t vconn)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, op, 1);
    beam_pack_key(&enc.pk, "vconn");
    msgpack_pack_uint32(&enc.pk, vconn);
    beam_enc_end(&enc, 0);
    beam_link_send_enc(l, &enc);
}

int beam_link_send_client(beam_link_t *l, uint32_t vconn, char *frame, size_t len)
{
    int rc = len >= BEAM_FRAME_HEADER
                 ? send_frame_msg(l, "client_frame", vconn, frame + BEAM_FRAME_HEADER, len - BEAM_FRAME_HEADER)
                 : -1;
    free(frame);
    return rc;
}

void beam_link_close_client(beam_link_t *l, uint32_t vconn)
{
    send_vconn_msg(l, "close_client", vconn);
}

static beam_link_t *head_link(beam_node_t *node)
{
    beam_link_t *l = node->head_link;
    return l && l->state == S_UP ? l : NULL;
}

void beam_link_forward(beam_node_t *node, uint32_t vconn, const char *body, size_t len)
{
    beam_link_t *l = head_link(node);
    if (l)
        send_frame_msg(l, "client_frame", vconn, body, len);
}

void beam_link_client_open(beam_node_t *node, uint32_t vconn, long pid, unsigned uid)
{
    beam_link_t *l = head_link(node);
    if (!l)
        return;
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "client_open", 3);
    beam_pack_key(&enc.pk, "vconn");
    msgpack_pack_uint32(&enc.pk, vconn);
    beam_pack_key(&enc.pk, "pid");
    msgpack_pack_int64(&enc.pk, pid);
    beam_pack_key(&enc.pk, "uid");
    msgpack_pack_uint32(&enc.pk, uid);
    beam_enc_end(&enc, 0);
    beam_link_send_enc(l, &enc);
}

void beam_link_client_closed(beam_node_t *node, uint32_t vconn)
{
    beam_link_t *l = head_link(node);
    if (l)
        send_vconn_msg(l, "client_closed", vconn);
}

int beam_link_up(const beam_node_t *node)
{
    return node->head_link && node->head_link->state == S_UP;
}

/* Once the peer is known, the link carries any frame either side accepts
 * from its clients (the larger limit, with room for the wrapping): a frame
 * one side refuses then fails that one client, not the whole node. */
static void size_link(beam_link_t *l, int64_t peer_max_frame)
{
    uint64_t mine = l->node->limits.max_frame, peer = peer_max_frame > 0 ? (uint64_t)peer_max_frame : 0;
    uint64_t cap = (mine > peer ? mine : peer) + 4096;
    l->dec.lim.max_frame = cap > UINT32_MAX ? UINT32_MAX : (uint32_t)cap;
}

/* ---------- the handshake ---------- */

static void mac(const links_t *ls, const char *label, const unsigned char *a, const unsigned char *b,
                unsigned char *out)
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, ls->opts.token, BEAM_TOKEN_BYTES);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label));
    crypto_auth_hmacsha256_update(&st, a, NONCE_BYTES);
    crypto_auth_hmacsha256_update(&st, b, NONCE_BYTES);
    crypto_auth_hmacsha256_final(&st, out);
}

/* One direction's stream key: BLAKE2b-256 keyed with the token over the
 * label and both nonces (head's first), so each link gets fresh keys. */
static void stream_key(const links_t *ls, const char *label, const unsigned char *head_nonce,
                       const unsigned char *member_nonce, unsigned char *key)
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, ls->opts.token, BEAM_TOKEN_BYTES, crypto_secretstream_xchacha20poly1305_KEYBYTES);
    crypto_generichash_update(&st, (const unsigned char *)label, strlen(label));
    crypto_generichash_update(&st, head_nonce, NONCE_BYTES);
    crypto_generichash_update(&st, member_nonce, NONCE_BYTES);
    crypto_generichash_final(&st, key, crypto_secretstream_xchacha20poly1305_KEYBYTES);
}

static int mac_ok(const links_t *ls, const char *label, const unsigned char *a, const unsigned char *b,
                  const char *got, uint32_t len)
{
    unsigned char want[crypto_auth_hmacsha256_BYTES];
    if (len != sizeof want)
        return 0;
    mac(ls, label, a, b, want);
    return sodium_memcmp(want, got, sizeof want) == 0;
}

/* challenge {nonce}; auth and auth_ok {nonce, mac, stream}: stream is the
 * sender's secretstream header for what it sends after this message. */
static void send_nonce_push(beam_link_t *l, const char *op, const unsigned char *mac_bytes,
                            const unsigned char *stream_header)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, op, mac_bytes ? 3 : 1);
    beam_pack_key(&enc.pk, "nonce");
    beam_pack_bin(&enc.pk, l->my_nonce, NONCE_BYTES);
    if (mac_bytes) {
        beam_pack_key(&enc.pk, "mac");
        beam_pack_bin(&enc.pk, mac_bytes, crypto_auth_hmacsha256_BYTES);
        beam_pack_key(&enc.pk, "stream");
        beam_pack_bin(&enc.pk, stream_header, crypto_secretstream_xchacha20poly1305_HEADERBYTES);
    }
    beam_enc_end(&enc, 0);
    beam_link_send_enc(l, &enc);
}

static int get_nonce(const beam_msg_t *m, unsigned char *out)
{
    const char *n;
    uint32_t len;
    if (beam_field_bin(&m->params, "nonce", &n, &len) != 0 || len != NONCE_BYTES)
        return -1;
    memcpy(out, n, NONCE_BYTES);
    return 0;
}

/* ---------- checking a link message's fields ---------- */

/* Every field of every link message is checked as dispatch checks a
 * client's: a token holder's malformed message is refused with the link
 * closed (the node is then lost, as any lost node is) and the daemon goes
 * on. Each getter returns 0, or -1 with what is wrong in f->err. A field
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
    return -1;
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
        return -1;
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
        return -1;
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
        return -1;
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
    beam_log(BEAM_LOG_WARN, "link with %s closed: refused %s", l->peer, f->err);
    l->quiet = 1;
    link_close(l, f->err);
}

/* ---------- the head's side ---------- */

/* The join's resources [[name, total]] and gpus [id] into pool (which the
 * caller initialised and destroys). The amounts' own bounds are
 * resources.c's (beam_pool_add). */
static int pool_from_join(fields_t *f, beam_pool_t *pool)
{
    const msgpack_object_array *res, *gpus;
    if (check_field(f, beam_field_array(&f->m->params, "resources", &res), "resources", "must be an array", 1) < 0 ||
        check_field(f, beam_field_array(&f->m->params, "gpus", &gpus), "gpus", "must be an array", 1) < 0)
        return -1;
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

static const beam_member_ops_t remote_member_ops = {member_spawn_remote, member_kill_remote};

static void head_on_join(beam_link_t *l, const beam_msg_t *m)
{
    fields_t f = {.m = m};
    const char *id;
    char ip[64], host[256], sock[108];
    int64_t peer_max = 0;
    beam_pool_t pool;
    beam_pool_init(&pool);
    if (get_id(&f, "node_id", BEAM_NODE_ID_SIZE, &id) < 0 || get_str(&f, "node_ip", ip, sizeof ip, 1) < 0 ||
        get_str(&f, "hostname", host, sizeof host, 1) < 0 || get_str(&f, "socket", sock, sizeof sock, 1) < 0 ||
        get_int(&f, "max_frame", 0, UINT32_MAX, 0, &peer_max) < 0 || pool_from_join(&f, &pool) < 0)
        goto out;
    beam_member_t *old = beam_cluster_find_id(l->node, id);
    if (old && old->alive) {
        snprintf(f.err, sizeof f.err, "a join with a node id that is already a live member");
        goto out;
    }
    l->member = beam_cluster_add(l->node, id, ip, host, sock, &pool, &remote_member_ops, l);
    if (!l->member) {
        snprintf(f.err, sizeof f.err, "a join while the cluster is full");
        goto out;
    }
    l->state = S_UP;
    size_link(l, peer_max);
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "welcome", 3);
    beam_pack_key(&enc.pk, "max_frame");
    msgpack_pack_uint32(&enc.pk, l->node->limits.max_frame);
    beam_pack_key(&enc.pk, "node_index");
    msgpack_pack_uint32(&enc.pk, l->member->index);
    beam_pack_key(&enc.pk, "head_id");
    beam_pack_bin(&enc.pk, l->node->node_id, BEAM_NODE_ID_SIZE);
    beam_enc_end(&enc, 0);
    beam_link_send_enc(l, &enc);
    /* actors and groups waiting for resources may fit on the newcomer */
    beam_actors_schedule(l->node);
out:
    beam_pool_destroy(&pool);
    if (!l->member)
        refuse(l, &f);
}

/* The actor a member reports on, if it is one the head placed there (a
 * report on another node's actor, or one gone meanwhile, changes nothing). */
static beam_actor_t *own_actor(beam_link_t *l, const char *id)
{
    beam_actor_t *a = beam_actor_find(l->node, id);
    return a && a->member == l->member ? a : NULL;
}

static void head_on_up(beam_link_t *l, const beam_msg_t *m)
{
    beam_node_t *node = l->node;
    fields_t f = {.m = m};
    uint32_t vconn, len;
    const char *actor, *body;
    int64_t pid = 0, status = 0, sig = 0, stream = 0, uid = 0;
    beam_session_t *c;
    if (is_op(m, "heartbeat")) {
        return; /* its arrival already counted */
    } else if (is_op(m, "client_frame")) {
        if (get_vconn(&f, &vconn) < 0 || get_bin(&f, "frame", &body, &len) < 0)
            goto bad;
        if (!(c = beam_session_find_remote(node, l, vconn)))
            return; /* closed meanwhile */
        if (len > node->limits.max_frame) {
            /* the member's limit let it through; the head's does not */
            beam_port_reply_error(&c->port, 0, "too_large", "protocol error: frame length %u is over the head's limit of %u",
                                  len, node->limits.max_frame);
            beam_session_close(c, "a frame over the head's limit");
            return;
        }
        beam_dispatch(&c->port, body, len);
    } else if (is_op(m, "client_open")) {
        if (get_vconn(&f, &vconn) < 0 || get_int(&f, "pid", 0, INT32_MAX, 1, &pid) < 0 ||
            get_int(&f, "uid", 0, UINT32_MAX, 1, &uid) < 0)
            goto bad;
        if (beam_session_find_remote(node, l, vconn)) {
            snprintf(f.err, sizeof f.err, "a client_open for vconn %u, already open", vconn);
            goto bad;
        }
        if (!beam_session_open_remote(node, l, l->member, vconn, (long)pid, (unsigned)uid))
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
        if (own_actor(l, actor))
            beam_actor_worker_started(node, actor, (long)pid);
    } else if (is_op(m, "worker_log")) {
        if (get_id(&f, "actor", BEAM_ACTOR_ID_SIZE, &actor) < 0 || get_int(&f, "stream", 1, 2, 1, &stream) < 0 ||
            check_field(&f, beam_field_str(&m->params, "text", &body, &len), "text", "must be a str", 1) < 0)
            goto bad;
        if (own_actor(l, actor)) {
            beam_log(BEAM_LOG_INFO, "[%s] %.*s", l->member->ip, (int)len, body);
            beam_actor_worker_output(node, actor, (int)stream, body, len);
        }
    } else if (is_op(m, "worker_exit")) {
        if (get_id(&f, "actor", BEAM_ACTOR_ID_SIZE, &actor) < 0 || get_int(&f, "pid", 0, INT32_MAX, 1, &pid) < 0 ||
            get_int(&f, "status", INT64_MIN, INT64_MAX, 1, &status) < 0 ||
            get_int(&f, "signal", 0, 255, 1, &sig) < 0)
            goto bad;
        if (own_actor(l, actor))
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

static void head_on_frame(beam_link_t *l, const beam_msg_t *m)
{
    if (m->type != BEAM_MSG_PUSH) {
        link_close(l, "a link message that is not a push");
        return;
    }
    const char *got;
    uint32_t len;
    links_t *ls = l->node->links;
    switch (l->state) {
    case S_CHALLENGED: {
        unsigned char mine[crypto_auth_hmacsha256_BYTES];
        if (!beam_str_eq(m->op, m->op_len, "auth") || get_nonce(m, l->peer_nonce) < 0 ||
            beam_field_bin(&m->params, "mac", &got, &len) != 0 ||
            !mac_ok(ls, "beam-node-v1", l->my_nonce, l->peer_nonce, got, len)) {
            beam_log(BEAM_LOG_WARN, "refused a node from %s: it did not prove it holds the cluster token", l->peer);
            link_close(l, "authentication failed");
            return;
        }
        const char *peer_header;
        if (beam_field_bin(&m->params, "stream", &peer_header, &len) != 0 ||
            len != crypto_secretstream_xchacha20poly1305_HEADERBYTES) {
            link_close(l, "auth without a stream header");
            return;
        }
        unsigned char key[crypto_secretstream_xchacha20poly1305_KEYBYTES];
        unsigned char header[crypto_secretstream_xchacha20poly1305_HEADERBYTES];
        stream_key(ls, "beam-m2h-v1", l->my_nonce, l->peer_nonce, key);
        crypto_secretstream_xchacha20poly1305_init_pull(&l->rx, (const unsigned char *)peer_header, key);
        stream_key(ls, "beam-h2m-v1", l->my_nonce, l->peer_nonce, key);
        crypto_secretstream_xchacha20poly1305_init_push(&l->tx, header, key);
        sodium_memzero(key, sizeof key);
        mac(ls, "beam-head-v1", l->peer_nonce, l->my_nonce, mine);
        send_nonce_push(l, "auth_ok", mine, header);
        l->tx_on = l->rx_on = 1; /* from here on, both ways sealed */
        l->state = S_AUTHED;
        return;
    }
    case S_AUTHED:
        if (!beam_str_eq(m->op, m->op_len, "join")) {
            link_close(l, "expected join");
            return;
        }
        head_on_join(l, m);
        return;
    case S_UP:
        head_on_up(l, m);
        return;
    default:
        link_close(l, "a message out of order");
    }
}

/* ---------- a member's side ---------- */

static void member_hello(beam_link_t *l)
{
    beam_node_t *node = l->node;
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
 * beam_strv_free): 0 with *out set (NULL when out of memory), or -1 when
 * the field is malformed. */
static int get_strv(fields_t *f, const char *key, char ***out)
{
    const msgpack_object_array *a;
    *out = NULL;
    if (check_field(f, beam_field_array(&f->m->params, key, &a), key, "must be an array of strs", 1) < 0)
        return -1;
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

/* Starts the worker the head placed here; -1 (f->err set) if the spawn
 * message is malformed. A worker that cannot start is reported gone. */
static int member_spawn(beam_link_t *l, fields_t *f)
{
    const char *actor;
    char cls[257], python[4096], cwd[4096], gpus[BEAM_MAX_GPUS * (BEAM_GPU_ID_LEN + 1)], token[64];
    int64_t noset = 0, owner_pid = 0;
    char **env = NULL, **path = NULL;
    int rc = -1;
    if (get_id(f, "actor", BEAM_ACTOR_ID_SIZE, &actor) < 0 || get_str(f, "class_name", cls, sizeof cls, 1) < 0 ||
        get_str(f, "python", python, sizeof python, 1) < 0 || get_str(f, "cwd", cwd, sizeof cwd, 0) < 0 ||
        get_str(f, "gpus", gpus, sizeof gpus, 0) < 0 || get_str(f, "token", token, sizeof token, 1) < 0 ||
        get_int(f, "noset_cuda", 0, 1, 0, &noset) < 0 || get_int(f, "owner_pid", 0, UINT32_MAX, 0, &owner_pid) < 0 ||
        get_strv(f, "env", &env) < 0 || get_strv(f, "sys_path", &path) < 0)
        goto out;
    rc = 0;
    beam_spawn_t s = {.actor = actor, .class_name = cls, .python = python, .cwd = cwd, .env = env,
                      .sys_path = path, .gpus = gpus, .token = token, .noset_cuda = (int)noset,
                      .owner_pid = (uint32_t)owner_pid};
    long pid = 0;
    int spawned = (env && path) ? beam_proc_spawn(l->node, &s, &pid) : UV_ENOMEM;
    if (spawned < 0)
        send_worker_event(l, "worker_exit", actor, 0, 127, 0);
    else
        send_worker_event(l, "worker_started", actor, pid, 0, 0);
out:
    beam_strv_free(env);
    beam_strv_free(path);
    return rc;
}

static void member_on_frame(beam_link_t *l, const beam_msg_t *m)
{
    links_t *ls = l->node->links;
    fields_t f = {.m = m};
    const char *got, *body;
    uint32_t len, vconn;
    if (m->type != BEAM_MSG_PUSH) {
        link_close(l, "a link message that is not a push");
        return;
    }
    switch (l->state) {
    case S_WAIT_CHALLENGE: {
        unsigned char mine[crypto_auth_hmacsha256_BYTES];
        if (!beam_str_eq(m->op, m->op_len, "challenge") || get_nonce(m, l->peer_nonce) < 0) {
            link_close(l, "expected a challenge from the head");
            return;
        }
        randombytes_buf(l->my_nonce, NONCE_BYTES);
        unsigned char key[crypto_secretstream_xchacha20poly1305_KEYBYTES];
        unsigned char header[crypto_secretstream_xchacha20poly1305_HEADERBYTES];
        stream_key(ls, "beam-m2h-v1", l->peer_nonce, l->my_nonce, key);
        crypto_secretstream_xchacha20poly1305_init_push(&l->tx, header, key);
        sodium_memzero(key, sizeof key);
        mac(ls, "beam-node-v1", l->peer_nonce, l->my_nonce, mine);
        send_nonce_push(l, "auth", mine, header);
        l->tx_on = 1;
        l->state = S_WAIT_AUTH_OK;
        return;
    }
    case S_WAIT_AUTH_OK:
        if (!beam_str_eq(m->op, m->op_len, "auth_ok") || beam_field_bin(&m->params, "mac", &got, &len) != 0 ||
            !mac_ok(ls, "beam-head-v1", l->my_nonce, l->peer_nonce, got, len)) {
            beam_log(BEAM_LOG_ERROR, "the head at %s did not prove it holds the cluster token", l->peer);
            link_close(l, "the head failed authentication");
            return;
        }
        const char *peer_header;
        if (beam_field_bin(&m->params, "stream", &peer_header, &len) != 0 ||
            len != crypto_secretstream_xchacha20poly1305_HEADERBYTES) {
            link_close(l, "auth_ok without a stream header");
            return;
        }
        unsigned char key[crypto_secretstream_xchacha20poly1305_KEYBYTES];
        stream_key(ls, "beam-h2m-v1", l->peer_nonce, l->my_nonce, key);
        crypto_secretstream_xchacha20poly1305_init_pull(&l->rx, (const unsigned char *)peer_header, key);
        sodium_memzero(key, sizeof key);
        l->rx_on = 1;
        member_hello(l);
        l->state = S_WAIT_WELCOME;
        return;
    case S_WAIT_WELCOME: {
        int64_t index = 0, peer_max = 0;
        const char *head_id;
        if (!is_op(m, "welcome")) {
            link_close(l, "expected welcome");
            return;
        }
        if (get_int(&f, "node_index", 1, UINT32_MAX, 1, &index) < 0 ||
            get_int(&f, "max_frame", 0, UINT32_MAX, 0, &peer_max) < 0 ||
            check_field(&f, beam_field_id(&m->params, "head_id", BEAM_NODE_ID_SIZE, &head_id), "head_id",
                        "must be a 28-byte bin", 0) < 0)
            goto bad;
        l->node->node_index = (uint32_t)index;
        l->state = S_UP;
        size_link(l, peer_max);
        beam_log(BEAM_LOG_INFO, "joined the head at %s as node %s (member %u)", l->peer, l->node->node_hex,
                 l->node->node_index);
        if (l->node->on_joined)
            l->node->on_joined(l->node);
        return;
    }
    case S_UP:
        break;
    default:
        link_close(l, "a message out of order");
        return;
    }
    if (is_op(m, "heartbeat")) {
        return;
    } else if (is_op(m, "client_frame")) {
        if (get_vconn(&f, &vconn) < 0 || get_bin(&f, "frame", &body, &len) < 0)
            goto bad;
        beam_session_t *c = beam_session_find_local(l->node, vconn);
        char *frame = c ? malloc((size_t)len + BEAM_FRAME_HEADER) : NULL;
        if (!frame)
            return; /* gone meanwhile (or out of memory: that reply is lost) */
        frame[0] = (char)(len >> 24);
        frame[1] = (char)(len >> 16);
        frame[2] = (char)(len >> 8);
        frame[3] = (char)len;
        memcpy(frame + BEAM_FRAME_HEADER, body, len);
        beam_port_send(&c->port, frame, (size_t)len + BEAM_FRAME_HEADER);
    } else if (is_op(m, "close_client")) {
        beam_session_t *c;
        if (get_vconn(&f, &vconn) < 0)
            goto bad;
        if ((c = beam_session_find_local(l->node, vconn))) {
            c->remote_closed = 1;
            beam_session_close(c, "closed by the head");
        }
    } else if (is_op(m, "spawn")) {
        if (member_spawn(l, &f) < 0)
            goto bad;
    } else if (is_op(m, "kill_worker")) {
        const char *actor;
        if (get_id(&f, "actor", BEAM_ACTOR_ID_SIZE, &actor) < 0)
            goto bad;
        beam_proc_kill(l->node, actor);
    } else {
        snprintf(f.err, sizeof f.err, "a '%.*s', which the head does not send", (int)(m->op_len < 32 ? m->op_len : 32),
                 m->op);
        goto bad;
    }
    return;
bad:
    refuse(l, &f);
}

/* A member's hooks for its workers: everything goes to the head. */
static void member_proc_output(beam_node_t *node, const char *actor, int stream, const char *text, size_t len)
{
    beam_link_t *l = head_link(node);
    if (!l)
        return;
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
    beam_link_t *l = head_link(node);
    if (l)
        send_worker_event(l, "worker_exit", actor, pid, status, sig);
}

/* ---------- both sides: reading, timers, closing ---------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    buf->base = malloc(suggested);
    buf->len = buf->base ? suggested : 0;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    beam_link_t *l = s->data;
    if (nread < 0) {
        free(buf->base);
        link_close(l, nread == UV_EOF ? "the peer closed the link" : uv_strerror((int)nread));
        return;
    }
    int rc = nread > 0 && !l->closing ? beam_decoder_feed(&l->dec, buf->base, (size_t)nread) : 0;
    free(buf->base);
    if (nread > 0)
        l->last_rx_ms = uv_now(s->loop);
    const char *frame;
    size_t len;
    while (rc == 0 && !l->closing && (rc = beam_decoder_next(&l->dec, &frame, &len)) == 1) {
        beam_msg_t m;
        char err[160];
        unsigned char *plain = NULL;
        if (l->rx_on) {
            /* a frame that fails to open was not sealed by the peer: forged,
             * replayed, reordered or cut; the link ends */
            unsigned long long plen;
            unsigned char tag;
            plain = len >= crypto_secretstream_xchacha20poly1305_ABYTES ? malloc(len) : NULL;
            if (!plain || crypto_secretstream_xchacha20poly1305_pull(&l->rx, plain, &plen, &tag,
                                                                     (const unsigned char *)frame, len, NULL, 0) != 0) {
                free(plain);
                beam_log(BEAM_LOG_WARN, "link with %s: a frame failed authentication", l->peer);
                link_close(l, "a frame failed authentication");
                return;
            }
            frame = (const char *)plain;
            len = (size_t)plen;
        }
        if (beam_msg_parse(frame, len, &l->node->limits, &m, err, sizeof err) < 0) {
            free(plain);
            link_close(l, err);
            return;
        }
        if (l->side == SIDE_HEAD)
            head_on_frame(l, &m);
        else
            member_on_frame(l, &m);
        beam_msg_destroy(&m);
        free(plain);
        rc = 0;
    }
    if (rc < 0 && !l->closing)
        link_close(l, l->dec.err);
}

static void send_heartbeat(beam_link_t *l)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "heartbeat", 0);
    beam_enc_end(&enc, 0);
    beam_link_send_enc(l, &enc);
}

static void on_timer(uv_timer_t *t)
{
    beam_link_t *l = t->data;
    links_t *ls = l->node->links;
    uint64_t now = uv_now(t->loop);
    if (l->state != S_UP) {
        if (now - l->born_ms >= BEAM_HANDSHAKE_TIMEOUT_MS)
            link_close(l, "the handshake took too long");
        return;
    }
    if (uv_timer_get_repeat(t) != ls->opts.heartbeat_ms)
        uv_timer_set_repeat(t, ls->opts.heartbeat_ms); /* up: from the handshake's pace to the heartbeat's */
    if (now - l->last_rx_ms > ls->opts.timeout_ms) {
        link_close(l, "no heartbeat within the timeout");
        return;
    }
    send_heartbeat(l);
}

/* Drops one of the things holding the link (its handles, a pending name
 * lookup); the last frees it. */
static void link_unref(beam_link_t *l)
{
    if (--l->handles == 0) {
        beam_decoder_destroy(&l->dec);
        free(l);
    }
}

static void on_link_handle_close(uv_handle_t *h)
{
    link_unref(h->data);
}

static void schedule_reconnect(beam_node_t *node);

static void link_unlist(beam_link_t *l)
{
    links_t *ls = l->node->links;
    for (beam_link_t **p = &ls->all; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            return;
        }
}

static void link_close(beam_link_t *l, const char *why)
{
    if (l->closing)
        return;
    l->closing = 1;
    beam_node_t *node = l->node;
    link_unlist(l);
    beam_log(l->quiet ? BEAM_LOG_DEBUG : l->state == S_UP ? BEAM_LOG_WARN : BEAM_LOG_INFO, "link with %s closed: %s",
             l->peer, why);
    uv_timer_stop(&l->timer);
    uv_close((uv_handle_t *)&l->timer, on_link_handle_close);
    uv_close((uv_handle_t *)&l->tcp, on_link_handle_close);
    if (l->side == SIDE_HEAD) {
        if (l->member) {
            /* the node is gone: its actors die of that, then the connections
             * that came over this link close without a word back */
            beam_member_t *m = l->member;
            beam_cluster_member_lost(node, m, why);
            for (beam_session_t *s = node->sessions; s; s = s->next)
                if (s->link == l && !beam_port_closing(&s->port)) {
                    s->remote_closed = 1;
                    beam_session_close(s, "its node's link closed");
                }
        }
        return;
    }
    /* a member without its head: its clients' work cannot go on */
    node->head_link = NULL;
    for (beam_session_t *s = node->sessions; s; s = s->next) {
        s->remote_closed = 1;
        beam_session_close(s, "this node lost the head");
    }
    beam_procs_kill_all(node);
    schedule_reconnect(node);
}

static beam_link_t *link_new(beam_node_t *node, int side)
{
    beam_link_t *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->node = node;
    l->side = side;
    beam_limits_t lim = node->limits;
    lim.max_frame = PREAUTH_MAX_FRAME; /* raised once the peer is known */
    beam_decoder_init(&l->dec, &lim);
    uv_tcp_init(node->loop, &l->tcp);
    uv_timer_init(node->loop, &l->timer);
    l->tcp.data = l->timer.data = l;
    l->handles = 2;
    l->born_ms = l->last_rx_ms = uv_now(node->loop);
    links_t *ls = node->links;
    l->next = ls->all;
    ls->all = l;
    return l;
}

static void start_link(beam_link_t *l)
{
    links_t *ls = l->node->links;
    uv_tcp_nodelay(&l->tcp, 1);
    uv_read_start((uv_stream_t *)&l->tcp, on_alloc, on_read);
    /* the handshake's timeout is kept to within a second, however long the
     * heartbeat interval is */
    uint64_t every = ls->opts.heartbeat_ms < 1000 ? ls->opts.heartbeat_ms : 1000;
    uv_timer_start(&l->timer, on_timer, every, every);
}

static void peer_name(beam_link_t *l)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    snprintf(l->peer, sizeof l->peer, "?");
    if (uv_tcp_getpeername(&l->tcp, (struct sockaddr *)&ss, &len) == 0) {
        char ip[48] = "";
        if (ss.ss_family == AF_INET) {
            uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
            snprintf(l->peer_ip, sizeof l->peer_ip, "%s", ip);
            snprintf(l->peer, sizeof l->peer, "%s:%d", ip, ntohs(((struct sockaddr_in *)&ss)->sin_port));
        } else if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
            snprintf(l->peer_ip, sizeof l->peer_ip, "%s", ip);
            snprintf(l->peer, sizeof l->peer, "[%s]:%d", ip, ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
        }
    }
}

/* Why a node connection just accepted must be closed at once, or NULL: too
 * many handshakes under way (in all, or from its address), or too few fds
 * left. Only authenticated links may stay longer than the handshake's
 * timeout, and there are at most BEAM_MAX_MEMBERS of those. */
static const char *refusal(links_t *ls, beam_link_t *l)
{
    int fd, all = 0, same = 0;
    if (uv_fileno((uv_handle_t *)&l->tcp, &fd) == 0 && fd >= ls->fd_floor)
        return "too few file descriptors left (kept for local clients and workers)";
    for (beam_link_t *o = ls->all; o; o = o->next)
        if (o != l && o->side == SIDE_HEAD && o->state != S_UP && !o->closing) {
            all++;
            same += strcmp(o->peer_ip, l->peer_ip) == 0;
        }
    if (all >= ls->opts.max_handshakes)
        return "too many node connections in the handshake";
    if (same >= ls->opts.max_handshakes_per_ip)
        return "too many node connections in the handshake from that address";
    return NULL;
}

static void on_node_connection(uv_stream_t *server, int status)
{
    beam_node_t *node = server->data;
    links_t *ls = node->links;
    if (status < 0)
        return;
    beam_link_t *l = link_new(node, SIDE_HEAD);
    if (!l)
        return;
    if (uv_accept(server, (uv_stream_t *)&l->tcp) != 0) {
        l->quiet = 1;
        link_close(l, "accept failed");
        return;
    }
    peer_name(l);
    const char *why = refusal(ls, l);
    if (why) {
        /* a flood is logged once per 10 s, not once per connection */
        uint64_t now = uv_now(node->loop);
        ls->refused++;
        if (ls->refused_logged_ms == 0 || now - ls->refused_logged_ms >= 10000) {
            beam_log(BEAM_LOG_WARN, "refused %llu node connection(s), the last from %s: %s",
                     (unsigned long long)ls->refused, l->peer, why);
            ls->refused = 0;
            ls->refused_logged_ms = now;
        }
        l->quiet = 1;
        link_close(l, why);
        return;
    }
    l->state = S_CHALLENGED;
    randombytes_buf(l->my_nonce, NONCE_BYTES);
    start_link(l);
    send_nonce_push(l, "challenge", NULL, NULL);
}

static links_t *links_get(beam_node_t *node, const beam_cluster_opts_t *opts)
{
    if (!node->links) {
        if (sodium_init() < 0)
            return NULL;
        links_t *ls = calloc(1, sizeof *ls);
        if (!ls)
            return NULL;
        ls->opts = *opts;
        if (ls->opts.max_handshakes <= 0)
            ls->opts.max_handshakes = BEAM_MAX_HANDSHAKES;
        if (ls->opts.max_handshakes_per_ip <= 0)
            ls->opts.max_handshakes_per_ip = BEAM_MAX_HANDSHAKES_PER_IP;
        struct rlimit rl;
        rlim_t cur = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? rl.rlim_cur : 1u << 20;
        if (cur > INT32_MAX)
            cur = INT32_MAX;
        /* fds are handed out lowest first: one numbered fd_floor or more
         * means at most the reserve is left */
        rlim_t reserve = cur / 4 < BEAM_FD_RESERVE ? cur / 4 : BEAM_FD_RESERVE;
        ls->fd_floor = (int)(cur - reserve);
        node->links = ls;
    }
    return node->links;
}

int beam_links_listen(beam_node_t *node, const beam_cluster_opts_t *opts, char *err, size_t errlen)
{
    links_t *ls = links_get(node, opts);
    if (!ls) {
        snprintf(err, errlen, "libsodium failed to start");
        return -1;
    }
    struct sockaddr_storage addr;
    int rc = strchr(opts->listen_ip, ':') ? uv_ip6_addr(opts->listen_ip, opts->port, (struct sockaddr_in6 *)&addr)
                                          : uv_ip4_addr(opts->listen_ip, opts->port, (struct sockaddr_in *)&addr);
    if (rc == 0) {
        uv_tcp_init(node->loop, &ls->listener);
        ls->listener.data = node;
        ls->listening = 1;
        rc = uv_tcp_bind(&ls->listener, (struct sockaddr *)&addr, 0);
        if (rc == 0)
            rc = uv_listen((uv_stream_t *)&ls->listener, 128, on_node_connection);
    }
    if (rc < 0) {
        snprintf(err, errlen, "cannot listen for nodes on %s:%d: %s", opts->listen_ip, opts->port, uv_strerror(rc));
        return -1;
    }
    return 0;
}

int beam_links_port(beam_node_t *node)
{
    links_t *ls = node->links;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (!ls || !ls->listening || uv_tcp_getsockname(&ls->listener, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

static void on_connected(uv_connect_t *req, int status)
{
    beam_link_t *l = req->data;
    if (status < 0) {
        beam_log(BEAM_LOG_WARN, "cannot reach the head at %s: %s", l->peer, uv_strerror(status));
        link_close(l, uv_strerror(status));
        return;
    }
    l->state = S_WAIT_CHALLENGE;
    start_link(l);
}

/* The lookup holds the link like a handle does: a link closed meanwhile is
 * freed here, once the lookup is back. */
static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    beam_link_t *l = req->data;
    int rc = status;
    if (rc == 0 && !l->closing)
        rc = uv_tcp_connect(&l->connect, &l->tcp, res->ai_addr, on_connected);
    uv_freeaddrinfo(res);
    free(req);
    if (rc < 0 && !l->closing) {
        beam_log(BEAM_LOG_WARN, "cannot reach the head at %s: %s", l->peer, uv_strerror(rc));
        link_close(l, uv_strerror(rc)); /* a retry is scheduled */
    }
    link_unref(l);
}

/* Resolves the head's name (an address or a host name) and connects. */
static int connect_head(beam_node_t *node)
{
    links_t *ls = node->links;
    beam_link_t *l = link_new(node, SIDE_MEMBER);
    if (!l)
        return UV_ENOMEM;
    snprintf(l->peer, sizeof l->peer, "%s:%d", ls->opts.head_host, ls->opts.head_port);
    l->state = S_CONNECTING;
    l->connect.data = l;
    node->head_link = l;
    uv_getaddrinfo_t *req = malloc(sizeof *req);
    char port[16];
    snprintf(port, sizeof port, "%d", ls->opts.head_port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int rc = req ? 0 : UV_ENOMEM;
    if (req) {
        req->data = l;
        rc = uv_getaddrinfo(node->loop, req, on_resolved, ls->opts.head_host, port, &hints);
        if (rc < 0)
            free(req);
        else
            l->handles++;
    }
    if (rc < 0)
        link_close(l, uv_strerror(rc)); /* a retry is scheduled */
    return 0;
}

static void on_reconnect(uv_timer_t *t)
{
    beam_node_t *node = t->data;
    if (!node->stopping && !node->head_link)
        connect_head(node);
}

static void schedule_reconnect(beam_node_t *node)
{
    links_t *ls = node->links;
    if (node->stopping || !ls)
        return;
    if (!ls->reconnect_init) {
        uv_timer_init(node->loop, &ls->reconnect);
        ls->reconnect.data = node;
        ls->reconnect_init = 1;
    }
    uv_timer_start(&ls->reconnect, on_reconnect, RECONNECT_MS, 0);
}

int beam_link_join(beam_node_t *node, const beam_cluster_opts_t *opts)
{
    if (!links_get(node, opts))
        return -1;
    node->is_member = 1;
    node->on_proc_output = member_proc_output;
    node->on_proc_exit = member_proc_exit;
    return connect_head(node) < 0 ? -1 : 0;
}

void beam_links_stop(beam_node_t *node)
{
    links_t *ls = node->links;
    if (!ls)
        return;
    while (ls->all)
        link_close(ls->all, "beamd is shutting down");
    if (ls->listening) {
        uv_close((uv_handle_t *)&ls->listener, NULL);
        ls->listening = 0;
    }
    if (ls->reconnect_init) {
        uv_timer_stop(&ls->reconnect);
        uv_close((uv_handle_t *)&ls->reconnect, NULL);
        ls->reconnect_init = 0;
    }
}

void beam_links_destroy(beam_node_t *node)
{
    free(node->links);
    node->links = NULL;
}
