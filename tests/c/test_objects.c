/* test_objects.c — the object table (src/objects.h) on a real uv loop, with
 * no socket: object lifetimes under holders, pins, refs and waiters, refs
 * parsing, and get/wait answered through a test port (src/port.h) whose
 * operations keep every frame sent, parsed with the codec, and whose close
 * runs on the loop's next turn as a session's does. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utlist.h>

#include "log.h"
#include "objects.h"
#include "port.h"

/* --- the fixture: a loop, a node, and optionally one test port --- */

#define MAX_REPLIES 16
#define MAX_INBOX 64

typedef struct reply_s {
    char *frame; /* a copy: msg points into it */
    beam_msg_t msg;
} reply_t;

/* A client as the table sees it: sends are kept (the inbox, read by pump);
 * past cap bytes sent, a send closes it as a stream past its cap does; a
 * close takes effect on the loop's next turn (its waiters cancelled, its
 * holds dropped), never under the caller. */
typedef struct tport_s {
    beam_port_t port;
    struct fixture_s *f;
    int open;
    int closing;
    int ended;
    size_t cap;
    size_t sent;
    uv_idle_t closer;
    int has_closer;
    int logs;
} tport_t;

typedef struct fixture_s {
    uv_loop_t loop;
    beam_node_t node;
    beam_port_t *conn; /* NULL until conn_open, and again once it ended */
    tport_t tp;
    char *inbox[MAX_INBOX]; /* frames sent, not yet read by pump */
    size_t inbox_len[MAX_INBOX];
    int ninbox;
    int peer_eof; /* the port ended and its inbox is read */
    reply_t replies[MAX_REPLIES];
    int nreplies;
    int ended;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    if (uv_loop_init(&f->loop) != 0)
        return -1;
    f->loop.data = &f->node;
    f->node.loop = &f->loop;
    beam_limits_default(&f->node.limits);
    f->node.soft_outq = 64u << 20;
    f->node.max_outq = 1u << 30;
    f->node.node_index = 1;
    *state = f;
    return 0;
}

static void replies_free(fixture_t *f)
{
    for (int i = 0; i < f->nreplies; i++) {
        beam_msg_destroy(&f->replies[i].msg);
        free(f->replies[i].frame);
    }
    f->nreplies = 0;
}

static void inbox_free(fixture_t *f)
{
    for (int i = 0; i < f->ninbox; i++)
        free(f->inbox[i]);
    f->ninbox = 0;
}

static int tp_send(beam_port_t *p, char *buf, size_t len)
{
    tport_t *t = (tport_t *)p;
    fixture_t *f = t->f;
    assert_true(f->ninbox < MAX_INBOX);
    f->inbox[f->ninbox] = buf;
    f->inbox_len[f->ninbox++] = len;
    t->sent += len;
    if (t->cap && t->sent > t->cap) {
        beam_port_close(p, "too many unread bytes queued");
        return -1;
    }
    return 0;
}

static void tp_send_log(beam_port_t *p, int stream, const char *text, size_t len)
{
    (void)stream;
    (void)text;
    (void)len;
    ((tport_t *)p)->logs++;
}

/* What a session's end does for the object table. */
static void tp_end(tport_t *t)
{
    if (t->ended)
        return;
    t->ended = 1;
    t->closing = 1;
    beam_node_t *node = t->port.node;
    beam_waiters_cancel(node, &t->port);
    beam_held_t *h, *tmp;
    HASH_ITER(hh, t->port.held_objects, h, tmp) {
        HASH_DEL(t->port.held_objects, h);
        beam_object_t *o = beam_object_find(node, h->id);
        free(h);
        if (o)
            beam_object_unhold(node, o);
    }
    if (t->f->conn == &t->port)
        t->f->conn = NULL;
}

static void on_tp_closer(uv_idle_t *h)
{
    tport_t *t = h->data;
    uv_idle_stop(h);
    uv_close((uv_handle_t *)h, NULL);
    tp_end(t);
}

static void tp_close(beam_port_t *p, const char *why)
{
    (void)why;
    tport_t *t = (tport_t *)p;
    if (t->closing)
        return;
    t->closing = 1;
    uv_idle_init(p->node->loop, &t->closer);
    t->closer.data = t;
    t->has_closer = 1;
    uv_idle_start(&t->closer, on_tp_closer);
}

static int tp_closing(const beam_port_t *p)
{
    return ((const tport_t *)p)->closing;
}

static const beam_port_ops_t tp_ops = {tp_send, tp_send_log, tp_close, tp_closing, NULL};

/* Only frees what is left when a test failed before fixture_end. */
static int teardown(void **state)
{
    fixture_t *f = *state;
    if (!f->ended) {
        if (f->tp.open)
            tp_end(&f->tp);
        uv_run(&f->loop, UV_RUN_NOWAIT);
        beam_objects_destroy(&f->node);
        uv_loop_close(&f->loop);
    }
    replies_free(f);
    inbox_free(f);
    free(f);
    return 0;
}

/* The one client of a test. */
static beam_port_t *conn_open(fixture_t *f)
{
    tport_t *t = &f->tp;
    memset(t, 0, sizeof *t);
    t->port.ops = &tp_ops;
    t->port.node = &f->node;
    t->port.id = 1;
    t->port.role = BEAM_ROLE_DRIVER;
    t->f = f;
    t->open = 1;
    f->conn = &t->port;
    assert_int_equal(beam_port_closing(f->conn), 0);
    return f->conn;
}

/* Runs the loop without blocking and reads whatever the port was sent,
 * parsing whole frames into f->replies. */
static void pump(fixture_t *f)
{
    uv_run(&f->loop, UV_RUN_NOWAIT);
    for (int i = 0; i < f->ninbox; i++) {
        char *buf = f->inbox[i];
        size_t n = f->inbox_len[i];
        beam_decoder_t dec;
        beam_decoder_init(&dec, &f->node.limits);
        assert_int_equal(beam_decoder_feed(&dec, buf, n), 0);
        const char *frame;
        size_t len;
        int rc;
        while ((rc = beam_decoder_next(&dec, &frame, &len)) == 1) {
            assert_true(f->nreplies < MAX_REPLIES);
            reply_t *r = &f->replies[f->nreplies++];
            char err[160] = "";
            r->frame = malloc(len);
            assert_non_null(r->frame);
            memcpy(r->frame, frame, len);
            if (beam_msg_parse(r->frame, len, &f->node.limits, &r->msg, err, sizeof err) != 0)
                fail_msg("beamd sent a frame that does not parse: %s", err);
        }
        assert_int_equal(rc, 0);
        beam_decoder_destroy(&dec);
    }
    inbox_free(f);
    if (f->tp.ended)
        f->peer_eof = 1;
}

/* Asserts exactly n replies have arrived since the last call. */
static void expect_replies(fixture_t *f, int n)
{
    replies_free(f);
    pump(f);
    if (f->nreplies != n)
        fail_msg("expected %d replies, got %d", n, f->nreplies);
}

/* Runs the loop (timers included) until n replies have arrived or the peer
 * sees EOF; fails after limit_ms. */
static void wait_replies(fixture_t *f, int n, uint64_t limit_ms)
{
    uint64_t deadline = uv_hrtime() + limit_ms * 1000000u;
    replies_free(f);
    for (;;) {
        pump(f);
        if (f->nreplies >= n || f->peer_eof)
            return;
        if (uv_hrtime() > deadline)
            fail_msg("no reply within %llu ms", (unsigned long long)limit_ms);
        usleep(1000);
    }
}

static void count_timer(uv_handle_t *h, void *arg)
{
    if (h->type == UV_TIMER && !uv_is_closing(h))
        (*(int *)arg)++;
}

/* Timers open on the loop (a waiter's deadline is the only kind here). */
static int timers(fixture_t *f)
{
    int n = 0;
    uv_walk(&f->loop, count_timer, &n);
    return n;
}

