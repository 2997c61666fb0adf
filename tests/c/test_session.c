/* test_session.c — one client as the daemon sees it (src/session.h). The
 * local kind needs a stream: a real unix socket in a temporary folder,
 * accepted by conn into a local session, its peer a plain blocking socket
 * of the test; the op table is a recorder. Its frames reach dispatch on its
 * port; a close is deferred (closing at once, ended on a later loop turn,
 * its peer then sees the end); its end, whichever side closes, lets go of
 * what it held (holds, waiters, its count on its node). A member not joined
 * to its head takes no client. The remote kind (the head's record of a
 * member's client) needs no stream: found by link and vconn, one per pair,
 * its close deferred to the reaper and queued once, a lost member's
 * clients closed without a word; ids are unique across kinds. Relayed
 * sessions need an up link to a head and are covered end to end by
 * tests/python/test_cluster*.py. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "client.h"
#include "cluster.h"
#include "objects.h"
#include "session.h"

typedef struct fixture_s {
    uv_loop_t loop;
    beam_node_t node;
    uv_pipe_t server;
    uv_timer_t deadline, tick;
    int timed_out;
    char dir[64], path[128];
    beam_member_t *m2, *m3;
    /* the op table's recorder */
    int dispatched;
    beam_port_t *dispatched_port;
    char frame[64];
    size_t frame_len;
} fixture_t;

static fixture_t *the;

static void record_dispatch(beam_port_t *p, const char *frame, size_t len, beam_buf_t *buf)
{
    (void)buf;
    the->dispatched++;
    the->dispatched_port = p;
    assert_true(len <= sizeof the->frame);
    memcpy(the->frame, frame, len);
    the->frame_len = len;
}

static void on_connection(uv_stream_t *server, int status)
{
    assert_int_equal(status, 0);
    beam_conn_accept(&the->node, server);
}

