/* link.c — TCP links between a member and the head (see link.h): listen and
 * connect, the handshake's messages (auth.c computes them), sealing,
 * heartbeats, the deferred close, reconnects; writes through outq (conn.c's
 * queue), reads into the decoder's space. What a link carries past the
 * handshake goes to its owner (relay.c). Errors: 0 or a negative errno. */
#define _GNU_SOURCE
#include "link.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "log.h"
#include "outq.h"

#define PREAUTH_MAX_FRAME 4096
#define RECONNECT_MS 1000

enum { SIDE_HEAD = BEAM_AUTH_HEAD, SIDE_MEMBER = BEAM_AUTH_MEMBER };
/* S_AUTHED: sealed, the owner's greeting under way; S_UP: beam_link_set_up */
enum { S_CONNECTING, S_CHALLENGED, S_WAIT_CHALLENGE, S_WAIT_AUTH_OK, S_AUTHED, S_UP };

struct beam_link_s {
    uv_tcp_t tcp;     /* first: handle data points back here */
    uv_timer_t timer; /* the handshake's timeout, heartbeats, and the deferred close */
    uv_connect_t connect;
    beam_node_t *node;
    int side, state;
    int closing;  /* nothing more is read or sent; the teardown is on the loop */
    int quiet;    /* refused (at accept, or a malformed message): the close logs at debug only */
    int handles;  /* what holds the memory: its handles and a name lookup (writes
                   * in flight end, cancelled, before the tcp handle's close) */
    char why[160];
    beam_auth_t auth;
    beam_decoder_t dec;
    beam_outq_t outq; /* what is not yet written, and what it costs (outq.h) */
    void *data;  /* the owner's */
    uint64_t born_ms, last_rx_ms, tick_ms; /* tick_ms: on_timer's last run */
    char peer[64];
    char peer_ip[48]; /* head: the address alone, for the per-address cap */
    struct beam_link_s *next;
};

/* The node's cluster side: options, the head's listener, links, a member's reconnect timer. */
typedef struct links_s {
    beam_cluster_opts_t opts;
    uv_tcp_t listener;
    int listening;
    beam_link_t *all;
    uv_timer_t reconnect;
    int reconnect_init;
    int fd_floor; /* head: an accepted fd this high leaves too few */
    uint64_t refused, refused_logged_ms;
} links_t;

static void link_unref(beam_link_t *l);
static void schedule_reconnect(beam_node_t *node);

void *beam_link_data(const beam_link_t *l)
{
    return l->data;
}

const char *beam_link_peer(const beam_link_t *l)
{
    return l->peer;
}

beam_link_t *beam_link_up(const beam_node_t *node)
{
    beam_link_t *l = node->head_link;
    return l && l->state == S_UP && !l->closing ? l : NULL;
}

/* Once the peer is known, the link carries any frame either side accepts
 * from its clients (the larger limit, with room for the wrapping): a frame
 * one side refuses then fails that one client, not the whole node. */
void beam_link_set_up(beam_link_t *l, int64_t peer_max_frame, void *data)
{
    uint64_t mine = l->node->limits.max_frame, peer = peer_max_frame > 0 ? (uint64_t)peer_max_frame : 0;
    uint64_t cap = (mine > peer ? mine : peer) + 4096;
    l->dec.lim.max_frame = cap > UINT32_MAX ? UINT32_MAX : (uint32_t)cap;
    l->state = S_UP;
    l->data = data;
}

/* ---------- closing, always on the loop's next turn; writing ---------- */

static void on_link_handle_close(uv_handle_t *h)
{
    link_unref(h->data);
}

/* The teardown (on the close's timer): out of the links, handles closing,
 * the owner told. */