/* Closes what is open and checks the loop ends clean. */
static void fixture_end(fixture_t *f)
{
    if (f->tp.open) {
        tp_end(&f->tp);
        f->conn = NULL;
    }
    assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
    inbox_free(f);
    beam_objects_destroy(&f->node);
    assert_int_equal(beam_object_count(&f->node), 0);
    assert_int_equal(f->node.object_bytes, 0);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    f->ended = 1;
}

/* --- helpers --- */

static void make_id(char *id, uint32_t seq)
{
    memset(id, 0, BEAM_OBJECT_ID_SIZE);
    id[3] = 1; /* home node 1 */
    id[8] = (char)(seq >> 24);
    id[9] = (char)(seq >> 16);
    id[10] = (char)(seq >> 8);
    id[11] = (char)seq;
    memset(id + 20, 0xff, 4); /* a put */
}

static beam_object_t *create(fixture_t *f, uint32_t seq)
{
    char id[BEAM_OBJECT_ID_SIZE];
    make_id(id, seq);
    beam_object_t *o = beam_object_create(&f->node, id);
    assert_non_null(o);
    assert_memory_equal(o->id, id, sizeof id);
    assert_int_equal(o->ready, 0);
    return o;
}

static beam_object_t *find(fixture_t *f, uint32_t seq)
{
    char id[BEAM_OBJECT_ID_SIZE];
    make_id(id, seq);
    return beam_object_find(&f->node, id);
}

static char *dup_str(const char *s)
{
    char *p = malloc(strlen(s) + 1);
    assert_non_null(p);
    strcpy(p, s);
    return p;
}

static void complete(fixture_t *f, beam_object_t *o, int status, const char *data)
{
    beam_object_complete(&f->node, o, status, dup_str(data), strlen(data), NULL);
}

/* An ids array like the one dispatch hands to beam_waiter_start. */
typedef struct idlist_s {
    char ids[16][BEAM_OBJECT_ID_SIZE];
    msgpack_object objs[16];
    msgpack_object_array a;
} idlist_t;

static const msgpack_object_array *idlist(idlist_t *l, size_t n, const uint32_t *seqs)
{
    assert_true(n <= 16);
    for (size_t i = 0; i < n; i++) {
        make_id(l->ids[i], seqs[i]);
        l->objs[i].type = MSGPACK_OBJECT_BIN;
        l->objs[i].via.bin.size = BEAM_OBJECT_ID_SIZE;
        l->objs[i].via.bin.ptr = l->ids[i];
    }
    l->a.size = (uint32_t)n;
    l->a.ptr = l->objs;
    return &l->a;
}

static int start(fixture_t *f, uint64_t msgid, int mode, size_t n, const uint32_t *seqs,
                 uint32_t num_returns, int64_t timeout_ms)
{
    idlist_t l;
    return beam_waiter_start(&f->node, f->conn, msgid, mode, idlist(&l, n, seqs), num_returns,
                             timeout_ms);
}

static size_t nwaiters_of_conn(const beam_port_t *c)
{
    size_t n = 0;
    const beam_waiter_t *w;
    DL_FOREACH(c->waiters, w)
        n++;
    return n;
}

/* Reply r must be an ok get reply with n values. */
static const msgpack_object_array *get_values(const reply_t *r, uint64_t msgid, uint32_t n)
{
    const msgpack_object_array *vals;
    assert_int_equal(r->msg.type, BEAM_MSG_REPLY);
    assert_int_equal(r->msg.msgid, msgid);
    assert_int_equal(r->msg.error.type, MSGPACK_OBJECT_NIL);
    assert_int_equal(r->msg.params.type, MSGPACK_OBJECT_MAP);
    assert_int_equal(r->msg.params.via.map.size, 1);
    assert_int_equal(beam_field_array(&r->msg.params, "values", &vals), 0);
    assert_int_equal(vals->size, n);
    return vals;
}

