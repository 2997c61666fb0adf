/* fuzz_link.c — a libFuzzer target for the head's side of the cluster link:
 * what a member that holds the cluster token can send once the handshake is
 * over. Each input gets a fresh head (a beam_node_t on its own uv loop,
 * listening for nodes on 127.0.0.1, a fixed test token); up to two fake
 * members connect over real TCP and do the real handshake in-process (the
 * challenge, HMAC-SHA256 both ways, a libsodium secretstream each way), then
 * the input's frames are sealed and sent, so they reach relay.c's
 * head_on_join, head_on_up and, through client_open/client_frame, beam_dispatch with
 * remote clients, actors placed on the members, their spawns and their
 * workers' reports. A third connection never authenticates: raw bytes
 * there reach the handshake itself. Every frame the head sends a member
 * must open and parse (the harness reads them all). After the input every
 * peer hangs up; then every member must be dead, every connection closed,
 * the head's own resources given back, and the loop must close with no
 * handle open. ASan/UBSan and LeakSanitizer do the rest.
 *
 * Workers are never started on the head: uv_spawn is wrapped to fail before
 * it forks (as in fuzz_dispatch.c). On a member they are pretended: with
 * flag bit 3 the harness answers each spawn with worker_started and each
 * kill_worker with worker_exit, as a real member does.
 *
 * The input:
 *   byte 0   flags: bit 0: member 0 sends the standard join once
 *            authenticated (else the input sends its own); bit 1: member 1
 *            connects too, bit 2: and sends the standard join; bit 3: spawns
 *            and kills are answered
 *   then, repeated: a selector byte s, and for writes a 2-byte big-endian
 *   length n and n bytes.
 *     s >> 6 == 0: n bytes (a msgpack body, normally [2, op, {...}]) sealed
 *                  as one frame and sent by member s & 1
 *     s >> 6 == 1: n bytes written as they are: s & 1 == 0 to the
 *                  unauthenticated connection, else onto member (s >> 1) & 1's
 *                  link (which then fails to open them: the link ends)
 *     s >> 6 == 2: peer (s & 3) % 3 hangs up and connects again (a member
 *                  redoes the handshake and, per the flags, the join)
 *     s >> 6 == 3: run the loop until nothing moves (timers when s & 1)
 *
 * Build and run: scripts/fuzz.sh SECONDS link; seeds in
 * tests/fuzz/corpus/link/ (made by tests/fuzz/make_link_corpus.py). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uthash.h>
#include <uv.h>

#include "actors.h"
#include "invariants.h"
#include "cluster.h"
#include "hooks.h"
#include "session.h"
#include "dispatch.h"
#include "link.h"
#include "log.h"
#include "node.h"
#include "objects.h"
#include "placement.h"
#include "procs.h"
#include "relay.h"

#define NPEERS 3 /* two members and one that never authenticates */
#define RAW_PEER 2
#define NONCE 32
#define SS crypto_secretstream_xchacha20poly1305_


int __real_uv_spawn(uv_loop_t *loop, uv_process_t *handle, const uv_process_options_t *options);
int __wrap_uv_spawn(uv_loop_t *loop, uv_process_t *handle, const uv_process_options_t *options)
{
    uv_process_options_t opt = *options;
    uv_stdio_container_t stdio[1] = {{.flags = UV_INHERIT_FD, .data.fd = -1}};
    opt.stdio = stdio;
    opt.stdio_count = 1;
    return __real_uv_spawn(loop, handle, &opt);
}

static const unsigned char test_token[BEAM_TOKEN_BYTES] = "beam-fuzz-link-test-token-32byte";

typedef struct peer_s {
    int fd;          /* -1: none */
    int stage;       /* 0 challenge awaited, 1 auth_ok awaited, 2 sealed both ways */
    int welcomed;
    int eof;         /* the head closed it */
    unsigned char head_nonce[NONCE], my_nonce[NONCE];
    crypto_secretstream_xchacha20poly1305_state tx, rx;
    char *buf; /* read, not yet taken as frames */
    size_t len, cap;
    char *out; /* to send, in order (sealing order is sending order) */
    size_t outlen, outcap;
} peer_t;