static void link_finish(uv_timer_t *t)
{
    beam_link_t *l = t->data;
    beam_node_t *node = l->node;
    links_t *ls = node->links;
    for (beam_link_t **p = &ls->all; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    beam_log(l->quiet ? BEAM_LOG_DEBUG : l->state == S_UP ? BEAM_LOG_WARN : BEAM_LOG_INFO, "link with %s closed: %s",
             l->peer, l->why);
    uv_timer_stop(&l->timer);
    uv_close((uv_handle_t *)&l->timer, on_link_handle_close);
    uv_close((uv_handle_t *)&l->tcp, on_link_handle_close);
    if (node->head_link == l)
        node->head_link = NULL;
    if (ls->opts.hooks.on_close)
        ls->opts.hooks.on_close(node, l, l->why);
    beam_auth_clear(&l->auth);
    if (l->side == SIDE_MEMBER)
        schedule_reconnect(node); /* a member without its head tries again */
}

void beam_link_close(beam_link_t *l, const char *why, int quiet)
{
    if (l->closing)
        return;
    l->closing = 1;
    l->quiet |= quiet;
    snprintf(l->why, sizeof l->why, "%s", why);
    uv_read_stop((uv_stream_t *)&l->tcp);
    uv_timer_stop(&l->timer);
    uv_timer_start(&l->timer, link_finish, 0, 0);
}

/* A write finished (its cost is off the queue already): what waited while
 * the socket was full goes next. A failed write ends the link; a cancelled
 * one (UV_ECANCELED, a negative errno as every UV_E* on Linux) was cut by
 * the link's close. */
static void on_written(beam_outq_t *q, int status)
{
    beam_link_t *l = q->data;
    int rc = status < 0 ? status : l->closing ? 0 : beam_outq_flush(q);
    if (rc < 0 && rc != UV_ECANCELED)
        beam_link_close(l, rc == -ENOMEM ? "out of memory writing a message" : uv_strerror(rc), 0);
}

/* Queues buf (malloc'd, taken; NULL: out of memory) as a block of its own,
 * written at once if the socket has nothing unwritten. Past the soft cap a
 * link goes on reading (docs/DESIGN.md, "Layers"); past node->max_outq it is
 * dropped (-ENOBUFS), on the loop's next turn like every close. */
static int send_raw(beam_link_t *l, char *buf, size_t len)
{
    if (l->closing) {
        free(buf);
        return -EPIPE;
    }
    int rc = buf ? beam_outq_push_own(&l->outq, buf, len) : -ENOMEM; /* buf is the queue's */
    if (rc == BEAM_OUTQ_OVER) {
        /* a peer that does not read is dropped, not grown without bound */
        beam_log(BEAM_LOG_WARN, "link with %s is not reading: %zu bytes queued", l->peer, l->outq.cost);
        beam_link_close(l, "too many unread bytes queued", 0);
        return -ENOBUFS;
    }
    if (rc >= 0)
        rc = beam_outq_flush(&l->outq);
    if (rc < 0)
        beam_link_close(l, rc == -ENOMEM ? "out of memory queueing a message" : uv_strerror(rc), 0);
    return rc;
}

/* A new frame holding plain's body sealed (plain is freed); NULL: no memory. */
static char *seal(beam_link_t *l, char *plain, size_t len, size_t *out_len)
{
    size_t body = len - BEAM_FRAME_HEADER, clen = body + BEAM_AUTH_SEAL_BYTES;
    char *out = clen <= UINT32_MAX ? malloc(BEAM_FRAME_HEADER + clen) : NULL;
    if (out && beam_auth_seal(&l->auth, (const unsigned char *)plain + BEAM_FRAME_HEADER, body,
                              (unsigned char *)out + BEAM_FRAME_HEADER) == 0) {
        for (int i = 0; i < BEAM_FRAME_HEADER; i++)
            out[i] = (char)(clen >> (8 * (BEAM_FRAME_HEADER - 1 - i)));
        *out_len = BEAM_FRAME_HEADER + clen;
    } else {
        free(out);
        out = NULL;
    }
    free(plain);
    return out;
}

/* Sends enc's frame (destroyed), sealed unless clear or before the
 * handshake has turned sealing on. */
static int send_enc(beam_link_t *l, beam_enc_t *enc, int clear)
{
    size_t len = 0;
    char *buf = l && !l->closing && !enc->failed ? beam_enc_take(enc, &len) : NULL;
    beam_enc_destroy(enc);
    if (!l || l->closing)
        return -EPIPE;
    if (buf && l->auth.tx_on && !clear)
        buf = seal(l, buf, len, &len); /* one frame per encoder: each is sealed whole */
    return send_raw(l, buf, len);
}

int beam_link_send_enc(beam_link_t *l, beam_enc_t *enc)
{
    return send_enc(l, enc, 0);
}

/* The messages about a remote client: [2, op, {vconn, frame?, pid?, uid?}]
 * (a frame when body is set, pid and uid when pid >= 0); none without l. */
static int send_client_msg(beam_link_t *l, const char *op, uint32_t vconn, const char *body, size_t len, long pid,
                           unsigned uid)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, op, 1 + (body != NULL) + 2 * (pid >= 0));
    beam_pack_key(&enc.pk, "vconn");
    msgpack_pack_uint32(&enc.pk, vconn);
    if (body) {
        beam_pack_key(&enc.pk, "frame");
        beam_pack_bin(&enc.pk, body, len);
    }
    if (pid >= 0) {
        beam_pack_key(&enc.pk, "pid");
        msgpack_pack_int64(&enc.pk, pid);
        beam_pack_key(&enc.pk, "uid");
        msgpack_pack_uint32(&enc.pk, uid);
    }
    beam_enc_end(&enc, 0);
    return send_enc(l, &enc, 0);
}