static void check_value(const msgpack_object *v, int status, const char *data)
{
    assert_int_equal(v->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(v->via.array.size, 2);
    const msgpack_object *st = &v->via.array.ptr[0], *d = &v->via.array.ptr[1];
    assert_int_equal(st->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    assert_int_equal(st->via.u64, (uint64_t)status);
    assert_int_equal(d->type, MSGPACK_OBJECT_BIN);
    if (data) {
        assert_int_equal(d->via.bin.size, strlen(data));
        assert_memory_equal(d->via.bin.ptr, data, d->via.bin.size);
    }
}

static void check_error(const reply_t *r, uint64_t msgid, const char *code)
{
    const char *s;
    uint32_t n;
    assert_int_equal(r->msg.type, BEAM_MSG_REPLY);
    assert_int_equal(r->msg.msgid, msgid);
    assert_int_equal(r->msg.error.type, MSGPACK_OBJECT_MAP);
    assert_int_equal(beam_field_str(&r->msg.error, "code", &s, &n), 0);
    if (!beam_str_eq(s, n, code))
        fail_msg("wanted error code %s, got %.*s", code, (int)n, s);
    assert_int_equal(beam_field_str(&r->msg.error, "message", &s, &n), 0);
    assert_true(n > 0);
}

static void check_ready(const reply_t *r, uint64_t msgid, size_t n, const uint32_t *want)
{
    const msgpack_object_array *ready;
    assert_int_equal(r->msg.type, BEAM_MSG_REPLY);
    assert_int_equal(r->msg.msgid, msgid);
    assert_int_equal(r->msg.error.type, MSGPACK_OBJECT_NIL);
    assert_int_equal(beam_field_array(&r->msg.params, "ready", &ready), 0);
    if (ready->size != n)
        fail_msg("wanted %zu ready, got %u", n, ready->size);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ready->ptr[i].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
        assert_int_equal(ready->ptr[i].via.u64, want[i]);
    }
}

/* --- lifetimes --- */

static void test_create_find(void **state)
{
    fixture_t *f = *state;
    char id[BEAM_OBJECT_ID_SIZE];
    beam_object_t *o = create(f, 1);
    assert_ptr_equal(find(f, 1), o);
    assert_null(find(f, 2));
    make_id(id, 1);
    assert_null(beam_object_create(&f->node, id)); /* exists */
    assert_int_equal(beam_object_count(&f->node), 1);
    beam_object_t *o2 = create(f, 2);
    assert_ptr_not_equal(o, o2);
    assert_int_equal(beam_object_count(&f->node), 2);
    assert_int_equal(o->holders, 0);
    assert_int_equal(o->pins, 0);
    assert_int_equal(o->nwaiters, 0);
    fixture_end(f);
}

/* A pending object with no holders stays until completed, then is freed. */
static void test_pending_unheld_lives_until_complete(void **state)
{
    fixture_t *f = *state;
    beam_object_t *o = create(f, 1);
    beam_object_hold(&f->node, o);
    beam_object_unhold(&f->node, o);
    beam_object_unhold(&f->node, o); /* below zero is ignored */
    assert_int_equal(o->holders, 0);
    beam_object_unpin(&f->node, o);
    assert_int_equal(o->pins, 0);
    assert_ptr_equal(find(f, 1), o);
    complete(f, o, BEAM_OBJ_OK, "value");
    assert_null(find(f, 1));
    assert_int_equal(beam_object_count(&f->node), 0);
    assert_int_equal(f->node.object_bytes, 0);
    fixture_end(f);
}

/* An abandonable object (a placement group's ready()) may go while pending
 * once nobody holds, pins or waits on it. */
static void test_abandonable(void **state)
{
    fixture_t *f = *state;
    beam_object_t *o = create(f, 1);
    o->abandonable = 1;
    beam_object_hold(&f->node, o);
    beam_object_pin(&f->node, o);
    beam_object_unhold(&f->node, o);
    assert_ptr_equal(find(f, 1), o);
    beam_object_unpin(&f->node, o);
    assert_null(find(f, 1));
    /* the last waiter going frees it too */
    conn_open(f);
    o = create(f, 2);
    o->abandonable = 1;
    static const uint32_t ids[] = {2};
    assert_int_equal(start(f, 9, BEAM_WAIT_GET, 1, ids, 0, -1), 0);
    assert_ptr_equal(find(f, 2), o);
    beam_waiters_cancel(&f->node, f->conn);
    assert_null(find(f, 2));
    expect_replies(f, 0);
    /* a plain pending object is not abandoned */
    o = create(f, 3);
    beam_object_hold(&f->node, o);
    beam_object_unhold(&f->node, o);
    assert_ptr_equal(find(f, 3), o);
    fixture_end(f);
}

static void test_holders(void **state)
{
    fixture_t *f = *state;
    beam_object_t *o = create(f, 1);
    beam_object_hold(&f->node, o);
    beam_object_hold(&f->node, o);
    complete(f, o, BEAM_OBJ_OK, "12345");
    assert_ptr_equal(find(f, 1), o);
    assert_int_equal(o->ready, 1);
    assert_int_equal(o->status, BEAM_OBJ_OK);
    assert_int_equal(o->len, 5);
    assert_memory_equal(o->data, "12345", 5);
    assert_int_equal(f->node.object_bytes, 5);
    beam_object_unhold(&f->node, o);
    assert_ptr_equal(find(f, 1), o);
    assert_int_equal(o->holders, 1);
    beam_object_unhold(&f->node, o);
    assert_null(find(f, 1));
    assert_int_equal(f->node.object_bytes, 0);
    fixture_end(f);
}

static void test_pins(void **state)
{
    fixture_t *f = *state;
    /* held and pinned: both must go */
    beam_object_t *o = create(f, 1);
    beam_object_hold(&f->node, o);
    beam_object_pin(&f->node, o);
    complete(f, o, BEAM_OBJ_OK, "a");
    beam_object_unhold(&f->node, o);
    assert_ptr_equal(find(f, 1), o);
    assert_int_equal(o->pins, 1);
    beam_object_unpin(&f->node, o);
    assert_null(find(f, 1));

    /* pinned only, while pending: completion keeps it for the pin */
    o = create(f, 2);
    beam_object_pin(&f->node, o);
    beam_object_pin(&f->node, o);
    complete(f, o, BEAM_OBJ_OK, "bb");
    assert_ptr_equal(find(f, 2), o);
    beam_object_unpin(&f->node, o);
    assert_ptr_equal(find(f, 2), o);
    /* a hold taken and dropped in between does not free it early */
    beam_object_hold(&f->node, o);
    beam_object_unhold(&f->node, o);
    assert_ptr_equal(find(f, 2), o);
    beam_object_unpin(&f->node, o);
    assert_null(find(f, 2));
    assert_int_equal(f->node.object_bytes, 0);
    fixture_end(f);
}

static void test_complete_twice_keeps_first(void **state)
{
    fixture_t *f = *state;
    beam_object_t *o = create(f, 1);
    beam_object_hold(&f->node, o);
    complete(f, o, BEAM_OBJ_OK, "first");
    beam_refs_t late = {0};
    late.nobjs = 1;
    late.objs = malloc(BEAM_OBJECT_ID_SIZE);
    assert_non_null(late.objs);
    make_id(late.objs, 1);
    /* the late data and refs are freed (valgrind checks), nothing is pinned */
    beam_object_complete(&f->node, o, BEAM_OBJ_TASK_ERROR, dup_str("second"), 6, &late);
    assert_int_equal(o->status, BEAM_OBJ_OK);
    assert_int_equal(o->len, 5);
    assert_memory_equal(o->data, "first", 5);
    assert_int_equal(o->pins, 0);
    assert_null(late.objs);
    assert_int_equal(f->node.object_bytes, 5);
    beam_object_unhold(&f->node, o);
    assert_null(find(f, 1));
    fixture_end(f);
}

static void test_fail(void **state)
{
    fixture_t *f = *state;
    beam_object_t *o = create(f, 1);
    beam_object_hold(&f->node, o);
    beam_object_fail(&f->node, o, BEAM_OBJ_ACTOR_DIED, "The actor died.");
    assert_int_equal(o->ready, 1);
    assert_int_equal(o->status, BEAM_OBJ_ACTOR_DIED);
    assert_int_equal(o->len, 15);
    assert_memory_equal(o->data, "The actor died.", 15);
    beam_object_t *e = create(f, 2);
    beam_object_hold(&f->node, e);
    beam_object_fail(&f->node, e, BEAM_OBJ_LOST, "");
    assert_int_equal(e->status, BEAM_OBJ_LOST);
    assert_int_equal(e->len, 0);
    beam_object_unhold(&f->node, o);
    beam_object_unhold(&f->node, e);
    assert_int_equal(beam_object_count(&f->node), 0);
    fixture_end(f);
}

/* The client (node 1, conn 0) that made ids 1-3 ended: its pending objects
 * fail with OWNER_DIED (an unheld one is freed by it), its ready one keeps
 * its value, a late completion keeps the failure, and another client's
 * (conn 5) pending object is untouched. */
static void test_owner_gone(void **state)
{
    fixture_t *f = *state;
    beam_object_t *pending = create(f, 1);
    beam_object_hold(&f->node, pending);
    beam_object_t *came = create(f, 2);
    beam_object_hold(&f->node, came);
    complete(f, came, BEAM_OBJ_OK, "v");
    create(f, 3); /* pending and unheld: lives until it completes */
    char other_id[BEAM_OBJECT_ID_SIZE];
    make_id(other_id, 4);
    other_id[7] = 5; /* made by connection 5 */
    beam_object_t *other = beam_object_create(&f->node, other_id);
    assert_non_null(other);
    beam_object_hold(&f->node, other);

    beam_objects_owner_gone(&f->node, 1, 0);
    assert_int_equal(pending->ready, 1);
    assert_int_equal(pending->status, BEAM_OBJ_OWNER_DIED);
    assert_true(pending->len > 0);
    assert_int_equal(came->status, BEAM_OBJ_OK);
    assert_memory_equal(came->data, "v", 1);
    assert_null(find(f, 3));
    assert_int_equal(other->ready, 0);
    complete(f, pending, BEAM_OBJ_OK, "late"); /* dropped: the first completion stays */
    assert_int_equal(pending->status, BEAM_OBJ_OWNER_DIED);

    beam_object_unhold(&f->node, pending);
    beam_object_unhold(&f->node, came);
    complete(f, other, BEAM_OBJ_OK, "w");
    beam_object_unhold(&f->node, other);
    assert_int_equal(beam_object_count(&f->node), 0);
    fixture_end(f);
}

static void refs_of(beam_refs_t *r, size_t n, const uint32_t *seqs)
{
    memset(r, 0, sizeof *r);
    r->nobjs = (uint32_t)n;
    r->objs = malloc(n * BEAM_OBJECT_ID_SIZE);
    assert_non_null(r->objs);
    for (size_t i = 0; i < n; i++)
        make_id(r->objs + i * BEAM_OBJECT_ID_SIZE, seqs[i]);
}

/* Refs carried by an object pin the objects they name until it is freed. */
static void test_refs_pin_until_carrier_freed(void **state)
{
    fixture_t *f = *state;
    beam_object_t *a = create(f, 1), *b = create(f, 2), *c = create(f, 3);
    beam_object_hold(&f->node, a);
    beam_object_hold(&f->node, b);
    beam_object_hold(&f->node, c);
    complete(f, a, BEAM_OBJ_OK, "a");
    complete(f, b, BEAM_OBJ_OK, "b");
    beam_refs_t r;
    static const uint32_t carried[] = {1, 2, 99}; /* 99 does not exist: skipped */
    refs_of(&r, 3, carried);
    beam_object_complete(&f->node, c, BEAM_OBJ_OK, dup_str("c"), 1, &r);
    assert_null(r.objs); /* ownership moved into c */
    assert_int_equal(c->refs.nobjs, 3);
    assert_int_equal(a->pins, 1);
    assert_int_equal(b->pins, 1);
    /* the driver drops a and b: c still carries them */
    beam_object_unhold(&f->node, a);
    beam_object_unhold(&f->node, b);
    assert_ptr_equal(find(f, 1), a);
    assert_ptr_equal(find(f, 2), b);
    assert_int_equal(beam_object_count(&f->node), 3);
    /* c goes, and takes a and b with it */
    beam_object_unhold(&f->node, c);
    assert_int_equal(beam_object_count(&f->node), 0);
    assert_int_equal(f->node.object_bytes, 0);
    fixture_end(f);
}

/* c carries b, b carries a: freeing c frees the chain. */
static void test_refs_chain(void **state)
{
    fixture_t *f = *state;
    beam_object_t *a = create(f, 1), *b = create(f, 2), *c = create(f, 3);
    beam_object_hold(&f->node, a);
    beam_object_hold(&f->node, b);
    beam_object_hold(&f->node, c);
    complete(f, a, BEAM_OBJ_OK, "a");
    beam_refs_t r;
    static const uint32_t one[] = {1}, two[] = {2};
    refs_of(&r, 1, one);
    beam_object_complete(&f->node, b, BEAM_OBJ_OK, dup_str("b"), 1, &r);
    refs_of(&r, 1, two);
    beam_object_complete(&f->node, c, BEAM_OBJ_OK, dup_str("c"), 1, &r);
    beam_object_unhold(&f->node, a);
    beam_object_unhold(&f->node, b);
    assert_int_equal(beam_object_count(&f->node), 3);
    /* a still held elsewhere survives the chain */
    beam_object_hold(&f->node, a);
    beam_object_unhold(&f->node, c);
    assert_int_equal(beam_object_count(&f->node), 1);
    assert_ptr_equal(find(f, 1), a);
    assert_int_equal(a->pins, 0);
    beam_object_unhold(&f->node, a);
    assert_int_equal(beam_object_count(&f->node), 0);
    fixture_end(f);
}

/* Pinning and unpinning refs directly, as a pending call does. */
static void test_refs_pin_unpin(void **state)
{
    fixture_t *f = *state;
    beam_object_t *a = create(f, 1);
    beam_object_hold(&f->node, a);
    complete(f, a, BEAM_OBJ_OK, "a");
    beam_refs_t r;
    static const uint32_t twice[] = {1, 1, 5};
    refs_of(&r, 3, twice);
    beam_refs_pin(&f->node, &r);
    assert_int_equal(a->pins, 2);
    beam_object_unhold(&f->node, a);
    assert_ptr_equal(find(f, 1), a);
    beam_refs_unpin(&f->node, &r); /* frees r */
    assert_null(r.objs);
    assert_int_equal(r.nobjs, 0);
    assert_null(find(f, 1));
    fixture_end(f);
}

/* Builds a request's params from a packing function and parses it. */
typedef void (*pack_fn)(msgpack_packer *pk);

typedef struct parsed_s {
    char *buf;
    size_t len;
    beam_msg_t msg;
} parsed_t;

static void parse_params(parsed_t *p, uint32_t npairs, pack_fn fn)
{
    beam_enc_t enc;
    beam_limits_t lim;
    beam_decoder_t dec;
    const char *frame;
    size_t flen;
    char err[160] = "";
    beam_enc_init(&enc);
    beam_enc_request(&enc, 1, "put", npairs);
    fn(&enc.pk);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    p->buf = beam_enc_take(&enc, &p->len);
    beam_enc_destroy(&enc);
    beam_limits_default(&lim);
    beam_decoder_init(&dec, &lim);
    assert_int_equal(beam_decoder_feed(&dec, p->buf, p->len), 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &flen), 1);
    /* parse in place in p->buf so the message outlives the decoder */
    assert_int_equal(beam_msg_parse(p->buf + BEAM_FRAME_HEADER, flen, &lim, &p->msg, err, sizeof err), 0);
    beam_decoder_destroy(&dec);
}

