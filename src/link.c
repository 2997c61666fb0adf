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
#include <sys/stat.h>
#include <unistd.h>

#include "actors.h"
#include "cluster.h"
#include "conn.h"
#include "dispatch.h"
#include "log.h"
#include "procs.h"

#define NONCE_BYTES 32
#define PREAUTH_MAX_FRAME 4096
#define AUTH_TIMEOUT_MS 5000
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

/* ---------- the head's side ---------- */

static int pool_from_join(const beam_msg_t *m, beam_pool_t *pool)
{
    const msgpack_object_array *res, *gpus;
    beam_pool_init(pool);
    if (beam_field_array(&m->params, "resources", &res) != 0 || beam_field_array(&m->params, "gpus", &gpus) != 0)
        return -1;
    for (uint32_t i = 0; i < res->size; i++) {
        const msgpack_object *e = &res->ptr[i];
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2 ||
            e->via.array.ptr[0].type != MSGPACK_OBJECT_STR ||
            e->via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
            e->via.array.ptr[0].via.str.size >= BEAM_RES_NAME_LEN)
            return -1;
        char name[BEAM_RES_NAME_LEN];
        snprintf(name, sizeof name, "%.*s", (int)e->via.array.ptr[0].via.str.size, e->via.array.ptr[0].via.str.ptr);
        if (strcmp(name, "GPU") != 0 && beam_pool_add(pool, name, (int64_t)e->via.array.ptr[1].via.u64) < 0)
            return -1;
    }
    for (uint32_t i = 0; i < gpus->size; i++) {
        const msgpack_object *g = &gpus->ptr[i];
        if (g->type != MSGPACK_OBJECT_STR || g->via.str.size >= BEAM_GPU_ID_LEN)
            return -1;
        char id[BEAM_GPU_ID_LEN];
        snprintf(id, sizeof id, "%.*s", (int)g->via.str.size, g->via.str.ptr);
        if (beam_pool_add_gpu(pool, id) < 0)
            return -1;
    }
    return 0;
}

static void str_field(const beam_msg_t *m, const char *key, char *out, size_t n)
{
    const char *s;
    uint32_t len;
    out[0] = '\0';
    if (beam_field_str(&m->params, key, &s, &len) == 0)
        snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), s);
}

static void head_on_join(beam_link_t *l, const beam_msg_t *m)
{
    const char *id;
    char ip[64], host[256], sock[108];
    beam_pool_t pool;
    if (beam_field_id(&m->params, "node_id", BEAM_NODE_ID_SIZE, &id) != 0 || pool_from_join(m, &pool) < 0) {
        beam_pool_destroy(&pool);
        link_close(l, "a join without a node id or with bad resources");
        return;
    }
    str_field(m, "node_ip", ip, sizeof ip);
    str_field(m, "hostname", host, sizeof host);
    str_field(m, "socket", sock, sizeof sock);
    beam_member_t *old = beam_cluster_find_id(l->node, id);
    if (old && old->alive) {
        beam_pool_destroy(&pool);
        link_close(l, "a node id that is already a live member");
        return;
    }
    l->member = beam_cluster_add(l->node, id, ip, host, sock, &pool, l);
    beam_pool_destroy(&pool);
    if (!l->member) {
        link_close(l, "the cluster is full");
        return;
    }
    l->state = S_UP;
    int64_t peer_max = 0;
    beam_field_int(&m->params, "max_frame", &peer_max);
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
}

static int get_vconn(const beam_msg_t *m, uint32_t *vconn)
{
    int64_t v;
    if (beam_field_int(&m->params, "vconn", &v) != 0 || v <= 0 || v > UINT32_MAX)
        return -1;
    *vconn = (uint32_t)v;
    return 0;
}