int beam_link_send_client(beam_link_t *l, uint32_t vconn, char *frame, size_t len)
{
    int rc = -EINVAL;
    if (len >= BEAM_FRAME_HEADER)
        rc = send_client_msg(l, "client_frame", vconn, frame + BEAM_FRAME_HEADER, len - BEAM_FRAME_HEADER, -1, 0);
    free(frame);
    return rc;
}

void beam_link_close_client(beam_link_t *l, uint32_t vconn)
{
    send_client_msg(l, "close_client", vconn, NULL, 0, -1, 0);
}

void beam_link_forward(beam_node_t *node, uint32_t vconn, const char *body, size_t len)
{
    send_client_msg(beam_link_up(node), "client_frame", vconn, body ? body : "", len, -1, 0);
}

void beam_link_client_open(beam_node_t *node, uint32_t vconn, long pid, unsigned uid)
{
    send_client_msg(beam_link_up(node), "client_open", vconn, NULL, 0, pid < 0 ? 0 : pid, uid);
}

void beam_link_client_closed(beam_node_t *node, uint32_t vconn)
{
    send_client_msg(beam_link_up(node), "client_closed", vconn, NULL, 0, -1, 0);
}

/* challenge {nonce}; auth and auth_ok {nonce, mac, stream}, in the clear:
 * stream is the sender's secretstream header for what it sends next. */
static void send_nonce_push(beam_link_t *l, const char *op, const unsigned char *mac, const unsigned char *header)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, op, mac ? 3 : 1);
    beam_pack_key(&enc.pk, "nonce");
    beam_pack_bin(&enc.pk, l->auth.my_nonce, BEAM_AUTH_NONCE_BYTES);
    if (mac) {
        beam_pack_key(&enc.pk, "mac");
        beam_pack_bin(&enc.pk, mac, BEAM_AUTH_MAC_BYTES);
        beam_pack_key(&enc.pk, "stream");
        beam_pack_bin(&enc.pk, header, BEAM_AUTH_HEADER_BYTES);
    }
    beam_enc_end(&enc, 0);
    send_enc(l, &enc, 1);
}

/* A handshake field's bytes (NULL, *len 0 when absent or not a bin). */
static const unsigned char *hs_bin(const beam_msg_t *m, const char *key, uint32_t *len)
{
    const char *v = NULL;
    *len = 0;
    if (beam_field_bin(&m->params, key, &v, len) != 0)
        *len = 0;
    return *len ? (const unsigned char *)v : NULL;
}

