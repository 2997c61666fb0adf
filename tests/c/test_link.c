/* test_link.c — one TCP link (src/link.h) against a hand-driven member in
 * this process: the handshake through auth.h up to the owner's on_up, a
 * frame delivered to on_frame, and the invariants of closing: a write queue
 * past its cap, or a write to a peer that is gone, never closes the link
 * under the caller of the send (on_close runs on a later loop turn, once),
 * and a wrong token never reaches on_up. No beamd, no tables. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "link.h"
#include "log.h"

static const unsigned char token[BEAM_TOKEN_BYTES] = "beam-link-test-token-32-bytes-ok";
static const unsigned char wrong[BEAM_TOKEN_BYTES] = "beam-link-test-token-32-bytes-no";

typedef struct fixture_s {
    uv_loop_t loop;
    beam_node_t node;
    int fd;                 /* the member's end */
    beam_auth_t auth;       /* the member's side of the handshake */
    beam_link_t *link;      /* the head's end, as on_up saw it */
    int ups, frames, closes;
    int closes_in_send;     /* on_close ran while a send was under way */
    int in_send;
    char why[160];
    char last_op[32];
    char ops[96];           /* every frame's op, in order, each followed by a space */
    size_t data_ok;         /* the bytes of the last `data` bin, when they are all (i % 251), else 0 */
} fixture_t;

static fixture_t *fx;

static void on_up(beam_node_t *node, beam_link_t *l)
{
    (void)node;
    fx->ups++;
    fx->link = l;
}

static void on_frame(beam_node_t *node, beam_link_t *l, const beam_msg_t *m)
{
    (void)node;
    fx->frames++;
    snprintf(fx->last_op, sizeof fx->last_op, "%.*s", (int)m->op_len, m->op);
    size_t at = strlen(fx->ops);
    snprintf(fx->ops + at, sizeof fx->ops - at, "%.*s ", (int)m->op_len, m->op);
    const char *v;
    uint32_t n, i = 0;
    if (beam_field_bin(&m->params, "data", &v, &n) == 0) {
        while (i < n && (unsigned char)v[i] == i % 251)
            i++;
        fx->data_ok = i == n ? n : 0;
    }
    beam_link_set_up(l, 0, fx);
}

static void on_close(beam_node_t *node, beam_link_t *l, const char *why)
{
    (void)node;
    (void)l;
    fx->closes++;
    fx->closes_in_send += fx->in_send;
    snprintf(fx->why, sizeof fx->why, "%s", why);
}

static int setup(void **state)
{
    fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    beam_node_t *node = &fx->node;
    node->loop = &fx->loop;
    beam_limits_default(&node->limits);
    node->max_outq = 64 << 10;
    beam_cluster_opts_t co = {.listen_ip = "127.0.0.1", .timeout_ms = 3600 * 1000, .heartbeat_ms = 3600 * 1000,
                              .hooks = {.on_up = on_up, .on_frame = on_frame, .on_close = on_close}};
    memcpy(co.token, token, sizeof co.token);
    char err[256];
    assert_int_equal(beam_links_listen(node, &co, err, sizeof err), 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)beam_links_port(node))};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    fx->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fx->fd >= 0);
    assert_int_equal(connect(fx->fd, (struct sockaddr *)&addr, sizeof addr), 0);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (fx->fd >= 0)
        close(fx->fd);
    fx->node.stopping = 1;
    beam_links_stop(&fx->node);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
    beam_links_destroy(&fx->node);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    beam_auth_clear(&fx->auth);
    free(fx);
    return 0;
}

/* Runs the loop until cond holds (a bounded number of turns). */
#define RUN_UNTIL(cond)                                                   \
    do {                                                                  \
        for (int turn_ = 0; turn_ < 2000 && !(cond); turn_++) {           \
            uv_run(&fx->loop, UV_RUN_NOWAIT);                             \
            poll(NULL, 0, 1);                                             \
        }                                                                 \
        assert_true(cond);                                                \
    } while (0)

/* Reads one frame's body from the member's end (blocking), running the
 * head's loop meanwhile. The caller frees it. */