typedef struct fuzz_s {
    uv_loop_t loop;
    beam_node_t node;
    int port;
    uint8_t flags;
    uint32_t joins; /* node ids: a new one at every join */
    uint32_t pids;
    peer_t peers[NPEERS];
} fuzz_t;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    beam_log_set_level(getenv("BEAM_FUZZ_LOG") ? BEAM_LOG_DEBUG : -1);
    CHECK(sodium_init() >= 0);
    return 0;
}

static void node_setup(fuzz_t *f)
{
    beam_node_t *node = &f->node;
    memset(f, 0, sizeof *f);
    for (int i = 0; i < NPEERS; i++)
        f->peers[i].fd = -1;
    CHECK(uv_loop_init(&f->loop) == 0);
    fuzz_node_init(node, &f->loop, 2);
    snprintf(node->socket_path, sizeof node->socket_path, "/nonexistent/beamd.sock");
    beam_sessions_init(&f->loop, node);
    beam_hooks_wire(node); /* beamd's own wiring */
    CHECK(beam_cluster_init_self(node) == 0);
    beam_cluster_opts_t co = {.listen_ip = "127.0.0.1", .port = 0, .timeout_ms = 3600 * 1000,
                              .heartbeat_ms = 3600 * 1000};
    memcpy(co.token, test_token, sizeof co.token);
    char err[256];
    if (beam_relay_listen(node, &co, err, sizeof err) < 0) {
        fprintf(stderr, "fuzz_link: %s\n", err);
        abort();
    }
    f->port = beam_links_port(node);
    CHECK(f->port > 0);
}

/* ---------- the fake members' side of the protocol ---------- */

static void mac(const char *label, const unsigned char *a, const unsigned char *b, unsigned char *out)
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, test_token, BEAM_TOKEN_BYTES);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label));
    crypto_auth_hmacsha256_update(&st, a, NONCE);
    crypto_auth_hmacsha256_update(&st, b, NONCE);
    crypto_auth_hmacsha256_final(&st, out);
}

static void stream_key(const char *label, const unsigned char *head, const unsigned char *member, unsigned char *key)
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, test_token, BEAM_TOKEN_BYTES, crypto_secretstream_xchacha20poly1305_KEYBYTES);
    crypto_generichash_update(&st, (const unsigned char *)label, strlen(label));
    crypto_generichash_update(&st, head, NONCE);
    crypto_generichash_update(&st, member, NONCE);
    crypto_generichash_final(&st, key, crypto_secretstream_xchacha20poly1305_KEYBYTES);
}

static int drain(fuzz_t *f);

/* Writes all of data to peer i, running the loop (and reading every peer,
 * so the head is never stuck writing to us) while its socket is full; a
 * peer the head closed takes nothing more. */