/* One handshake message; the link closes over anything out of place. */
static void handshake(beam_link_t *l, const beam_msg_t *m)
{
    static const char *const want[] = {[S_CHALLENGED] = "auth", [S_WAIT_CHALLENGE] = "challenge",
                                       [S_WAIT_AUTH_OK] = "auth_ok"};
    unsigned char mac[BEAM_AUTH_MAC_BYTES], header[BEAM_AUTH_HEADER_BYTES];
    uint32_t nlen, mlen, hlen;
    const unsigned char *nonce = hs_bin(m, "nonce", &nlen), *peer_mac = hs_bin(m, "mac", &mlen);
    const unsigned char *peer_header = hs_bin(m, "stream", &hlen);
    int rc = want[l->state] && beam_str_eq(m->op, m->op_len, want[l->state]) &&
                     (nlen == BEAM_AUTH_NONCE_BYTES || l->state == S_WAIT_AUTH_OK)
                 ? 0
                 : -EACCES;
    if (l->state == S_WAIT_CHALLENGE) {
        if (rc == 0 && beam_auth_answer(&l->auth, nonce, mac, header) == 0) {
            send_nonce_push(l, "auth", mac, header);
            l->state = S_WAIT_AUTH_OK;
        } else {
            beam_link_close(l, "expected a challenge from the head", 0);
        }
        return;
    }
    if (rc == 0)
        rc = l->side == SIDE_HEAD
                 ? beam_auth_check_answer(&l->auth, nonce, peer_mac, mlen, peer_header, hlen, mac, header)
                 : beam_auth_check_ok(&l->auth, peer_mac, mlen, peer_header, hlen);
    if (rc == -EINVAL && mlen == BEAM_AUTH_MAC_BYTES) {
        beam_link_close(l, l->side == SIDE_HEAD ? "auth without a stream header" : "auth_ok without a stream header",
                        0);
    } else if (rc < 0 && l->side == SIDE_HEAD) {
        beam_log(BEAM_LOG_WARN, "refused a node from %s: it did not prove it holds the cluster token", l->peer);
        beam_link_close(l, "authentication failed", 0);
    } else if (rc < 0) {
        beam_log(BEAM_LOG_ERROR, "the head at %s did not prove it holds the cluster token", l->peer);
        beam_link_close(l, "the head failed authentication", 0);
    } else {
        if (l->side == SIDE_HEAD) /* the member opens what follows with this header */
            send_nonce_push(l, "auth_ok", mac, header);
        l->state = S_AUTHED;
        if (l->node->links->opts.hooks.on_up)
            l->node->links->opts.hooks.on_up(l->node, l);
    }
}

/* ---------- reading, timers, making links ---------- */

/* A read lands in the decoder's free space (none: on_read gets UV_ENOBUFS). */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    beam_link_t *l = h->data;
    if (beam_decoder_space(&l->dec, &buf->base, &buf->len) < 0) {
        buf->base = NULL;
        buf->len = 0;
    }
}

/* One frame off the wire: opened (once sealed), parsed, and handed on;
 * anything wrong with it closes the link. */
static void take_frame(beam_link_t *l, const char *frame, size_t len)
{
    links_t *ls = l->node->links;
    beam_msg_t m;
    char err[160];
    unsigned char *plain = NULL;
    if (l->auth.rx_on) {
        /* a frame that fails to open was not sealed by the peer: forged,
         * replayed, reordered or cut; the link ends */
        plain = len >= BEAM_AUTH_SEAL_BYTES ? malloc(len) : NULL;
        if (!plain || beam_auth_open(&l->auth, (const unsigned char *)frame, len, plain, &len) < 0) {
            beam_log(BEAM_LOG_WARN, "link with %s: a frame failed authentication", l->peer);
            beam_link_close(l, "a frame failed authentication", 0);
            goto cleanup;
        }
        frame = (const char *)plain;
    }
    if (beam_msg_parse(frame, len, &l->node->limits, &m, err, sizeof err) < 0) {
        beam_link_close(l, err, 0);
        goto cleanup;
    }
    if (m.type != BEAM_MSG_PUSH)
        beam_link_close(l, "a link message that is not a push", 0);
    else if (l->state < S_AUTHED)
        handshake(l, &m);
    else if (!beam_str_eq(m.op, m.op_len, "heartbeat") && ls->opts.hooks.on_frame)
        ls->opts.hooks.on_frame(l->node, l, &m); /* a heartbeat's arrival is all it says */
    beam_msg_destroy(&m);
cleanup:
    free(plain);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    beam_link_t *l = s->data;
    (void)buf; /* the decoder's space (on_alloc) */
    if (nread < 0 && !l->dec.failed) {
        beam_link_close(l, nread == UV_EOF ? "the peer closed the link" : uv_strerror((int)nread), 0);
        return;
    }
    if (l->closing)
        return;
    if (nread > 0) {
        beam_decoder_commit(&l->dec, (size_t)nread);
        l->last_rx_ms = uv_now(s->loop);
    }
    const char *frame;
    size_t len;
    /* a frame in a buffer of its own is freed by the decoder's next call */
    while (!l->closing && beam_decoder_next(&l->dec, &frame, &len) == 1)
        take_frame(l, frame, len);
    if (l->dec.failed && !l->closing)
        beam_link_close(l, l->dec.err, 0);
}