static char *read_frame(size_t *len)
{
    unsigned char head[4];
    size_t got = 0;
    while (got < 4) {
        uv_run(&fx->loop, UV_RUN_NOWAIT);
        ssize_t n = recv(fx->fd, head + got, 4 - got, MSG_DONTWAIT);
        if (n > 0)
            got += (size_t)n;
        else
            poll(NULL, 0, 1);
    }
    *len = (size_t)head[0] << 24 | (size_t)head[1] << 16 | (size_t)head[2] << 8 | head[3];
    char *body = malloc(*len ? *len : 1);
    assert_non_null(body);
    for (got = 0; got < *len;) {
        uv_run(&fx->loop, UV_RUN_NOWAIT);
        ssize_t n = recv(fx->fd, body + got, *len - got, MSG_DONTWAIT);
        if (n > 0)
            got += (size_t)n;
        else
            poll(NULL, 0, 1);
    }
    return body;
}

/* A bin field of a clear handshake message, copied into out (n bytes). */
static void read_field(const char *op, const char *key, unsigned char *out, size_t n)
{
    size_t len;
    char *body = read_frame(&len), err[160];
    beam_msg_t m;
    const char *v;
    uint32_t vlen;
    assert_int_equal(beam_msg_parse(body, len, &fx->node.limits, &m, err, sizeof err), 0);
    assert_true(beam_str_eq(m.op, m.op_len, op));
    assert_int_equal(beam_field_bin(&m.params, key, &v, &vlen), 0);
    assert_int_equal(vlen, n);
    memcpy(out, v, n);
    beam_msg_destroy(&m);
    free(body);
}

/* Sends enc's frame from the member's end, sealed if sealed. */
static void member_send(beam_enc_t *enc, int sealed)
{
    size_t len;
    assert_int_equal(beam_enc_end(enc, 0), 0);
    char *buf = beam_enc_take(enc, &len);
    beam_enc_destroy(enc);
    if (sealed) {
        size_t body = len - 4, clen = body + BEAM_AUTH_SEAL_BYTES;
        char *out = malloc(4 + clen);
        assert_int_equal(beam_auth_seal(&fx->auth, (unsigned char *)buf + 4, body, (unsigned char *)out + 4), 0);
        beam_put_u32be(out, (uint32_t)clen);
        free(buf);
        buf = out;
        len = 4 + clen;
    }
    assert_int_equal(send(fx->fd, buf, len, 0), (ssize_t)len);
    free(buf);
}

/* The member's half of the handshake with member_token; returns after the
 * head has judged the answer. */
static void handshake(const unsigned char *member_token)
{
    unsigned char nonce[BEAM_AUTH_NONCE_BYTES], mac[BEAM_AUTH_MAC_BYTES], header[BEAM_AUTH_HEADER_BYTES];
    assert_int_equal(beam_auth_init(&fx->auth, member_token, BEAM_AUTH_MEMBER), 0);
    read_field("challenge", "nonce", nonce, sizeof nonce);
    assert_int_equal(beam_auth_answer(&fx->auth, nonce, mac, header), 0);
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "auth", 3);
    beam_pack_key(&enc.pk, "nonce");
    beam_pack_bin(&enc.pk, fx->auth.my_nonce, BEAM_AUTH_NONCE_BYTES);
    beam_pack_key(&enc.pk, "mac");
    beam_pack_bin(&enc.pk, mac, sizeof mac);
    beam_pack_key(&enc.pk, "stream");
    beam_pack_bin(&enc.pk, header, sizeof header);
    member_send(&enc, 0);
    RUN_UNTIL(fx->ups || fx->closes);
}

/* Through the handshake and one sealed frame: the owner marks it up. */
static void bring_up(void)
{
    handshake(token);
    assert_int_equal(fx->ups, 1);
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "hello_owner", 0);
    member_send(&enc, 1);
    RUN_UNTIL(fx->frames == 1);
    assert_string_equal(fx->last_op, "hello_owner");
    assert_ptr_equal(beam_link_data(fx->link), fx);
}

/* A head's message with a body of n bytes, sent by the test as any caller
 * of the link would. */
static int head_send(size_t n)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "blob", 1);
    beam_pack_key(&enc.pk, "data");
    char *data = calloc(1, n);
    beam_pack_bin(&enc.pk, data, n);
    free(data);
    beam_enc_end(&enc, 0);
    fx->in_send = 1;
    int rc = beam_link_send_enc(fx->link, &enc);
    fx->in_send = 0;
    return rc;
}

static void test_a_queue_past_its_cap_closes_on_the_next_turn(void **state)
{
    (void)state;
    bring_up();
    /* the member reads nothing: once the sockets' buffers are full, what
     * the head queues is counted until written, and written only as the
     * loop turns */
    int rc = 0, sends = 0;
    while (rc == 0 && sends < 4000) {
        rc = head_send(16 << 10);
        sends++;
    }
    assert_int_equal(rc, -ENOBUFS);
    assert_true(sends >= 4);
    assert_int_equal(fx->closes, 0); /* not under the caller */
    assert_int_equal(head_send(16), -EPIPE); /* closing: nothing more is sent */
    RUN_UNTIL(fx->closes == 1);
    assert_int_equal(fx->closes_in_send, 0);
    assert_string_equal(fx->why, "too many unread bytes queued");
    for (int i = 0; i < 5; i++)
        uv_run(&fx->loop, UV_RUN_NOWAIT);
    assert_int_equal(fx->closes, 1);
}