static void peer_write(fuzz_t *f, int i, const void *data, size_t n)
{
    peer_t *p = &f->peers[i];
    size_t off = 0;
    int stuck = 0;
    while (off < n && p->fd >= 0 && !p->eof) {
        ssize_t w = send(p->fd, (const char *)data + off, n - off, MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
            stuck = 0;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return; /* EPIPE, ECONNRESET: the head closed it */
        uv_run(&f->loop, UV_RUN_NOWAIT);
        drain(f);
        CHECK(++stuck < 100000);
    }
}

static void queue(peer_t *p, const void *data, size_t n)
{
    if (p->outlen + n > p->outcap) {
        p->outcap = (p->outlen + n) * 2;
        p->out = realloc(p->out, p->outcap);
        CHECK(p->out);
    }
    memcpy(p->out + p->outlen, data, n);
    p->outlen += n;
}

/* Sends what every peer has queued. Writing reads too, which may queue
 * more (answers): that goes on the next round. */
static int flush_out(fuzz_t *f)
{
    int any = 0;
    for (int i = 0; i < NPEERS; i++) {
        peer_t *p = &f->peers[i];
        if (!p->outlen)
            continue;
        char *buf = p->out;
        size_t n = p->outlen;
        p->out = NULL;
        p->outlen = p->outcap = 0;
        peer_write(f, i, buf, n);
        free(buf);
        any = 1;
    }
    return any;
}

static void queue_frame(peer_t *p, const void *body, size_t n)
{
    unsigned char hdr[4];
    beam_put_u32be(hdr, (uint32_t)n);
    queue(p, hdr, 4);
    queue(p, body, n);
}

/* Seals body (a msgpack message) as one frame from member i. */
static void send_sealed(fuzz_t *f, int i, const void *body, size_t n)
{
    peer_t *p = &f->peers[i];
    if (p->stage != 2 || n == 0)
        return;
    unsigned char *c = malloc(n + crypto_secretstream_xchacha20poly1305_ABYTES);
    CHECK(c);
    unsigned long long clen;
    crypto_secretstream_xchacha20poly1305_push(&p->tx, c, &clen, body, n, NULL, 0,
                                               crypto_secretstream_xchacha20poly1305_TAG_MESSAGE);
    queue_frame(p, c, (size_t)clen);
    free(c);
}

static void send_enc(fuzz_t *f, int i, beam_enc_t *enc, int sealed)
{
    size_t len;
    CHECK(beam_enc_end(enc, 0) == 0);
    char *buf = beam_enc_take(enc, &len);
    beam_enc_destroy(enc);
    CHECK(buf && len > BEAM_FRAME_HEADER);
    if (sealed)
        send_sealed(f, i, buf + BEAM_FRAME_HEADER, len - BEAM_FRAME_HEADER);
    else
        queue(&f->peers[i], buf, len);
    free(buf);
}

/* The join a real member sends, with a new node id each time. */
static void send_join(fuzz_t *f, int i)
{
    char id[BEAM_NODE_ID_SIZE] = {0}, ip[32], res[48];
    uint32_t n = ++f->joins;
    memcpy(id, &n, sizeof n);
    id[BEAM_NODE_ID_SIZE - 1] = (char)(0x10 + i);
    snprintf(ip, sizeof ip, "127.0.0.%d", 9 + i);
    snprintf(res, sizeof res, "node:%s", ip);
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "join", 7);
    beam_pack_key(&enc.pk, "max_frame");
    msgpack_pack_uint32(&enc.pk, 1u << 16);
    beam_pack_key(&enc.pk, "node_id");
    beam_pack_bin(&enc.pk, id, sizeof id);
    beam_pack_key(&enc.pk, "node_ip");
    beam_pack_str(&enc.pk, ip);
    beam_pack_key(&enc.pk, "hostname");
    beam_pack_str(&enc.pk, "member");
    beam_pack_key(&enc.pk, "socket");
    beam_pack_str(&enc.pk, "/nonexistent/member.sock");
    beam_pack_key(&enc.pk, "resources");
    msgpack_pack_array(&enc.pk, 4);
    const char *names[4] = {"CPU", "memory", res, "custom"};
    const int64_t totals[4] = {4 * BEAM_RES_UNIT, 1000000 * (int64_t)BEAM_RES_UNIT, BEAM_RES_UNIT, 2 * BEAM_RES_UNIT};
    for (int k = 0; k < 4; k++) {
        msgpack_pack_array(&enc.pk, 2);
        beam_pack_str(&enc.pk, names[k]);
        msgpack_pack_int64(&enc.pk, totals[k]);
    }
    beam_pack_key(&enc.pk, "gpus");
    msgpack_pack_array(&enc.pk, 2);
    beam_pack_str(&enc.pk, "0");
    beam_pack_str(&enc.pk, "1");
    send_enc(f, i, &enc, 1);
}