static beam_member_t *join(fixture_t *f, unsigned char tag)
{
    char id[BEAM_NODE_ID_SIZE];
    memset(id, tag, sizeof id);
    beam_pool_t pool;
    beam_pool_init(&pool);
    return beam_cluster_add(&f->node, id, "10.0.0.9", "host", "/tmp/s", &pool, NULL, NULL);
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (!f || uv_loop_init(&f->loop) != 0)
        return -1;
    the = f;
    beam_node_t *node = &f->node;
    node->loop = &f->loop;
    node->is_head = 1;
    beam_limits_default(&node->limits);
    node->soft_outq = 1u << 20;
    node->max_outq = 64u << 20;
    memset(node->node_id, 0xaa, BEAM_NODE_ID_SIZE);
    beam_pool_init(&node->pool);
    if (beam_cluster_init_self(node) < 0)
        return -1;
    f->m2 = join(f, 0xb2);
    f->m3 = join(f, 0xb3);
    node->hooks.conn_open = beam_session_open_local;
    node->hooks.dispatch = record_dispatch;
    beam_sessions_init(&f->loop, node);
    uv_timer_init(&f->loop, &f->deadline);
    uv_timer_init(&f->loop, &f->tick);
    snprintf(f->dir, sizeof f->dir, "/tmp/beam-session-XXXXXX");
    if (!f->m2 || !f->m3 || !mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof f->path, "%s/s.sock", f->dir);
    uv_pipe_init(&f->loop, &f->server, 0);
    if (uv_pipe_bind(&f->server, f->path) != 0 || uv_listen((uv_stream_t *)&f->server, 8, on_connection) != 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    beam_sessions_close_all(&f->node, "the test ends");
    assert_null(f->node.sessions);
    uv_close((uv_handle_t *)&f->server, NULL);
    uv_close((uv_handle_t *)&f->node.reaper, NULL);
    uv_close((uv_handle_t *)&f->deadline, NULL);
    uv_close((uv_handle_t *)&f->tick, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    beam_objects_destroy(&f->node);
    beam_cluster_destroy(&f->node);
    beam_pool_destroy(&f->node.pool);
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

static void on_deadline(uv_timer_t *t)
{
    the->timed_out = 1;
    (void)t;
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

/* Runs the loop until done(f) or 5 s pass (a failure). A tick every
 * millisecond ends each turn's wait, so done is looked at soon after a
 * timer's callback (the reaper's) made it true. */
static void run_until(fixture_t *f, int (*done)(fixture_t *f))
{
    f->timed_out = 0;
    uv_timer_start(&f->deadline, on_deadline, 5000, 0);
    uv_timer_start(&f->tick, on_tick, 1, 1);
    while (!done(f) && !f->timed_out)
        uv_run(&f->loop, UV_RUN_ONCE);
    uv_timer_stop(&f->deadline);
    uv_timer_stop(&f->tick);
    if (!done(f))
        fail_msg("the loop did not get there in 5 s");
}

static size_t nsessions(const beam_node_t *node)
{
    size_t n = 0;
    for (beam_session_t *s = node->sessions; s; s = s->next)
        n++;
    return n;
}

/* The newest local session, or NULL. */
static beam_session_t *newest_local(const beam_node_t *node)
{
    beam_session_t *last = NULL;
    for (beam_session_t *s = node->sessions; s; s = s->next)
        if (s->conn)
            last = s;
    return last;
}

static size_t nlocal(const beam_node_t *node)
{
    size_t n = 0;
    for (beam_session_t *s = node->sessions; s; s = s->next)
        n += s->conn != NULL;
    return n;
}

static size_t want_local; /* how many local sessions has_local waits for */

static int has_local(fixture_t *f)
{
    return nlocal(&f->node) >= want_local;
}

static int has_no_session(fixture_t *f)
{
    return f->node.sessions == NULL;
}

static int has_frame(fixture_t *f)
{
    return f->dispatched > 0;
}

/* A client of this node: its socket (the test's end) and its session. */
static int connect_local(fixture_t *f, beam_session_t **s)
{
    unsigned peer;
    int fd = beam_client_connect(f->path, &peer);
    assert_true(fd >= 0);
    want_local = nlocal(&f->node) + 1;
    run_until(f, has_local);
    *s = newest_local(&f->node);
    assert_int_equal((*s)->kind->kind, BEAM_SESSION_LOCAL);
    return fd;
}

/* 1 when the peer of fd has ended the stream (EOF or reset), waiting up to 5 s. */
static int peer_ended(int fd)
{
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char b[256];
    ssize_t n;
    while ((n = read(fd, b, sizeof b)) > 0)
        ;
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* --- local --- */

static void test_local_frames_reach_dispatch(void **state)
{
    fixture_t *f = *state;
    beam_session_t *s;
    int fd = connect_local(f, &s);
    /* who it is, from its stream */
    assert_int_equal(s->port.pid, getpid());
    assert_int_equal(s->port.uid, getuid());
    assert_ptr_equal(s->port.member, f->node.self);
    assert_int_equal(f->node.self->clients, 1);
    assert_ptr_equal(beam_session_find_local(&f->node, s->port.id), s);
    assert_null(beam_session_find_local(&f->node, s->port.id + 1));
    assert_false(beam_port_closing(&s->port));
    /* a frame it writes, on its port */
    beam_enc_t e;
    size_t n;
    beam_enc_init(&e);
    beam_enc_request(&e, 3, "ping", 0);
    assert_int_equal(beam_enc_end(&e, 0), 0);
    char *frame = beam_enc_take(&e, &n);
    beam_enc_destroy(&e);
    assert_non_null(frame);
    assert_int_equal(write(fd, frame, n), (ssize_t)n);
    run_until(f, has_frame);
    assert_int_equal(f->dispatched, 1);
    assert_ptr_equal(f->dispatched_port, &s->port);
    assert_int_equal(f->frame_len, n - BEAM_FRAME_HEADER);
    assert_memory_equal(f->frame, frame + BEAM_FRAME_HEADER, f->frame_len);
    free(frame);
    close(fd);
    run_until(f, has_no_session);
}

static void test_local_close_is_deferred(void **state)
{
    fixture_t *f = *state;
    beam_session_t *s;
    int fd = connect_local(f, &s);
    beam_session_close(s, "closed by the test");
    /* closing at once, still there until the loop turns */
    assert_true(beam_port_closing(&s->port));
    assert_ptr_equal(f->node.sessions, s);
    char *buf = malloc(8);
    assert_non_null(buf);
    assert_int_equal(beam_port_send(&s->port, buf, 8), -EPIPE);
    beam_session_close(s, "again"); /* (once is enough) */
    assert_ptr_equal(f->node.sessions, s);
    run_until(f, has_no_session);
    assert_int_equal(f->node.self->clients, 0);
    assert_true(peer_ended(fd));
    close(fd);
}

/* The peer goes: the session ends, and what it held is let go. */
static void test_local_end_lets_go(void **state)
{
    fixture_t *f = *state;
    beam_session_t *s;
    int fd = connect_local(f, &s);
    beam_node_t *node = &f->node;
    char held[BEAM_OBJECT_ID_SIZE], waited[BEAM_OBJECT_ID_SIZE], actor[BEAM_ACTOR_ID_SIZE];
    memset(held, 1, sizeof held);
    memset(waited, 2, sizeof waited);
    memset(actor, 3, sizeof actor);
    /* a value it holds, a pending object it waits on, an actor it held that
     * is gone already */
    beam_object_t *h = beam_object_create(node, held), *w = beam_object_create(node, waited);
    assert_non_null(h);
    assert_non_null(w);
    assert_int_equal(beam_port_hold(&s->port.held_objects, held, BEAM_OBJECT_ID_SIZE), 1);
    beam_object_hold(node, h);
    char *value = strdup("v");
    assert_non_null(value);
    beam_object_complete(node, h, 0, value, 1, NULL);
    assert_ptr_equal(beam_object_find(node, held), h);
    assert_int_equal(beam_port_hold(&s->port.held_actors, actor, BEAM_ACTOR_ID_SIZE), 1);
    msgpack_object o = {.type = MSGPACK_OBJECT_BIN, .via.bin = {.size = BEAM_OBJECT_ID_SIZE, .ptr = waited}};
    msgpack_object_array ids = {.size = 1, .ptr = &o};
    assert_int_equal(beam_waiter_start(node, &s->port, 9, BEAM_WAIT_GET, &ids, 0, 30000), 0);
    assert_int_equal(w->nwaiters, 1);

    close(fd);
    run_until(f, has_no_session);
    assert_null(beam_object_find(node, held));
    assert_ptr_equal(beam_object_find(node, waited), w);
    assert_int_equal(w->nwaiters, 0);
    assert_int_equal(node->self->clients, 0);
}

static int accepted(fixture_t *f)
{
    return f->node.next_conn > 0;
}

/* A member whose head has not welcomed it yet serves no client: the stream
 * is refused and ends. */
static void test_member_not_joined_refuses(void **state)
{
    fixture_t *f = *state;
    f->node.is_member = 1;
    unsigned peer;
    int fd = beam_client_connect(f->path, &peer);
    assert_true(fd >= 0);
    run_until(f, accepted);
    assert_true(peer_ended(fd));
    close(fd);
    assert_null(f->node.sessions);
    assert_int_equal(f->node.self->clients, 0);
    f->node.is_member = 0;
}

/* --- remote --- */

static char link_a, link_b; /* stand-ins for two members' links: only their addresses are used */
#define LINK_A ((struct beam_link_s *)&link_a)
#define LINK_B ((struct beam_link_s *)&link_b)

static int reaped(fixture_t *f)
{
    return f->node.closing_sessions == NULL;
}

static void test_remote_one_per_link_and_vconn(void **state)
{
    fixture_t *f = *state;
    beam_node_t *node = &f->node;
    beam_session_t *a5 = beam_session_open_remote(node, LINK_A, f->m2, 5, 100, 1000);
    assert_non_null(a5);
    assert_int_equal(a5->kind->kind, BEAM_SESSION_REMOTE);
    assert_ptr_equal(a5->port.member, f->m2);
    assert_int_equal(a5->port.pid, 100);
    assert_int_equal(a5->port.uid, 1000);
    assert_null(a5->conn);
    /* vconn 5 of link A is taken; vconn 5 of link B is another client */
    assert_null(beam_session_open_remote(node, LINK_A, f->m2, 5, 101, 1000));
    beam_session_t *b5 = beam_session_open_remote(node, LINK_B, f->m3, 5, 102, 1000);
    assert_non_null(b5);
    assert_ptr_equal(beam_session_find_remote(node, LINK_A, 5), a5);
    assert_ptr_equal(beam_session_find_remote(node, LINK_B, 5), b5);
    assert_null(beam_session_find_remote(node, LINK_A, 6));
    assert_int_equal(f->m2->clients, 1);
    assert_int_equal(f->m3->clients, 1);
    /* a local client's id is another than theirs, and find_local finds
     * only local ones */
    beam_session_t *local;
    int fd = connect_local(f, &local);
    assert_true(local->port.id != a5->port.id && local->port.id != b5->port.id && a5->port.id != b5->port.id);
    assert_null(beam_session_find_local(node, a5->port.id));
    assert_ptr_equal(beam_session_find_local(node, local->port.id), local);
    a5->remote_closed = b5->remote_closed = 1; /* (nothing to tell the stand-in links) */
    close(fd);
}

static void test_remote_close_is_deferred(void **state)
{
    fixture_t *f = *state;
    beam_node_t *node = &f->node;
    beam_session_t *s = beam_session_open_remote(node, NULL, f->m2, 5, 100, 0);
    assert_non_null(s);
    char why[32] = "gone for a reason";
    beam_session_close(s, why);
    memset(why, 'x', sizeof why - 1); /* (copied: the caller's text may go) */
    assert_true(beam_port_closing(&s->port));
    assert_string_equal(s->why, "gone for a reason");
    beam_session_close(s, "twice"); /* queued once: a second end would free it twice */
    assert_string_equal(s->why, "gone for a reason");
    assert_ptr_equal(beam_session_find_remote(node, NULL, 5), s);
    assert_int_equal(f->m2->clients, 1);
    run_until(f, reaped);
    assert_null(beam_session_find_remote(node, NULL, 5));
    assert_int_equal(f->m2->clients, 0);
    /* its vconn is free again */
    s = beam_session_open_remote(node, NULL, f->m2, 5, 100, 0);
    assert_non_null(s);
}

static void test_member_lost_closes_its_clients(void **state)
{
    fixture_t *f = *state;
    beam_node_t *node = &f->node;
    beam_session_t *a = beam_session_open_remote(node, LINK_A, f->m2, 1, 100, 0);
    beam_session_t *b = beam_session_open_remote(node, LINK_A, f->m2, 2, 101, 0);
    beam_session_t *c = beam_session_open_remote(node, LINK_B, f->m3, 1, 102, 0);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    beam_session_t *local;
    int fd = connect_local(f, &local);
    beam_sessions_member_lost(node, f->m2);
    /* its clients close without a word to it (their links are not touched) */
    assert_true(beam_port_closing(&a->port) && a->remote_closed);
    assert_true(beam_port_closing(&b->port) && b->remote_closed);
    assert_false(beam_port_closing(&c->port));
    assert_false(beam_port_closing(&local->port));
    run_until(f, reaped);
    assert_int_equal(nsessions(node), 2);
    assert_int_equal(f->m2->clients, 0);
    assert_ptr_equal(beam_session_find_remote(node, LINK_B, 1), c);
    c->remote_closed = 1;
    close(fd);
}

static void test_close_all(void **state)
{
    fixture_t *f = *state;
    beam_node_t *node = &f->node;
    beam_session_t *a = beam_session_open_remote(node, NULL, f->m2, 1, 100, 0);
    beam_session_t *b = beam_session_open_remote(node, NULL, f->m3, 2, 101, 0);
    assert_non_null(a);
    assert_non_null(b);
    beam_session_t *local;
    int fd = connect_local(f, &local);
    beam_session_close(a, "queued"); /* ended by close_all, once */
    beam_sessions_close_all(node, "the daemon stops");
    assert_null(node->sessions);
    assert_null(node->closing_sessions);
    assert_int_equal(f->m2->clients + f->m3->clients + node->self->clients, 0);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_true(peer_ended(fd));
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_local_frames_reach_dispatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_close_is_deferred, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_end_lets_go, setup, teardown),
        cmocka_unit_test_setup_teardown(test_member_not_joined_refuses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remote_one_per_link_and_vconn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remote_close_is_deferred, setup, teardown),
        cmocka_unit_test_setup_teardown(test_member_lost_closes_its_clients, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_all, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