static void on_timer(uv_timer_t *t)
{
    beam_link_t *l = t->data;
    links_t *ls = l->node->links;
    uint64_t now = uv_now(t->loop), pace = uv_timer_get_repeat(t), since = now - l->tick_ms;
    l->tick_ms = now; /* a beat late: this loop stalled, the peer's frames wait unread: no verdict yet */
    if (l->state != S_UP) {
        if (now - l->born_ms >= BEAM_HANDSHAKE_TIMEOUT_MS)
            beam_link_close(l, "the handshake took too long", 0);
        return;
    }
    if (pace != ls->opts.heartbeat_ms)
        uv_timer_set_repeat(t, ls->opts.heartbeat_ms); /* up: from the handshake's pace to the heartbeat's */
    if (since <= pace + ls->opts.heartbeat_ms && now - l->last_rx_ms > ls->opts.timeout_ms) {
        beam_link_close(l, "no heartbeat within the timeout", 0);
        return;
    }
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "heartbeat", 0);
    beam_enc_end(&enc, 0);
    send_enc(l, &enc, 0);
}

/* Drops one of the things holding the link; the last frees it. */
static void link_unref(beam_link_t *l)
{
    if (--l->handles == 0) {
        beam_outq_destroy(&l->outq);
        beam_decoder_destroy(&l->dec);
        free(l);
    }
}

static beam_link_t *link_new(beam_node_t *node, int side)
{
    links_t *ls = node->links;
    beam_link_t *l = calloc(1, sizeof *l);
    if (!l || beam_auth_init(&l->auth, ls->opts.token, side) < 0) {
        free(l);
        return NULL;
    }
    l->node = node;
    l->side = side;
    beam_limits_t lim = node->limits;
    lim.max_frame = PREAUTH_MAX_FRAME; /* raised once the peer is known */
    beam_decoder_init(&l->dec, &lim);
    beam_outq_init(&l->outq, (uv_stream_t *)&l->tcp, &node->soft_outq, &node->max_outq, on_written, l);
    uv_tcp_init(node->loop, &l->tcp);
    uv_timer_init(node->loop, &l->timer);
    l->tcp.data = l->timer.data = l;
    l->handles = 2;
    l->born_ms = l->last_rx_ms = l->tick_ms = uv_now(node->loop);
    l->next = ls->all;
    ls->all = l;
    return l;
}

static void start_link(beam_link_t *l)
{
    links_t *ls = l->node->links;
    uv_tcp_nodelay(&l->tcp, 1);
    uv_read_start((uv_stream_t *)&l->tcp, on_alloc, on_read);
    /* the handshake's timeout is kept to within a second, whatever the heartbeat's */
    uint64_t every = ls->opts.heartbeat_ms < 1000 ? ls->opts.heartbeat_ms : 1000;
    uv_timer_start(&l->timer, on_timer, every, every);
}

static int port_of(const struct sockaddr_storage *ss)
{
    return ntohs(ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port
                                           : ((const struct sockaddr_in *)ss)->sin_port);
}

static void peer_name(beam_link_t *l)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    snprintf(l->peer, sizeof l->peer, "?");
    if (uv_tcp_getpeername(&l->tcp, (struct sockaddr *)&ss, &len) == 0 &&
        uv_ip_name((struct sockaddr *)&ss, l->peer_ip, sizeof l->peer_ip) == 0)
        snprintf(l->peer, sizeof l->peer, ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", l->peer_ip, port_of(&ss));
}

/* Why a node connection just accepted must be closed at once, or NULL: too
 * many handshakes under way (in all, or from its address), or too few fds. */
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
    beam_link_t *l = status < 0 ? NULL : link_new(node, SIDE_HEAD);
    if (!l)
        return;
    if (uv_accept(server, (uv_stream_t *)&l->tcp) != 0) {
        beam_link_close(l, "accept failed", 1);
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
        beam_link_close(l, why, 1);
        return;
    }
    l->state = S_CHALLENGED;
    start_link(l);
    send_nonce_push(l, "challenge", NULL, NULL);
}