/* What a real member answers: its worker started, or was killed. */
static void answer(fuzz_t *f, int i, const char *op, const char *actor)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    int started = strcmp(op, "worker_started") == 0;
    beam_enc_push(&enc, op, started ? 2 : 4);
    beam_pack_key(&enc.pk, "actor");
    beam_pack_bin(&enc.pk, actor, BEAM_ACTOR_ID_SIZE);
    beam_pack_key(&enc.pk, "pid");
    msgpack_pack_int64(&enc.pk, 1000 + (int64_t)(++f->pids % 30000));
    if (!started) {
        beam_pack_key(&enc.pk, "status");
        msgpack_pack_int64(&enc.pk, 0);
        beam_pack_key(&enc.pk, "signal");
        msgpack_pack_int(&enc.pk, 9);
    }
    send_enc(f, i, &enc, 1);
}

/* One frame the head sent peer i. Until the handshake ends it is plain;
 * after, it must open and parse: the head seals every frame it sends. */
static void peer_frame(fuzz_t *f, int i, const unsigned char *frame, size_t len)
{
    peer_t *p = &f->peers[i];
    beam_limits_t lim;
    beam_limits_default(&lim);
    beam_msg_t m;
    char err[160];
    unsigned char *plain = NULL;
    if (p->stage == 2) {
        unsigned long long plen;
        unsigned char tag;
        CHECK(len >= crypto_secretstream_xchacha20poly1305_ABYTES);
        plain = malloc(len);
        CHECK(plain);
        CHECK(crypto_secretstream_xchacha20poly1305_pull(&p->rx, plain, &plen, &tag, frame, len, NULL, 0) == 0);
        frame = plain;
        len = (size_t)plen;
    }
    if (beam_msg_parse((const char *)frame, len, &lim, &m, err, sizeof err) < 0) {
        fprintf(stderr, "fuzz_link: the head sent a frame that does not parse: %s\n", err);
        abort();
    }
    CHECK(m.type == BEAM_MSG_PUSH);
    if (getenv("BEAM_FUZZ_LOG"))
        fprintf(stderr, "fuzz_link: member %d got %.*s\n", i, (int)m.op_len, m.op);
    const char *s;
    uint32_t n;
    if (p->stage == 0) {
        CHECK(beam_str_eq(m.op, m.op_len, "challenge"));
        CHECK(beam_field_bin(&m.params, "nonce", &s, &n) == 0 && n == NONCE);
        memcpy(p->head_nonce, s, NONCE);
        randombytes_buf(p->my_nonce, NONCE);
        unsigned char key[crypto_secretstream_xchacha20poly1305_KEYBYTES];
        unsigned char header[crypto_secretstream_xchacha20poly1305_HEADERBYTES];
        unsigned char tag[crypto_auth_hmacsha256_BYTES];
        stream_key("beam-m2h-v1", p->head_nonce, p->my_nonce, key);
        crypto_secretstream_xchacha20poly1305_init_push(&p->tx, header, key);
        mac("beam-node-v1", p->head_nonce, p->my_nonce, tag);
        beam_enc_t enc;
        beam_enc_init(&enc);
        beam_enc_push(&enc, "auth", 3);
        beam_pack_key(&enc.pk, "nonce");
        beam_pack_bin(&enc.pk, p->my_nonce, NONCE);
        beam_pack_key(&enc.pk, "mac");
        beam_pack_bin(&enc.pk, tag, sizeof tag);
        beam_pack_key(&enc.pk, "stream");
        beam_pack_bin(&enc.pk, header, sizeof header);
        p->stage = 1;
        send_enc(f, i, &enc, 0);
    } else if (p->stage == 1) {
        unsigned char want[crypto_auth_hmacsha256_BYTES], key[crypto_secretstream_xchacha20poly1305_KEYBYTES];
        CHECK(beam_str_eq(m.op, m.op_len, "auth_ok"));
        mac("beam-head-v1", p->my_nonce, p->head_nonce, want);
        CHECK(beam_field_bin(&m.params, "mac", &s, &n) == 0 && n == sizeof want && memcmp(s, want, n) == 0);
        CHECK(beam_field_bin(&m.params, "stream", &s, &n) == 0 &&
              n == crypto_secretstream_xchacha20poly1305_HEADERBYTES);
        stream_key("beam-h2m-v1", p->head_nonce, p->my_nonce, key);
        crypto_secretstream_xchacha20poly1305_init_pull(&p->rx, (const unsigned char *)s, key);
        p->stage = 2;
    } else if (beam_str_eq(m.op, m.op_len, "welcome")) {
        p->welcomed = 1;
    } else if ((f->flags & 8) && beam_field_id(&m.params, "actor", BEAM_ACTOR_ID_SIZE, &s) == 0) {
        char actor[BEAM_ACTOR_ID_SIZE];
        memcpy(actor, s, sizeof actor);
        if (beam_str_eq(m.op, m.op_len, "spawn"))
            answer(f, i, "worker_started", actor);
        else if (beam_str_eq(m.op, m.op_len, "kill_worker"))
            answer(f, i, "worker_exit", actor);
    }
    beam_msg_destroy(&m);
    free(plain);
}