static void parsed_free(parsed_t *p)
{
    beam_msg_destroy(&p->msg);
    free(p->buf);
}

static void pack_good_refs(msgpack_packer *pk)
{
    char id[BEAM_OBJECT_ID_SIZE];
    beam_pack_key(pk, "objects");
    msgpack_pack_array(pk, 2);
    make_id(id, 7);
    beam_pack_bin(pk, id, sizeof id);
    make_id(id, 8);
    beam_pack_bin(pk, id, sizeof id);
    beam_pack_key(pk, "actors");
    msgpack_pack_array(pk, 1);
    beam_pack_bin(pk, "ACTOR-ID-16bytes", 16);
}

static void pack_no_refs(msgpack_packer *pk)
{
    beam_pack_key(pk, "data");
    beam_pack_bin(pk, "x", 1);
}

static void pack_empty_and_nil(msgpack_packer *pk)
{
    beam_pack_key(pk, "objects");
    msgpack_pack_array(pk, 0);
    beam_pack_key(pk, "actors");
    msgpack_pack_nil(pk);
}

static void pack_objects_not_array(msgpack_packer *pk)
{
    beam_pack_key(pk, "objects");
    beam_pack_bin(pk, "0123456789012345678901234567", 28);
}

static void pack_objects_short_id(msgpack_packer *pk)
{
    beam_pack_key(pk, "objects");
    msgpack_pack_array(pk, 2);
    beam_pack_bin(pk, "0123456789012345678901234567", 28);
    beam_pack_bin(pk, "012345678901234567890123456", 27);
}

static void pack_objects_str_id(msgpack_packer *pk)
{
    beam_pack_key(pk, "objects");
    msgpack_pack_array(pk, 1);
    beam_pack_str(pk, "0123456789012345678901234567");
}

static void pack_actors_wrong_size(msgpack_packer *pk)
{
    beam_pack_key(pk, "objects");
    msgpack_pack_array(pk, 1);
    beam_pack_bin(pk, "0123456789012345678901234567", 28);
    beam_pack_key(pk, "actors");
    msgpack_pack_array(pk, 1);
    beam_pack_bin(pk, "0123456789012345678901234567", 28);
}

static void pack_actors_map(msgpack_packer *pk)
{
    beam_pack_key(pk, "actors");
    msgpack_pack_map(pk, 0);
}

static void test_refs_parse_good(void **state)
{
    fixture_t *f = *state;
    parsed_t p;
    beam_refs_t r;
    char err[160] = "";
    char id[BEAM_OBJECT_ID_SIZE];

    parse_params(&p, 2, pack_good_refs);
    assert_int_equal(beam_refs_parse(&p.msg.params, &r, err, sizeof err), 0);
    assert_int_equal(r.nobjs, 2);
    assert_int_equal(r.nactors, 1);
    make_id(id, 7);
    assert_memory_equal(r.objs, id, sizeof id);
    make_id(id, 8);
    assert_memory_equal(r.objs + BEAM_OBJECT_ID_SIZE, id, sizeof id);
    assert_memory_equal(r.actors, "ACTOR-ID-16bytes", 16);
    /* copies: they outlive the frame */
    assert_true(r.objs < p.buf || r.objs >= p.buf + p.len);
    parsed_free(&p);
    assert_memory_equal(r.objs + BEAM_OBJECT_ID_SIZE, id, sizeof id);
    /* pinning ids nobody has is harmless */
    beam_refs_pin(&f->node, &r);
    beam_refs_unpin(&f->node, &r);
    assert_null(r.objs);
    assert_null(r.actors);

    parse_params(&p, 1, pack_no_refs);
    assert_int_equal(beam_refs_parse(&p.msg.params, &r, err, sizeof err), 0);
    assert_int_equal(r.nobjs, 0);
    assert_int_equal(r.nactors, 0);
    assert_null(r.objs);
    assert_null(r.actors);
    beam_refs_free(&r);
    parsed_free(&p);

    parse_params(&p, 2, pack_empty_and_nil);
    assert_int_equal(beam_refs_parse(&p.msg.params, &r, err, sizeof err), 0);
    assert_int_equal(r.nobjs, 0);
    assert_int_equal(r.nactors, 0);
    assert_null(r.objs);
    beam_refs_free(&r);
    parsed_free(&p);
    fixture_end(f);
}