static void head_on_up(beam_link_t *l, const beam_msg_t *m)
{
    beam_node_t *node = l->node;
    uint32_t vconn;
    const char *actor, *body;
    uint32_t len;
    int64_t pid = 0, status = 0, sig = 0, stream = 2, uid = 0;
    if (beam_str_eq(m->op, m->op_len, "client_frame")) {
        beam_conn_t *c;
        if (get_vconn(m, &vconn) < 0 || beam_field_bin(&m->params, "frame", &body, &len) != 0 ||
            !(c = beam_conn_find_remote(node, l, vconn)))
            return;
        if (len > node->limits.max_frame) {
            /* the member's limit let it through; the head's does not */
            beam_conn_reply_error(c, 0, "too_large", "protocol error: frame length %u is over the head's limit of %u",
                                  len, node->limits.max_frame);
            beam_conn_close(c, "a frame over the head's limit");
            return;
        }
        beam_dispatch(c, body, len);
    } else if (beam_str_eq(m->op, m->op_len, "client_open")) {
        if (get_vconn(m, &vconn) < 0)
            return;
        beam_field_int(&m->params, "pid", &pid);
        beam_field_int(&m->params, "uid", &uid);
        beam_conn_open_remote(node, l, l->member, vconn, (long)pid, (unsigned)uid);
    } else if (beam_str_eq(m->op, m->op_len, "client_closed")) {
        beam_conn_t *c;
        if (get_vconn(m, &vconn) == 0 && (c = beam_conn_find_remote(node, l, vconn))) {
            c->remote_closed = 1;
            beam_conn_close(c, "disconnected");
        }
    } else if (beam_str_eq(m->op, m->op_len, "worker_started")) {
        if (beam_field_id(&m->params, "actor", BEAM_ACTOR_ID_SIZE, &actor) == 0 &&
            beam_field_int(&m->params, "pid", &pid) == 0)
            beam_actor_worker_started(node, actor, (long)pid);
    } else if (beam_str_eq(m->op, m->op_len, "worker_log")) {
        if (beam_field_id(&m->params, "actor", BEAM_ACTOR_ID_SIZE, &actor) == 0 &&
            beam_field_str(&m->params, "text", &body, &len) == 0) {
            beam_field_int(&m->params, "stream", &stream);
            beam_log(BEAM_LOG_INFO, "[%s] %.*s", l->member->ip, (int)len, body);
            beam_actor_worker_output(node, actor, (int)stream, body, len);
        }
    } else if (beam_str_eq(m->op, m->op_len, "worker_exit")) {
        if (beam_field_id(&m->params, "actor", BEAM_ACTOR_ID_SIZE, &actor) == 0) {
            beam_field_int(&m->params, "pid", &pid);
            beam_field_int(&m->params, "status", &status);
            beam_field_int(&m->params, "signal", &sig);
            beam_actor_worker_exited(node, actor, (long)pid, status, (int)sig);
        }
    }
    /* heartbeat: its arrival already counted */
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

static char **strv_from(const msgpack_object *params, const char *key)
{
    const msgpack_object_array *a;
    uint32_t n = beam_field_array(params, key, &a) == 0 ? a->size : 0;
    char **v = calloc((size_t)n + 1, sizeof *v);
    for (uint32_t i = 0; v && i < n; i++) {
        const msgpack_object *o = &a->ptr[i];
        if (o->type != MSGPACK_OBJECT_STR || !(v[i] = strndup(o->via.str.ptr, o->via.str.size)))
            v[i] = strdup("");
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

static void member_spawn(beam_link_t *l, const beam_msg_t *m)
{
    const char *actor;
    char cls[257], python[4096], cwd[4096], gpus[BEAM_MAX_GPUS * (BEAM_GPU_ID_LEN + 1)], token[64];
    int64_t noset = 0, owner_pid = 0;
    if (beam_field_id(&m->params, "actor", BEAM_ACTOR_ID_SIZE, &actor) != 0)
        return;
    str_field(m, "class_name", cls, sizeof cls);
    str_field(m, "python", python, sizeof python);
    str_field(m, "cwd", cwd, sizeof cwd);
    str_field(m, "gpus", gpus, sizeof gpus);
    str_field(m, "token", token, sizeof token);
    beam_field_int(&m->params, "noset_cuda", &noset);
    beam_field_int(&m->params, "owner_pid", &owner_pid);
    char **env = strv_from(&m->params, "env"), **path = strv_from(&m->params, "sys_path");
    beam_spawn_t s = {.actor = actor, .class_name = cls, .python = python, .cwd = cwd, .env = env,
                      .sys_path = path, .gpus = gpus, .token = token, .noset_cuda = (int)noset,
                      .owner_pid = (uint32_t)owner_pid};
    long pid = 0;
    int rc = (env && path) ? beam_proc_spawn(l->node, &s, &pid) : UV_ENOMEM;
    beam_strv_free(env);
    beam_strv_free(path);
    if (rc < 0)
        send_worker_event(l, "worker_exit", actor, 0, 127, 0);
    else
        send_worker_event(l, "worker_started", actor, pid, 0, 0);
}

static void member_on_frame(beam_link_t *l, const beam_msg_t *m)
{
    links_t *ls = l->node->links;
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
        int64_t index;
        if (!beam_str_eq(m->op, m->op_len, "welcome") || beam_field_int(&m->params, "node_index", &index) != 0) {
            link_close(l, "expected welcome");
            return;
        }
        l->node->node_index = (uint32_t)index;
        l->state = S_UP;
        int64_t peer_max = 0;
        beam_field_int(&m->params, "max_frame", &peer_max);
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
    if (beam_str_eq(m->op, m->op_len, "client_frame")) {
        if (get_vconn(m, &vconn) < 0 || beam_field_bin(&m->params, "frame", &body, &len) != 0)
            return;
        beam_conn_t *c = beam_conn_find_local(l->node, vconn);
        char *frame = c ? malloc((size_t)len + BEAM_FRAME_HEADER) : NULL;
        if (!frame)
            return;
        frame[0] = (char)(len >> 24);
        frame[1] = (char)(len >> 16);
        frame[2] = (char)(len >> 8);
        frame[3] = (char)len;
        memcpy(frame + BEAM_FRAME_HEADER, body, len);
        beam_conn_send(c, frame, (size_t)len + BEAM_FRAME_HEADER);
    } else if (beam_str_eq(m->op, m->op_len, "close_client")) {
        beam_conn_t *c;
        if (get_vconn(m, &vconn) == 0 && (c = beam_conn_find_local(l->node, vconn))) {
            c->remote_closed = 1;
            beam_conn_close(c, "closed by the head");
        }
    } else if (beam_str_eq(m->op, m->op_len, "spawn")) {
        member_spawn(l, m);
    } else if (beam_str_eq(m->op, m->op_len, "kill_worker")) {
        const char *actor;
        if (beam_field_id(&m->params, "actor", BEAM_ACTOR_ID_SIZE, &actor) == 0)
            beam_proc_kill(l->node, actor);
    }
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
        if (now - l->born_ms > AUTH_TIMEOUT_MS)
            link_close(l, "the handshake took too long");
        return;
    }
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
    beam_log(l->state == S_UP ? BEAM_LOG_WARN : BEAM_LOG_INFO, "link with %s closed: %s", l->peer, why);
    uv_timer_stop(&l->timer);
    uv_close((uv_handle_t *)&l->timer, on_link_handle_close);
    uv_close((uv_handle_t *)&l->tcp, on_link_handle_close);
    if (l->side == SIDE_HEAD) {
        if (l->member) {
            /* the node is gone: its actors die of that, then the connections
             * that came over this link close without a word back */
            beam_member_t *m = l->member;
            beam_cluster_member_lost(node, m, why);
            for (;;) {
                beam_conn_t *victim = NULL;
                for (beam_conn_t *c = node->conns; c; c = c->next)
                    if (c->link == l && !c->closing) {
                        victim = c;
                        break;
                    }
                if (!victim)
                    break;
                victim->remote_closed = 1;
                beam_conn_close(victim, "its node's link closed");
            }
        }
        return;
    }
    /* a member without its head: its clients' work cannot go on */
    node->head_link = NULL;
    while (node->conns) {
        node->conns->remote_closed = 1;
        beam_conn_close(node->conns, "this node lost the head");
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
    uv_timer_start(&l->timer, on_timer, ls->opts.heartbeat_ms, ls->opts.heartbeat_ms);
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
            snprintf(l->peer, sizeof l->peer, "%s:%d", ip, ntohs(((struct sockaddr_in *)&ss)->sin_port));
        } else if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
            snprintf(l->peer, sizeof l->peer, "[%s]:%d", ip, ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
        }
    }
}

static void on_node_connection(uv_stream_t *server, int status)
{
    beam_node_t *node = server->data;
    if (status < 0)
        return;
    beam_link_t *l = link_new(node, SIDE_HEAD);
    if (!l)
        return;
    if (uv_accept(server, (uv_stream_t *)&l->tcp) != 0) {
        link_close(l, "accept failed");
        return;
    }
    peer_name(l);
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