/* Reads what the head sent every peer; 1 if anything came. */
static int drain(fuzz_t *f)
{
    static char scratch[1 << 16];
    int any = 0;
    for (int i = 0; i < NPEERS; i++) {
        peer_t *p = &f->peers[i];
        while (p->fd >= 0 && !p->eof) {
            ssize_t n = recv(p->fd, scratch, sizeof scratch, 0);
            if (n <= 0) {
                if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                    p->eof = 1;
                break;
            }
            any = 1;
            if (i == RAW_PEER)
                continue; /* a challenge, then EOF */
            if (p->len + (size_t)n > p->cap) {
                p->cap = (p->len + (size_t)n) * 2;
                p->buf = realloc(p->buf, p->cap);
                CHECK(p->buf);
            }
            memcpy(p->buf + p->len, scratch, (size_t)n);
            p->len += (size_t)n;
            size_t off = 0;
            while (p->len - off >= 4) {
                const unsigned char *h = (const unsigned char *)p->buf + off;
                size_t flen = ((size_t)h[0] << 24) | ((size_t)h[1] << 16) | ((size_t)h[2] << 8) | h[3];
                CHECK(flen > 0 && flen < (1u << 30));
                if (p->len - off - 4 < flen)
                    break;
                off += 4 + flen;
                peer_frame(f, i, h + 4, flen); /* queues what it answers */
            }
            memmove(p->buf, p->buf + off, p->len - off);
            p->len -= off;
        }
    }
    return any;
}

/* One round of the peers: reads every one and sends what they queued
 * (fuzz_pump's move). */
static int move(void *target)
{
    int got = drain(target);
    got |= flush_out(target);
    return got;
}

static void pump(fuzz_t *f, int timers)
{
    fuzz_pump(&f->loop, move, f, timers);
}

static void peer_hangup(fuzz_t *f, int i)
{
    peer_t *p = &f->peers[i];
    if (p->fd >= 0)
        close(p->fd); /* SO_LINGER 0: a reset, and no TIME_WAIT left behind */
    free(p->buf);
    free(p->out);
    memset(p, 0, sizeof *p);
    p->fd = -1;
}

/* Connects peer i; a member then does the handshake and, per the flags,
 * the standard join. */