static void expect_refs_bad(pack_fn fn, uint32_t npairs, const char *want)
{
    parsed_t p;
    beam_refs_t r;
    char err[160] = "";
    parse_params(&p, npairs, fn);
    memset(&r, 0x5a, sizeof r);
    assert_int_equal(beam_refs_parse(&p.msg.params, &r, err, sizeof err), -1);
    assert_string_equal(err, want);
    /* nothing is left to free */
    assert_int_equal(r.nobjs, 0);
    assert_int_equal(r.nactors, 0);
    assert_null(r.objs);
    assert_null(r.actors);
    parsed_free(&p);
}

static void test_refs_parse_bad(void **state)
{
    fixture_t *f = *state;
    expect_refs_bad(pack_objects_not_array, 1, "field 'objects' must be an array of ids");
    expect_refs_bad(pack_objects_short_id, 1, "field 'objects' must hold 28-byte bin ids");
    expect_refs_bad(pack_objects_str_id, 1, "field 'objects' must hold 28-byte bin ids");
    expect_refs_bad(pack_actors_wrong_size, 2, "field 'actors' must hold 16-byte bin ids");
    expect_refs_bad(pack_actors_map, 1, "field 'actors' must be an array of ids");
    fixture_end(f);
}

/* --- get and wait over a connection --- */

static void test_get_ready_answers_at_once(void **state)
{
    fixture_t *f = *state;
    beam_port_t *c = conn_open(f);
    beam_object_t *a = create(f, 1), *b = create(f, 2);
    beam_object_hold(&f->node, a);
    beam_object_hold(&f->node, b);
    complete(f, a, BEAM_OBJ_OK, "alpha");
    complete(f, b, BEAM_OBJ_OK, "");
    static const uint32_t ids[] = {1, 2, 1};
    assert_int_equal(start(f, 11, BEAM_WAIT_GET, 3, ids, 0, -1), 0);
    assert_null(c->waiters);
    assert_int_equal(a->nwaiters, 0);
    expect_replies(f, 1);
    const msgpack_object_array *v = get_values(&f->replies[0], 11, 3);
    check_value(&v->ptr[0], BEAM_OBJ_OK, "alpha");
    check_value(&v->ptr[1], BEAM_OBJ_OK, "");
    check_value(&v->ptr[2], BEAM_OBJ_OK, "alpha");
    /* an empty get is answered too */
    assert_int_equal(start(f, 12, BEAM_WAIT_GET, 0, NULL, 0, -1), 0);
    expect_replies(f, 1);
    get_values(&f->replies[0], 12, 0);
    /* answering dropped nothing: both objects are still held */
    assert_int_equal(beam_object_count(&f->node), 2);
    fixture_end(f);
}

/* An id nobody has is answered at once as lost, like a failed object. */
static void test_get_unknown_id_is_lost(void **state)
{
    fixture_t *f = *state;
    conn_open(f);
    beam_object_t *p = create(f, 1);
    beam_object_hold(&f->node, p);
    static const uint32_t ids[] = {1, 42};
    assert_int_equal(start(f, 5, BEAM_WAIT_GET, 2, ids, 0, -1), 0);
    expect_replies(f, 1);
    const msgpack_object_array *v = get_values(&f->replies[0], 5, 2);
    assert_int_equal(v->ptr[0].type, MSGPACK_OBJECT_NIL); /* still pending */
    check_value(&v->ptr[1], BEAM_OBJ_LOST, NULL);
    assert_true(v->ptr[1].via.array.ptr[1].via.bin.size > 0);
    assert_int_equal(p->nwaiters, 0);
    fixture_end(f);
}

static void test_get_pending_answers_on_complete(void **state)
{
    fixture_t *f = *state;
    beam_port_t *c = conn_open(f);
    beam_object_t *a = create(f, 1), *b = create(f, 2);
    beam_object_hold(&f->node, a);
    beam_object_hold(&f->node, b);
    complete(f, a, BEAM_OBJ_OK, "ready");
    static const uint32_t ids[] = {2, 1};
    assert_int_equal(start(f, 21, BEAM_WAIT_GET, 2, ids, 0, -1), 0);
    assert_int_equal(nwaiters_of_conn(c), 1);
    assert_int_equal(b->nwaiters, 1);
    assert_int_equal(a->nwaiters, 1);
    expect_replies(f, 0);
    assert_int_equal(timers(f), 0); /* no deadline for timeout -1 */
    complete(f, b, BEAM_OBJ_OK, "later");
    assert_null(c->waiters);
    assert_int_equal(a->nwaiters, 0);
    assert_int_equal(b->nwaiters, 0);
    expect_replies(f, 1);
    const msgpack_object_array *v = get_values(&f->replies[0], 21, 2);
    check_value(&v->ptr[0], BEAM_OBJ_OK, "later");
    check_value(&v->ptr[1], BEAM_OBJ_OK, "ready");
    fixture_end(f);
}

/* A waiter keeps a ready object nobody holds until it is answered. */
static void test_waiter_keeps_objects_alive(void **state)
{
    fixture_t *f = *state;
    conn_open(f);
    beam_object_t *a = create(f, 1), *b = create(f, 2);
    (void)a;
    static const uint32_t ids[] = {1, 2};
    assert_int_equal(start(f, 3, BEAM_WAIT_GET, 2, ids, 0, -1), 0);
    complete(f, a, BEAM_OBJ_OK, "kept");
    assert_ptr_equal(find(f, 1), a); /* no holder, but a waiter */
    assert_int_equal(a->nwaiters, 1);
    expect_replies(f, 0);
    complete(f, b, BEAM_OBJ_OK, "b");
    expect_replies(f, 1);
    const msgpack_object_array *v = get_values(&f->replies[0], 3, 2);
    check_value(&v->ptr[0], BEAM_OBJ_OK, "kept");
    check_value(&v->ptr[1], BEAM_OBJ_OK, "b");
    /* answered: nothing wants them any more */
    assert_int_equal(beam_object_count(&f->node), 0);
    assert_int_equal(f->node.object_bytes, 0);
    fixture_end(f);
}

static void test_get_same_pending_twice(void **state)
{
    fixture_t *f = *state;
    beam_port_t *c = conn_open(f);
    beam_object_t *p = create(f, 1);
    static const uint32_t ids[] = {1, 1};
    assert_int_equal(start(f, 4, BEAM_WAIT_GET, 2, ids, 0, -1), 0);
    assert_int_equal(p->nwaiters, 2);
    /* a second get on the same object from the same connection */
    assert_int_equal(start(f, 5, BEAM_WAIT_GET, 1, ids, 0, -1), 0);
    assert_int_equal(p->nwaiters, 3);
    assert_int_equal(nwaiters_of_conn(c), 2);
    complete(f, p, BEAM_OBJ_OK, "twice");
    assert_null(c->waiters);
    expect_replies(f, 2);
    const msgpack_object_array *v = get_values(&f->replies[0], 4, 2);
    check_value(&v->ptr[0], BEAM_OBJ_OK, "twice");
    check_value(&v->ptr[1], BEAM_OBJ_OK, "twice");
    v = get_values(&f->replies[1], 5, 1);
    check_value(&v->ptr[0], BEAM_OBJ_OK, "twice");
    assert_int_equal(beam_object_count(&f->node), 0); /* unheld: freed once answered */
    fixture_end(f);
}