static void test_a_write_to_a_gone_peer_closes_on_a_later_turn(void **state)
{
    (void)state;
    bring_up();
    /* a reset, not a clean end: the head's next writes fail */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fx->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fx->fd);
    fx->fd = -1;
    for (int i = 0; i < 50 && !fx->closes; i++) {
        head_send(1024); /* fails or not: either way it never closes under us */
        assert_int_equal(fx->closes, 0);
        uv_run(&fx->loop, UV_RUN_NOWAIT);
        poll(NULL, 0, 1);
    }
    RUN_UNTIL(fx->closes == 1);
    assert_int_equal(fx->closes_in_send, 0);
}

/* The member's end reads the head's auth_ok and opens what follows. */
static void member_takes_auth_ok(void)
{
    size_t len;
    char *body = read_frame(&len), err[160];
    beam_msg_t m;
    const char *mac, *header;
    uint32_t mlen, hlen;
    assert_int_equal(beam_msg_parse(body, len, &fx->node.limits, &m, err, sizeof err), 0);
    assert_true(beam_str_eq(m.op, m.op_len, "auth_ok"));
    assert_int_equal(beam_field_bin(&m.params, "mac", &mac, &mlen), 0);
    assert_int_equal(beam_field_bin(&m.params, "stream", &header, &hlen), 0);
    assert_int_equal(beam_auth_check_ok(&fx->auth, (const unsigned char *)mac, mlen, (const unsigned char *)header,
                                        hlen),
                     0);
    beam_msg_destroy(&m);
    free(body);
}

/* One sealed frame from the head, opened by the member: its op. */
static void member_reads(char *op, size_t oplen)
{
    size_t len, plen;
    char *body = read_frame(&len), err[160];
    unsigned char *plain = malloc(len);
    assert_non_null(plain);
    assert_int_equal(beam_auth_open(&fx->auth, (unsigned char *)body, len, plain, &plen), 0);
    beam_msg_t m;
    assert_int_equal(beam_msg_parse((char *)plain, plen, &fx->node.limits, &m, err, sizeof err), 0);
    snprintf(op, oplen, "%.*s", (int)m.op_len, m.op);
    beam_msg_destroy(&m);
    free(plain);
    free(body);
}

/* A frame larger than a read (it lands in a buffer of its own) arrives
 * whole and before the small one sent after it; the head's small messages
 * of one turn reach the member sealed, in order, in one queue. */
static void test_large_and_small_frames_keep_their_order(void **state)
{
    (void)state;
    bring_up();
    member_takes_auth_ok();
    size_t n = 100u << 10; /* over BEAM_DECODER_OWN, within what loopback buffers take unread */
    char *data = malloc(n);
    assert_non_null(data);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)(i % 251);
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "big", 1);
    beam_pack_key(&enc.pk, "data");
    beam_pack_bin(&enc.pk, data, n);
    member_send(&enc, 1);
    free(data);
    beam_enc_init(&enc);
    beam_enc_push(&enc, "after", 0);
    member_send(&enc, 1);
    RUN_UNTIL(fx->frames >= 3 || fx->closes);
    assert_string_equal(fx->ops, "hello_owner big after ");
    assert_int_equal(fx->data_ok, n);
    for (int i = 0; i < 20; i++)
        assert_int_equal(head_send(16), 0);
    char op[32];
    for (int i = 0; i < 20; i++) {
        member_reads(op, sizeof op);
        assert_string_equal(op, "blob");
    }
    assert_int_equal(fx->closes, 0);
}

static void test_a_wrong_token_never_reaches_the_owner(void **state)
{
    (void)state;
    handshake(wrong);
    assert_int_equal(fx->ups, 0);
    RUN_UNTIL(fx->closes == 1);
    assert_string_equal(fx->why, "authentication failed");
    assert_int_equal(fx->frames, 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    beam_log_set_level(-1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_queue_past_its_cap_closes_on_the_next_turn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_write_to_a_gone_peer_closes_on_a_later_turn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_wrong_token_never_reaches_the_owner, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_and_small_frames_keep_their_order, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