static links_t *links_get(beam_node_t *node, const beam_cluster_opts_t *opts)
{
    links_t *ls = node->links;
    struct rlimit rl;
    if (ls || sodium_init() < 0 || !(ls = calloc(1, sizeof *ls)))
        return ls;
    ls->opts = *opts;
    if (ls->opts.max_handshakes <= 0)
        ls->opts.max_handshakes = BEAM_MAX_HANDSHAKES;
    if (ls->opts.max_handshakes_per_ip <= 0)
        ls->opts.max_handshakes_per_ip = BEAM_MAX_HANDSHAKES_PER_IP;
    rlim_t cur = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? rl.rlim_cur : 1u << 20;
    cur = cur > INT32_MAX ? INT32_MAX : cur;
    /* fds go lowest first: one numbered fd_floor or more leaves at most the reserve */
    ls->fd_floor = (int)(cur - (cur / 4 < BEAM_FD_RESERVE ? cur / 4 : BEAM_FD_RESERVE));
    node->links = ls;
    return ls;
}

int beam_links_listen(beam_node_t *node, const beam_cluster_opts_t *opts, char *err, size_t errlen)
{
    links_t *ls = links_get(node, opts);
    struct sockaddr_storage addr;
    if (!ls) {
        snprintf(err, errlen, "libsodium failed to start");
        return -ENOSYS;
    }
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
    if (rc < 0)
        snprintf(err, errlen, "cannot listen for nodes on %s:%d: %s", opts->listen_ip, opts->port, uv_strerror(rc));
    return rc;
}

int beam_links_port(beam_node_t *node)
{
    links_t *ls = node->links;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    int rc = ls && ls->listening ? uv_tcp_getsockname(&ls->listener, (struct sockaddr *)&ss, &len) : -ENOTCONN;
    return rc < 0 ? rc : port_of(&ss);
}

/* A connect that failed: the close schedules the retry. */
static void unreachable(beam_link_t *l, int rc)
{
    beam_log(BEAM_LOG_WARN, "cannot reach the head at %s: %s", l->peer, uv_strerror(rc));
    beam_link_close(l, uv_strerror(rc), 0);
}

static void on_connected(uv_connect_t *req, int status)
{
    beam_link_t *l = req->data;
    if (!l->closing && status < 0)
        unreachable(l, status);
    else if (!l->closing) {
        l->state = S_WAIT_CHALLENGE;
        start_link(l);
    }
}

/* The lookup holds the link as a handle does (a link closed meanwhile goes here). */
static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    beam_link_t *l = req->data;
    int rc = status;
    if (rc == 0 && !l->closing)
        rc = uv_tcp_connect(&l->connect, &l->tcp, res->ai_addr, on_connected);
    uv_freeaddrinfo(res);
    free(req);
    if (rc < 0 && !l->closing)
        unreachable(l, rc);
    link_unref(l);
}

/* Resolves the head's name and connects; a failure closes the link (which
 * retries). 0, or -ENOMEM when not even the link could be made. */
static int connect_head(beam_node_t *node)
{
    links_t *ls = node->links;
    char port[16];
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    beam_link_t *l = link_new(node, SIDE_MEMBER);
    if (!l)
        return -ENOMEM;
    snprintf(l->peer, sizeof l->peer, "%s:%d", ls->opts.head_host, ls->opts.head_port);
    snprintf(port, sizeof port, "%d", ls->opts.head_port);
    l->state = S_CONNECTING;
    l->connect.data = l;
    node->head_link = l;
    uv_getaddrinfo_t *req = malloc(sizeof *req);
    int rc = req ? uv_getaddrinfo(node->loop, req, on_resolved, ls->opts.head_host, port, &hints) : -ENOMEM;
    if (rc < 0) {
        free(req);
        unreachable(l, rc);
    } else {
        req->data = l;
        l->handles++;
    }
    return 0;
}

static void on_reconnect(uv_timer_t *t)
{
    beam_node_t *node = t->data;
    if (!node->stopping && !node->head_link && connect_head(node) < 0)
        schedule_reconnect(node); /* out of memory now: later */
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
        return -ENOSYS;
    node->is_member = 1;
    return connect_head(node);
}

void beam_links_stop(beam_node_t *node)
{
    links_t *ls = node->links;
    if (!ls)
        return;
    while (ls->all) {
        beam_link_close(ls->all, "beamd is shutting down", 0);
        link_finish(&ls->all->timer); /* now: the daemon is ending */
    }
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