static void test_get_timeout(void **state)
{
    fixture_t *f = *state;
    beam_port_t *c = conn_open(f);
    beam_object_t *p = create(f, 1);
    beam_object_hold(&f->node, p);
    static const uint32_t ids[] = {1};
    uint64_t t0 = uv_now(&f->loop);
    assert_int_equal(start(f, 31, BEAM_WAIT_GET, 1, ids, 0, 50), 0);
    assert_int_equal(p->nwaiters, 1);
    expect_replies(f, 0);
    assert_int_equal(timers(f), 1);
    wait_replies(f, 1, 10000);
    assert_int_equal(f->nreplies, 1);
    assert_true(uv_now(&f->loop) - t0 >= 50);
    assert_int_equal(timers(f), 0);
    check_error(&f->replies[0], 31, "timeout");
    assert_int_equal(p->nwaiters, 0);
    assert_null(c->waiters);
    assert_ptr_equal(find(f, 1), p); /* still pending, still held */
    /* completing it later answers nobody */
    complete(f, p, BEAM_OBJ_OK, "late");
    expect_replies(f, 0);
    fixture_end(f);
}

/* The object arrives before the deadline: one answer, and the timer is gone. */
static void test_get_complete_before_timeout(void **state)
{
    fixture_t *f = *state;
    conn_open(f);
    beam_object_t *p = create(f, 1);
    beam_object_hold(&f->node, p);
    static const uint32_t ids[] = {1};
    assert_int_equal(start(f, 32, BEAM_WAIT_GET, 1, ids, 0, 60000), 0);
    complete(f, p, BEAM_OBJ_OK, "quick");
    expect_replies(f, 1);
    check_value(&get_values(&f->replies[0], 32, 1)->ptr[0], BEAM_OBJ_OK, "quick");
    /* the deadline's timer is closed with the waiter */
    assert_int_equal(timers(f), 0);
    fixture_end(f);
}

static void test_get_timeout_zero(void **state)
{
    fixture_t *f = *state;
    beam_port_t *c = conn_open(f);
    beam_object_t *p = create(f, 1), *r = create(f, 2);
    beam_object_hold(&f->node, p);
    beam_object_hold(&f->node, r);
    complete(f, r, BEAM_OBJ_OK, "r");
    static const uint32_t ids[] = {2, 1};
    assert_int_equal(start(f, 33, BEAM_WAIT_GET, 2, ids, 0, 0), 0);
    assert_null(c->waiters);
    assert_int_equal(p->nwaiters, 0);
    assert_int_equal(timers(f), 0); /* answered at once: no deadline was set */
    expect_replies(f, 1);
    check_error(&f->replies[0], 33, "timeout");
    /* timeout 0 on ready objects is a plain answer */
    static const uint32_t ready[] = {2};
    assert_int_equal(start(f, 34, BEAM_WAIT_GET, 1, ready, 0, 0), 0);
    expect_replies(f, 1);
    check_value(&get_values(&f->replies[0], 34, 1)->ptr[0], BEAM_OBJ_OK, "r");
    fixture_end(f);
}

/* A failed object answers a get at once, without waiting for the rest. */
static void test_get_failed_answers_early(void **state)
{
    fixture_t *f = *state;
    beam_port_t *c = conn_open(f);
    beam_object_t *p = create(f, 1), *e = create(f, 2), *q = create(f, 3);
    beam_object_hold(&f->node, p);
    beam_object_hold(&f->node, e);
    beam_object_hold(&f->node, q);
    complete(f, e, BEAM_OBJ_TASK_ERROR, "boom");
    static const uint32_t ids[] = {1, 2};
    assert_int_equal(start(f, 41, BEAM_WAIT_GET, 2, ids, 0, -1), 0);
    assert_null(c->waiters);
    expect_replies(f, 1);
    const msgpack_object_array *v = get_values(&f->replies[0], 41, 2);
    assert_int_equal(v->ptr[0].type, MSGPACK_OBJECT_NIL);
    check_value(&v->ptr[1], BEAM_OBJ_TASK_ERROR, "boom");

    /* both pending; one fails later: answered then, the other still pending */
    static const uint32_t pq[] = {1, 3};
    assert_int_equal(start(f, 42, BEAM_WAIT_GET, 2, pq, 0, -1), 0);
    expect_replies(f, 0);
    beam_object_fail(&f->node, q, BEAM_OBJ_ACTOR_DIED, "dead");
    assert_null(c->waiters);
    assert_int_equal(p->nwaiters, 0);
    expect_replies(f, 1);
    v = get_values(&f->replies[0], 42, 2);
    assert_int_equal(v->ptr[0].type, MSGPACK_OBJECT_NIL);
    check_value(&v->ptr[1], BEAM_OBJ_ACTOR_DIED, "dead");
    /* an ok completion does not answer early */
    beam_object_t *s = create(f, 4);
    beam_object_hold(&f->node, s);
    static const uint32_t ps[] = {1, 4};
    assert_int_equal(start(f, 43, BEAM_WAIT_GET, 2, ps, 0, -1), 0);
    complete(f, s, BEAM_OBJ_OK, "fine");
    expect_replies(f, 0);
    complete(f, p, BEAM_OBJ_OK, "p");
    expect_replies(f, 1);
    v = get_values(&f->replies[0], 43, 2);
    check_value(&v->ptr[0], BEAM_OBJ_OK, "p");
    check_value(&v->ptr[1], BEAM_OBJ_OK, "fine");
    fixture_end(f);
}

static void test_wait_input_order_at_most_n(void **state)
{
    fixture_t *f = *state;
    beam_port_t *c = conn_open(f);
    beam_object_t *o[5];
    for (uint32_t i = 0; i < 5; i++) {
        o[i] = create(f, 10 + i);
        beam_object_hold(&f->node, o[i]);
    }
    complete(f, o[4], BEAM_OBJ_OK, "4");
    complete(f, o[1], BEAM_OBJ_OK, "1");
    complete(f, o[3], BEAM_OBJ_TASK_ERROR, "3"); /* errors count as ready */
    static const uint32_t ids[] = {10, 11, 12, 13, 14};

    /* three ready, two asked: the first two in input order */
    assert_int_equal(start(f, 51, BEAM_WAIT_WAIT, 5, ids, 2, -1), 0);
    assert_null(c->waiters);
    expect_replies(f, 1);
    static const uint32_t first2[] = {1, 3};
    check_ready(&f->replies[0], 51, 2, first2);

    /* four asked: parked until one more is ready, then all four, in order */
    assert_int_equal(start(f, 52, BEAM_WAIT_WAIT, 5, ids, 4, -1), 0);
    assert_int_equal(nwaiters_of_conn(c), 1);
    assert_int_equal(o[0]->nwaiters, 1);
    assert_int_equal(o[1]->nwaiters, 1); /* attached to every object, ready or not */
    expect_replies(f, 0);
    complete(f, o[2], BEAM_OBJ_OK, "2");
    expect_replies(f, 1);
    static const uint32_t four[] = {1, 2, 3, 4};
    check_ready(&f->replies[0], 52, 4, four);
    assert_null(c->waiters);
    assert_int_equal(o[0]->nwaiters, 0);

    /* a timeout answers with what is ready, not an error */
    assert_int_equal(start(f, 53, BEAM_WAIT_WAIT, 5, ids, 5, 20), 0);
    expect_replies(f, 0);
    wait_replies(f, 1, 10000);
    assert_int_equal(f->nreplies, 1);
    check_ready(&f->replies[0], 53, 4, four);

    /* timeout 0: at once, with what is ready */
    assert_int_equal(start(f, 54, BEAM_WAIT_WAIT, 5, ids, 5, 0), 0);
    assert_null(c->waiters);
    expect_replies(f, 1);
    check_ready(&f->replies[0], 54, 4, four);
    static const uint32_t just0[] = {10};
    assert_int_equal(start(f, 55, BEAM_WAIT_WAIT, 1, just0, 1, 0), 0);
    expect_replies(f, 1);
    check_ready(&f->replies[0], 55, 0, NULL);
    fixture_end(f);
}