static void peer_connect(fuzz_t *f, int i)
{
    peer_t *p = &f->peers[i];
    peer_hangup(f, i);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    CHECK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0);
    int one = 1; /* as the real member's link: without it a small frame waits for the last one's ACK */
    CHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    /* non-blocking, so that libFuzzer's SIGALRM (-timeout) cannot cut the
     * connect short (EINTR): wait for it to finish instead */
    CHECK(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        CHECK(errno == EINPROGRESS || errno == EINTR);
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int rc;
        while ((rc = poll(&pfd, 1, 10000)) < 0 && errno == EINTR)
            ;
        int soerr = -1;
        socklen_t sl = sizeof soerr;
        CHECK(rc == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0);
        if (soerr != 0) {
            fprintf(stderr, "fuzz_link: cannot connect to the head: %s\n", strerror(soerr));
            abort();
        }
    }
    p->fd = fd;
    if (i == RAW_PEER) {
        pump(f, 0);
        return;
    }
    for (int k = 0; k < 1000 && p->stage != 2 && !p->eof; k++)
        pump(f, 0);
    CHECK(p->stage == 2); /* the handshake with the token always succeeds */
    int join = i == 0 ? (f->flags & 1) : (f->flags & 4);
    if (join) {
        send_join(f, i);
        for (int k = 0; k < 1000 && !p->welcomed && !p->eof; k++)
            pump(f, 0);
        CHECK(p->welcomed);
    }
}

/* ---------- the checks at the end ---------- */


/* After every peer hung up: no member is left alive, and the tables are
 * empty as fuzz_dispatch.c's are (invariants.h). */
static void check_empty(fuzz_t *f)
{
    beam_node_t *node = &f->node;
    beam_member_t *alive[BEAM_MAX_MEMBERS];
    CHECK(beam_cluster_alive(node, alive, BEAM_MAX_MEMBERS) == 1 && alive[0]->local);
    fuzz_check_tables_empty(node);
}

static void on_walk_close(uv_handle_t *h, void *arg)
{
    (void)arg;
    fprintf(stderr, "fuzz_link: handle of type %s left open\n", uv_handle_type_name(h->type));
}

static void node_teardown(fuzz_t *f)
{
    beam_node_t *node = &f->node;
    beam_node_stop(node, "the fuzz input ended");
    uv_run(&f->loop, UV_RUN_DEFAULT);
    beam_node_free(node);
    if (uv_loop_close(&f->loop) != 0) {
        uv_walk(&f->loop, on_walk_close, NULL);
        CHECK(!"the loop has handles open after teardown");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fuzz_t f;
    if (size == 0)
        return 0;
    node_setup(&f);
    f.flags = data[0];
    peer_connect(&f, 0);
    if (f.flags & 2)
        peer_connect(&f, 1);
    peer_connect(&f, RAW_PEER);

    size_t off = 1;
    while (off < size) {
        uint8_t s = data[off++];
        switch (s >> 6) {
        case 0:
        case 1: {
            if (size - off < 2) {
                off = size;
                break;
            }
            size_t n = ((size_t)data[off] << 8) | data[off + 1];
            off += 2;
            if (n > size - off)
                n = size - off;
            if (s >> 6 == 0) {
                send_sealed(&f, s & 1, data + off, n);
            } else {
                flush_out(&f); /* what was sealed before goes first */
                peer_write(&f, (s & 1) ? (s >> 1) & 1 : RAW_PEER, data + off, n);
            }
            off += n;
            pump(&f, 0);
            break;
        }
        case 2:
            peer_connect(&f, (s & 3) % NPEERS);
            break;
        default:
            pump(&f, s & 1);
            break;
        }
    }

    for (int i = 0; i < NPEERS; i++)
        peer_hangup(&f, i);
    beam_member_t *alive[BEAM_MAX_MEMBERS];
    for (int k = 0; k < 1000 && (f.node.sessions || beam_cluster_alive(&f.node, alive, BEAM_MAX_MEMBERS) > 1); k++)
        uv_run(&f.loop, UV_RUN_NOWAIT);
    pump(&f, 0);
    check_empty(&f);
    node_teardown(&f);
    return 0;
}