/* Unknown ids count as ready for wait (a get would see them as lost). */
static void test_wait_unknown_is_ready(void **state)
{
    fixture_t *f = *state;
    conn_open(f);
    beam_object_t *p = create(f, 1);
    beam_object_hold(&f->node, p);
    static const uint32_t ids[] = {1, 77};
    assert_int_equal(start(f, 61, BEAM_WAIT_WAIT, 2, ids, 1, -1), 0);
    expect_replies(f, 1);
    static const uint32_t want[] = {1};
    check_ready(&f->replies[0], 61, 1, want);
    fixture_end(f);
}

/* Cancelling (the connection is closing) answers nothing and lets go. */
static void test_cancel(void **state)
{
    fixture_t *f = *state;
    beam_port_t *c = conn_open(f);
    beam_object_t *a = create(f, 1), *b = create(f, 2);
    static const uint32_t ids[] = {1, 2};
    assert_int_equal(start(f, 71, BEAM_WAIT_GET, 2, ids, 0, 60000), 0);
    assert_int_equal(start(f, 72, BEAM_WAIT_WAIT, 2, ids, 2, -1), 0);
    complete(f, a, BEAM_OBJ_OK, "a"); /* nobody holds a: the waiters keep it */
    assert_ptr_equal(find(f, 1), a);
    assert_int_equal(a->nwaiters, 2);
    assert_int_equal(nwaiters_of_conn(c), 2);
    beam_waiters_cancel(&f->node, c);
    assert_null(c->waiters);
    assert_null(find(f, 1)); /* a went with its last waiter */
    assert_ptr_equal(find(f, 2), b);
    assert_int_equal(b->nwaiters, 0);
    /* the timer is closed, not left to fire */
    assert_int_equal(timers(f), 0);
    usleep(20000);
    expect_replies(f, 0);
    complete(f, b, BEAM_OBJ_OK, "b");
    assert_int_equal(beam_object_count(&f->node), 0);
    expect_replies(f, 0);
    fixture_end(f);
}

/* Closing the connection cancels its waiters and drops the objects it held. */
static void test_conn_close_cancels(void **state)
{
    fixture_t *f = *state;
    beam_port_t *c = conn_open(f);
    char id[BEAM_OBJECT_ID_SIZE];
    beam_object_t *a = create(f, 1);
    make_id(id, 1);
    assert_int_equal(beam_port_hold(&c->held_objects, id, sizeof id), 1);
    assert_int_equal(beam_port_hold(&c->held_objects, id, sizeof id), 0);
    beam_object_hold(&f->node, a);
    static const uint32_t ids[] = {1};
    assert_int_equal(start(f, 81, BEAM_WAIT_GET, 1, ids, 0, 60000), 0);
    tp_end(&f->tp); /* as its session ends it */
    assert_int_equal(a->nwaiters, 0);
    assert_int_equal(a->holders, 0);
    assert_ptr_equal(find(f, 1), a); /* pending: stays for its completion */
    assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
    pump(f);
    assert_int_equal(f->nreplies, 0);
    assert_true(f->peer_eof);
    complete(f, a, BEAM_OBJ_OK, "nobody");
    assert_int_equal(beam_object_count(&f->node), 0);
    fixture_end(f);
}

/* A reply too large for one frame becomes a too_large error. */
static void test_get_too_large(void **state)
{
    fixture_t *f = *state;
    conn_open(f);
    f->node.limits.max_frame = 1024;
    beam_object_t *a = create(f, 1);
    beam_object_hold(&f->node, a);
    char *big = malloc(2000);
    assert_non_null(big);
    memset(big, 'x', 2000);
    beam_object_complete(&f->node, a, BEAM_OBJ_OK, big, 2000, NULL);
    static const uint32_t ids[] = {1};
    assert_int_equal(start(f, 91, BEAM_WAIT_GET, 1, ids, 0, -1), 0);
    expect_replies(f, 1);
    check_error(&f->replies[0], 91, "too_large");
    fixture_end(f);
}

/* A big value travels whole, across several writes of the loop. */
static void test_get_big_value(void **state)
{
    fixture_t *f = *state;
    conn_open(f);
    beam_object_t *a = create(f, 1);
    beam_object_hold(&f->node, a);
    size_t n = 3u << 20;
    char *big = malloc(n);
    assert_non_null(big);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)(i * 7);
    beam_object_complete(&f->node, a, BEAM_OBJ_OK, big, n, NULL);
    static const uint32_t ids[] = {1};
    assert_int_equal(start(f, 92, BEAM_WAIT_GET, 1, ids, 0, -1), 0);
    for (int i = 0; i < 1000 && f->nreplies == 0; i++)
        pump(f);
    assert_int_equal(f->nreplies, 1);
    const msgpack_object_array *v = get_values(&f->replies[0], 92, 1);
    const msgpack_object *d = &v->ptr[0].via.array.ptr[1];
    assert_int_equal(d->via.bin.size, n);
    assert_memory_equal(d->via.bin.ptr, a->data, n);
    fixture_end(f);
}

/* --- a reply whose send closes the connection --- */

/* A send gives up on a client whose queue passes its cap (conn.c: max_outq). It
 * used to tear the connection down at once, which cancelled (freed) its
 * waiters, the one being answered included, and waiter_answer/waiter_expire
 * then finished that waiter a second time (heap-use-after-free in
 * waiter_finish). Since f2c7a7e the teardown waits for the loop's next turn;
 * these tests hold it there, for each way a waiter is answered. */
static void expect_dropped(fixture_t *f)
{
    /* beamd wrote the reply, then closed: the client reads it, then EOF */
    wait_replies(f, MAX_REPLIES, 10000);
    assert_true(f->peer_eof);
    assert_true(f->tp.ended);
    assert_null(f->conn);
}

static void test_reply_closes_conn_immediate(void **state)
{
    fixture_t *f = *state;
    conn_open(f);
    beam_object_t *a = create(f, 1);
    beam_object_hold(&f->node, a);
    complete(f, a, BEAM_OBJ_OK, "a value larger than the queue cap");
    f->tp.cap = 16;
    static const uint32_t ids[] = {1};
    assert_int_equal(start(f, 101, BEAM_WAIT_GET, 1, ids, 0, -1), 0);
    /* it stops at once, and goes on the next turn */
    assert_int_equal(beam_port_closing(f->conn), 1);
    assert_null(f->conn->waiters);
    assert_int_equal(f->tp.ended, 0); /* still there until the next turn */
    expect_dropped(f);
    assert_int_equal(f->nreplies, 1);
    assert_int_equal(a->nwaiters, 0);
    fixture_end(f);
}

static void test_reply_closes_conn_on_complete(void **state)
{
    fixture_t *f = *state;
    conn_open(f);
    beam_object_t *a = create(f, 1);
    beam_object_hold(&f->node, a);
    static const uint32_t ids[] = {1};
    assert_int_equal(start(f, 102, BEAM_WAIT_GET, 1, ids, 0, -1), 0);
    f->tp.cap = 16;
    complete(f, a, BEAM_OBJ_OK, "a value larger than the queue cap");
    assert_int_equal(beam_port_closing(f->conn), 1);
    assert_null(f->conn->waiters);
    expect_dropped(f);
    assert_int_equal(f->nreplies, 1);
    assert_int_equal(a->nwaiters, 0);
    fixture_end(f);
}

static void test_reply_closes_conn_on_timeout(void **state)
{
    fixture_t *f = *state;
    conn_open(f);
    beam_object_t *a = create(f, 1);
    beam_object_hold(&f->node, a);
    static const uint32_t ids[] = {1};
    f->tp.cap = 16;
    assert_int_equal(start(f, 103, BEAM_WAIT_GET, 1, ids, 0, 10), 0);
    expect_dropped(f); /* runs the loop: the timer fires */
    assert_int_equal(f->nreplies, 1);
    check_error(&f->replies[0], 103, "timeout");
    assert_int_equal(a->nwaiters, 0);
    fixture_end(f);
}

static void test_reply_closes_conn_wait(void **state)
{
    fixture_t *f = *state;
    conn_open(f);
    beam_object_t *a = create(f, 1);
    beam_object_hold(&f->node, a);
    complete(f, a, BEAM_OBJ_OK, "a");
    f->tp.cap = 1;
    static const uint32_t ids[] = {1};
    assert_int_equal(start(f, 104, BEAM_WAIT_WAIT, 1, ids, 1, 0), 0);
    expect_dropped(f);
    assert_int_equal(f->nreplies, 1);
    fixture_end(f);
}

/* --- push waiters (submit's push) --- */

/* Reply r must be a `result` push for object seq: with status and data, or
 * (status < 0) with neither. */
static void check_result_push(const reply_t *r, uint32_t seq, int status, const char *data)
{
    char id[BEAM_OBJECT_ID_SIZE];
    const char *got;
    const char *bytes;
    uint32_t n;
    int64_t st;
    make_id(id, seq);
    assert_int_equal(r->msg.type, BEAM_MSG_PUSH);
    assert_true(beam_str_eq(r->msg.op, r->msg.op_len, "result"));
    assert_int_equal(beam_field_id(&r->msg.params, "obj", BEAM_OBJECT_ID_SIZE, &got), 0);
    assert_memory_equal(got, id, sizeof id);
    if (status < 0) {
        assert_int_equal(r->msg.params.via.map.size, 1);
        return;
    }
    assert_int_equal(beam_field_int(&r->msg.params, "status", &st), 0);
    assert_int_equal(st, status);
    assert_int_equal(beam_field_bin(&r->msg.params, "data", &bytes, &n), 0);
    assert_int_equal(n, strlen(data));
    assert_memory_equal(bytes, data, n);
}

/* A push waiter answers on completion, once, and keeps nothing. */
static void test_push_on_complete(void **state)
{
    fixture_t *f = *state;
    beam_port_t *c = conn_open(f);
    beam_object_t *a = create(f, 1);
    beam_object_hold(&f->node, a);
    assert_int_equal(beam_waiter_push(&f->node, c, a), 0);
    assert_int_equal(nwaiters_of_conn(c), 1);
    assert_int_equal(a->nwaiters, 1);
    assert_int_equal(timers(f), 0);
    expect_replies(f, 0);
    complete(f, a, BEAM_OBJ_OK, "value");
    assert_null(c->waiters);
    assert_int_equal(a->nwaiters, 0);
    expect_replies(f, 1);
    check_result_push(&f->replies[0], 1, BEAM_OBJ_OK, "value");
    assert_int_equal(f->node.results_pushed, 1);
    assert_ptr_equal(find(f, 1), a); /* still held: stays as without push */
    beam_object_unhold(&f->node, a);
    assert_int_equal(beam_object_count(&f->node), 0);
    fixture_end(f);
}

/* A failure (an actor's death) is pushed as a completion is; an object
 * already ready is pushed at once. */
static void test_push_on_fail_and_ready(void **state)
{
    fixture_t *f = *state;
    beam_port_t *c = conn_open(f);
    beam_object_t *a = create(f, 1), *b = create(f, 2);
    beam_object_hold(&f->node, a);
    beam_object_hold(&f->node, b);
    assert_int_equal(beam_waiter_push(&f->node, c, a), 0);
    beam_object_fail(&f->node, a, BEAM_OBJ_ACTOR_DIED, "died");
    expect_replies(f, 1);
    check_result_push(&f->replies[0], 1, BEAM_OBJ_ACTOR_DIED, "died");
    complete(f, b, BEAM_OBJ_TASK_ERROR, "err");
    assert_int_equal(beam_waiter_push(&f->node, c, b), 0);
    assert_null(c->waiters);
    expect_replies(f, 1);
    check_result_push(&f->replies[0], 2, BEAM_OBJ_TASK_ERROR, "err");
    beam_object_unhold(&f->node, a);
    beam_object_unhold(&f->node, b);
    assert_int_equal(beam_object_count(&f->node), 0);
    fixture_end(f);
}

/* A value over BEAM_PUSH_MAX_DATA is pushed as {obj} alone. */
static void test_push_over_the_bound(void **state)
{
    fixture_t *f = *state;
    beam_port_t *c = conn_open(f);
    beam_object_t *a = create(f, 1);
    beam_object_hold(&f->node, a);
    assert_int_equal(beam_waiter_push(&f->node, c, a), 0);
    size_t n = BEAM_PUSH_MAX_DATA + 1;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, 'x', n);
    beam_object_complete(&f->node, a, BEAM_OBJ_OK, big, n, NULL);
    expect_replies(f, 1);
    check_result_push(&f->replies[0], 1, -1, NULL);
    beam_object_unhold(&f->node, a);
    fixture_end(f);
}

/* A push waiter goes with its port's other waiters: nothing is sent when
 * the object completes after, and it does not keep the object. */
static void test_push_cancelled_with_its_port(void **state)
{
    fixture_t *f = *state;
    beam_port_t *c = conn_open(f);
    beam_object_t *a = create(f, 1);
    static const uint32_t ids[] = {1};
    assert_int_equal(beam_waiter_push(&f->node, c, a), 0);
    assert_int_equal(start(f, 91, BEAM_WAIT_GET, 1, ids, 0, -1), 0);
    assert_int_equal(a->nwaiters, 2);
    beam_waiters_cancel(&f->node, c);
    assert_null(c->waiters);
    assert_int_equal(a->nwaiters, 0);
    assert_ptr_equal(find(f, 1), a); /* pending: stays for its completion */
    complete(f, a, BEAM_OBJ_OK, "late");
    expect_replies(f, 0);
    assert_int_equal(beam_object_count(&f->node), 0);
    fixture_end(f);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
    beam_log_set_level(BEAM_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        T(test_create_find),
        T(test_pending_unheld_lives_until_complete),
        T(test_abandonable),
        T(test_holders),
        T(test_pins),
        T(test_complete_twice_keeps_first),
        T(test_fail),
        T(test_owner_gone),
        T(test_refs_pin_until_carrier_freed),
        T(test_refs_chain),
        T(test_refs_pin_unpin),
        T(test_refs_parse_good),
        T(test_refs_parse_bad),
        T(test_get_ready_answers_at_once),
        T(test_get_unknown_id_is_lost),
        T(test_get_pending_answers_on_complete),
        T(test_waiter_keeps_objects_alive),
        T(test_get_same_pending_twice),
        T(test_get_timeout),
        T(test_get_complete_before_timeout),
        T(test_get_timeout_zero),
        T(test_get_failed_answers_early),
        T(test_wait_input_order_at_most_n),
        T(test_wait_unknown_is_ready),
        T(test_cancel),
        T(test_conn_close_cancels),
        T(test_get_too_large),
        T(test_get_big_value),
        T(test_reply_closes_conn_immediate),
        T(test_reply_closes_conn_on_complete),
        T(test_reply_closes_conn_on_timeout),
        T(test_reply_closes_conn_wait),
        T(test_push_on_complete),
        T(test_push_on_fail_and_ready),
        T(test_push_over_the_bound),
        T(test_push_cancelled_with_its_port),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
