/* test_calls.c — an actor's calls (src/calls.h) with no socket and no actor:
 * the worker and the caller are ports that record what they are sent. A
 * call takes what it is given and pins its refs (and, out of memory, frees
 * it all and fails its object); completion (with its object gone too);
 * the queue sent in order, args dropped once sent, stopping at a closing
 * worker; the sent list unlinked from its middle and tail; failing all in
 * order, sent first, local sent calls kept; destroying completes nothing.
 * Allocation failure comes from wrapping calloc (CMakeLists.txt links this
 * test with --wrap=calloc). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"

/* --- calloc that fails when asked --- */

void *__real_calloc(size_t n, size_t size);
static int fail_next_calloc;

void *__wrap_calloc(size_t n, size_t size)
{
    if (fail_next_calloc) {
        fail_next_calloc = 0;
        return NULL;
    }
    return __real_calloc(n, size);
}

/* --- a port that records what it is sent --- */

#define REC_MAX 16

typedef struct rport_s {
    beam_port_t port;
    int closing;
    int close_after; /* > 0: it is closing once it has this many frames (a send that broke it) */
    int n;
    char op[REC_MAX][16];     /* "reply" for a reply */
    uint64_t msgid[REC_MAX];
    char obj[REC_MAX][BEAM_OBJECT_ID_SIZE]; /* a call push's */
    char method[REC_MAX][16];
    char args[REC_MAX][16];
    uint32_t args_len[REC_MAX];
} rport_t;

static int rport_send(beam_port_t *p, char *buf, size_t len)
{
    rport_t *r = (rport_t *)p;
    beam_msg_t msg;
    char err[160];
    assert_true(r->n < REC_MAX);
    if (beam_msg_parse(buf + BEAM_FRAME_HEADER, len - BEAM_FRAME_HEADER, &p->node->limits, &msg, err,
                       sizeof err) != 0)
        fail_msg("a frame that does not parse: %s", err);
    int i = r->n++;
    r->msgid[i] = msg.msgid;
    if (msg.type == BEAM_MSG_REPLY) {
        snprintf(r->op[i], sizeof r->op[i], "reply");
    } else {
        snprintf(r->op[i], sizeof r->op[i], "%.*s", (int)msg.op_len, msg.op);
        const char *s;
        uint32_t n;
        if (beam_field_id(&msg.params, "obj", BEAM_OBJECT_ID_SIZE, &s) == 0)
            memcpy(r->obj[i], s, BEAM_OBJECT_ID_SIZE);
        if (beam_field_str(&msg.params, "method", &s, &n) == 0)
            snprintf(r->method[i], sizeof r->method[i], "%.*s", (int)n, s);
        if (beam_field_bin(&msg.params, "args", &s, &n) == 0) {
            assert_true(n < sizeof r->args[i]);
            if (n) /* (an empty bin may have no pointer) */
                memcpy(r->args[i], s, n);
            r->args_len[i] = n;
        }
    }
    beam_msg_destroy(&msg);
    free(buf);
    if (r->close_after && r->n >= r->close_after)
        r->closing = 1;
    return 0;
}

static int rport_closing(const beam_port_t *p)
{
    return ((const rport_t *)p)->closing;
}

static const beam_port_ops_t rport_ops = {.send = rport_send, .closing = rport_closing};

/* --- the fixture --- */

typedef struct fixture_s {
    uv_loop_t loop;
    beam_node_t node;
    rport_t worker, caller;
    beam_callq_t q;
} fixture_t;

static int actor_pins; /* the node's actor_pin hook: +1 pin, -1 unpin */

static void count_actor_pin(beam_node_t *node, const char *actor, int pin)
{
    (void)node;
    (void)actor;
    actor_pins += pin ? 1 : -1;
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (!f || uv_loop_init(&f->loop) != 0)
        return -1;
    f->node.loop = &f->loop;
    beam_limits_default(&f->node.limits);
    f->node.hooks.actor_pin = count_actor_pin;
    f->worker.port.ops = f->caller.port.ops = &rport_ops;
    f->worker.port.node = f->caller.port.node = &f->node;
    actor_pins = 0;
    fail_next_calloc = 0;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    beam_callq_destroy(&f->q);
    beam_waiters_cancel(&f->node, &f->caller.port);
    beam_objects_destroy(&f->node);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f);
    return 0;
}

static void obj_id(char *id, int seq)
{
    memset(id, 0, BEAM_OBJECT_ID_SIZE);
    id[3] = 1;
    id[15] = (char)seq;
}

/* A pending object seq (a call's return object, or a value a call carries). */
static beam_object_t *object(fixture_t *f, int seq)
{
    char id[BEAM_OBJECT_ID_SIZE];
    obj_id(id, seq);
    beam_object_t *o = beam_object_create(&f->node, id);
    assert_non_null(o);
    return o;
}

/* Refs naming objects seqs[0..n) and one actor when with_actor. */
static beam_refs_t refs_of(const int *seqs, uint32_t n, int with_actor)
{
    beam_refs_t r = {0};
    if (n) {
        r.objs = malloc((size_t)n * BEAM_OBJECT_ID_SIZE);
        assert_non_null(r.objs);
        for (uint32_t i = 0; i < n; i++)
            obj_id(r.objs + (size_t)i * BEAM_OBJECT_ID_SIZE, seqs[i]);
        r.nobjs = n;
    }
    if (with_actor) {
        r.actors = calloc(1, BEAM_ACTOR_ID_SIZE);
        assert_non_null(r.actors);
        r.nactors = 1;
    }
    return r;
}

/* A call on object seq of method with args (its own buffer); *buf, when
 * asked, is that buffer with one more reference the caller drops. */
static beam_call_t *call_on(fixture_t *f, int seq, const char *method, const char *args, beam_buf_t **buf)
{
    char id[BEAM_OBJECT_ID_SIZE];
    obj_id(id, seq);
    size_t n = strlen(args);
    beam_buf_t *b = beam_buf_new(n);
    assert_non_null(b);
    memcpy(b->data, args, n);
    if (buf)
        *buf = beam_buf_ref(b);
    char *m = strdup(method);
    assert_non_null(m);
    beam_refs_t none = {0};
    beam_call_t *c = beam_call_new(&f->node, id, m, b, b->data, n, &none);
    assert_non_null(c);
    return c;
}

/* The caller waits in ray.get on object seq, as request msgid. */
static void get(fixture_t *f, uint64_t msgid, int seq)
{
    char id[BEAM_OBJECT_ID_SIZE];
    obj_id(id, seq);
    msgpack_object o = {.type = MSGPACK_OBJECT_BIN, .via.bin = {.size = BEAM_OBJECT_ID_SIZE, .ptr = id}};
    msgpack_object_array ids = {.size = 1, .ptr = &o};
    assert_int_equal(beam_waiter_start(&f->node, &f->caller.port, msgid, BEAM_WAIT_GET, &ids, 0, -1), 0);
}

static int is_obj(const char *id, int seq)
{
    char want[BEAM_OBJECT_ID_SIZE];
    obj_id(want, seq);
    return memcmp(id, want, BEAM_OBJECT_ID_SIZE) == 0;
}

/* --- a call's record --- */

static void test_new_pins_and_complete_unpins(void **state)
{
    fixture_t *f = *state;
    beam_object_t *ret = object(f, 1), *arg = object(f, 2), *inner = object(f, 3);
    beam_object_hold(&f->node, ret); /* (its caller's hold) */
    int seqs[] = {2, 9}; /* an object it carries, and one long gone */
    beam_refs_t refs = refs_of(seqs, 2, 1);
    char id[BEAM_OBJECT_ID_SIZE];
    obj_id(id, 1);
    char *method = strdup("add");
    beam_buf_t *args = beam_buf_new(4);
    assert_non_null(method);
    assert_non_null(args);
    beam_call_t *c = beam_call_new(&f->node, id, method, args, args->data, 4, &refs);
    assert_non_null(c);
    /* taken: the caller's refs are empty, and what they name is pinned */
    assert_int_equal(refs.nobjs + refs.nactors, 0);
    assert_null(refs.objs);
    assert_int_equal(arg->pins, 1);
    assert_int_equal(actor_pins, 1);
    assert_false(ret->ready);

    /* its result carries object 3: the value pins it, the call lets go of 2 */
    beam_buf_t *value = beam_buf_new(5);
    assert_non_null(value);
    memcpy(value->data, "hello", 5);
    int inner_seq[] = {3};
    beam_refs_t carried = refs_of(inner_seq, 1, 0);
    beam_call_complete(&f->node, c, 0, value, value->data, 5, &carried);
    assert_true(ret->ready);
    assert_int_equal(ret->status, 0);
    assert_int_equal(ret->len, 5);
    assert_memory_equal(ret->data, "hello", 5);
    assert_int_equal(carried.nobjs, 0);
    assert_int_equal(inner->pins, 1);
    assert_int_equal(arg->pins, 0);
    assert_int_equal(actor_pins, 0);
}

static void test_complete_when_its_object_is_gone(void **state)
{
    fixture_t *f = *state;
    beam_object_t *arg = object(f, 2);
    beam_buf_t *args;
    beam_call_t *c = call_on(f, 1, "add", "xy", &args); /* object 1 was never made (released) */
    beam_buf_t *value = beam_buf_new(3);
    assert_non_null(value);
    beam_buf_ref(value); /* (to see it dropped) */
    int seqs[] = {2};
    beam_refs_t carried = refs_of(seqs, 1, 0);
    beam_call_complete(&f->node, c, 0, value, value->data, 3, &carried);
    /* nothing kept: the value's reference, its refs and the args are let go */
    assert_int_equal(value->refs, 1);
    assert_int_equal(args->refs, 1);
    assert_int_equal(carried.nobjs, 0);
    assert_int_equal(arg->pins, 0);
    beam_buf_unref(value);
    beam_buf_unref(args);
    /* failing a call whose object is gone is as quiet */
    c = call_on(f, 4, "add", "", NULL);
    beam_call_fail(&f->node, c, BEAM_OBJ_ACTOR_DIED, "gone");
    assert_int_equal(beam_object_count(&f->node), 1);
}

static void test_new_out_of_memory(void **state)
{
    fixture_t *f = *state;
    beam_object_t *ret = object(f, 1), *arg = object(f, 2);
    beam_object_hold(&f->node, ret);
    get(f, 11, 1);
    int seqs[] = {2};
    beam_refs_t refs = refs_of(seqs, 1, 1);
    char id[BEAM_OBJECT_ID_SIZE];
    obj_id(id, 1);
    char *method = strdup("add");
    beam_buf_t *args = beam_buf_new(4);
    assert_non_null(method);
    assert_non_null(args);
    beam_buf_ref(args); /* (to see it dropped) */
    fail_next_calloc = 1;
    assert_null(beam_call_new(&f->node, id, method, args, args->data, 4, &refs));
    /* all it was given is let go (the method freed: ASan and valgrind watch),
     * nothing pinned, and the caller hears of it at once */
    assert_int_equal(args->refs, 1);
    assert_int_equal(refs.nobjs + refs.nactors, 0);
    assert_null(refs.objs);
    assert_int_equal(arg->pins, 0);
    assert_int_equal(actor_pins, 0);
    assert_true(ret->ready);
    assert_int_equal(ret->status, BEAM_OBJ_LOST);
    assert_int_equal(f->caller.n, 1);
    assert_string_equal(f->caller.op[0], "reply");
    assert_int_equal(f->caller.msgid[0], 11);
    beam_buf_unref(args);
    /* its object already gone: the same, quietly */
    obj_id(id, 5);
    method = strdup("add");
    assert_non_null(method);
    fail_next_calloc = 1;
    beam_refs_t none = {0};
    assert_null(beam_call_new(&f->node, id, method, NULL, NULL, 0, &none));
    assert_null(beam_object_find(&f->node, id));
}

/* --- the queue and the sent list --- */

static void test_flush_sends_in_order(void **state)
{
    fixture_t *f = *state;
    beam_buf_t *bufs[3];
    static const char *const methods[] = {"a", "b", "c"}, *const args[] = {"one", "", "three"};
    for (int i = 0; i < 3; i++) {
        object(f, i + 1);
        beam_callq_push(&f->q, call_on(f, i + 1, methods[i], args[i], &bufs[i]));
    }
    assert_false(beam_callq_idle(&f->q));
    assert_int_equal(beam_calls_count(f->q.queue), 3);
    beam_callq_flush(&f->q, &f->worker.port);
    assert_int_equal(f->worker.n, 3);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(f->worker.op[i], "call");
        assert_int_equal(f->worker.msgid[i], 0); /* a push */
        assert_true(is_obj(f->worker.obj[i], i + 1));
        assert_string_equal(f->worker.method[i], methods[i]);
        assert_int_equal(f->worker.args_len[i], strlen(args[i]));
        assert_memory_equal(f->worker.args[i], args[i], strlen(args[i]));
        /* sent: the call keeps only what completion needs */
        assert_int_equal(bufs[i]->refs, 1);
        beam_buf_unref(bufs[i]);
    }
    /* all sent, in order, waiting to be done */
    assert_null(f->q.queue);
    assert_null(f->q.queue_tail);
    assert_int_equal(beam_calls_count(f->q.sent), 3);
    int i = 1;
    for (beam_call_t *c = f->q.sent; c; c = c->next, i++) {
        assert_true(is_obj(c->obj, i));
        assert_null(c->args_buf);
    }
    assert_ptr_equal(f->q.sent_tail, f->q.sent->next->next);
    assert_false(beam_callq_idle(&f->q));
}

static void test_flush_stops_at_a_closing_worker(void **state)
{
    fixture_t *f = *state;
    for (int i = 1; i <= 4; i++)
        beam_callq_push(&f->q, call_on(f, i, "m", "x", NULL));
    /* no worker yet, or one that is closing: nothing moves */
    beam_callq_flush(&f->q, NULL);
    f->worker.closing = 1;
    beam_callq_flush(&f->q, &f->worker.port);
    assert_int_equal(f->worker.n, 0);
    assert_int_equal(beam_calls_count(f->q.queue), 4);
    assert_null(f->q.sent);
    /* a worker whose second send breaks it: the rest stays queued, in order */
    f->worker.closing = 0;
    f->worker.close_after = 2;
    beam_callq_flush(&f->q, &f->worker.port);
    assert_int_equal(f->worker.n, 2);
    assert_int_equal(beam_calls_count(f->q.sent), 2);
    assert_int_equal(beam_calls_count(f->q.queue), 2);
    assert_true(is_obj(f->q.queue->obj, 3));
    assert_true(is_obj(f->q.queue_tail->obj, 4));
    /* a new worker takes the rest, after them a call pushed meanwhile */
    beam_callq_push(&f->q, call_on(f, 5, "m", "x", NULL));
    rport_t next = {.port = {.ops = &rport_ops, .node = &f->node}};
    beam_callq_flush(&f->q, &next.port);
    assert_int_equal(next.n, 3);
    assert_true(is_obj(next.obj[0], 3));
    assert_true(is_obj(next.obj[2], 5));
    assert_int_equal(beam_calls_count(f->q.sent), 5);
    assert_true(is_obj(f->q.sent_tail->obj, 5));
}

static void test_take_sent(void **state)
{
    fixture_t *f = *state;
    char id[BEAM_OBJECT_ID_SIZE];
    obj_id(id, 1);
    assert_null(beam_callq_take_sent(&f->q, id)); /* an empty list */
    for (int i = 1; i <= 3; i++)
        beam_callq_push_sent(&f->q, call_on(f, i, "m", "", NULL));
    /* from the middle */
    obj_id(id, 2);
    beam_call_t *c = beam_callq_take_sent(&f->q, id);
    assert_non_null(c);
    assert_true(is_obj(c->obj, 2));
    beam_call_fail(&f->node, c, BEAM_OBJ_LOST, "x");
    assert_null(beam_callq_take_sent(&f->q, id)); /* once */
    /* the tail: a call sent after it goes after the head, not after the
     * call taken */
    obj_id(id, 3);
    c = beam_callq_take_sent(&f->q, id);
    assert_non_null(c);
    beam_call_fail(&f->node, c, BEAM_OBJ_LOST, "x");
    beam_callq_push_sent(&f->q, call_on(f, 4, "m", "", NULL));
    assert_int_equal(beam_calls_count(f->q.sent), 2);
    assert_true(is_obj(f->q.sent->obj, 1));
    assert_true(is_obj(f->q.sent->next->obj, 4));
    assert_ptr_equal(f->q.sent_tail, f->q.sent->next);
    /* the head, then the last one: the list is empty and idle */
    obj_id(id, 1);
    c = beam_callq_take_sent(&f->q, id);
    assert_non_null(c);
    beam_call_fail(&f->node, c, BEAM_OBJ_LOST, "x");
    assert_true(is_obj(f->q.sent->obj, 4));
    obj_id(id, 4);
    c = beam_callq_take_sent(&f->q, id);
    assert_non_null(c);
    beam_call_fail(&f->node, c, BEAM_OBJ_LOST, "x");
    assert_null(f->q.sent);
    assert_null(f->q.sent_tail);
    assert_true(beam_callq_idle(&f->q));
    beam_callq_push_sent(&f->q, call_on(f, 5, "m", "", NULL));
    assert_ptr_equal(f->q.sent, f->q.sent_tail);
}

/* Sent calls 1 (local) and 2, queued 3 and 4, each waited on by the caller
 * as request 10 + its number. */
static void four_calls(fixture_t *f)
{
    for (int i = 1; i <= 4; i++) {
        beam_object_t *o = object(f, i);
        beam_object_hold(&f->node, o);
        get(f, (uint64_t)(10 + i), i);
    }
    beam_call_t *c = call_on(f, 1, "m", "", NULL);
    c->local = 1;
    beam_callq_push_sent(&f->q, c);
    beam_callq_push_sent(&f->q, call_on(f, 2, "m", "", NULL));
    beam_callq_push(&f->q, call_on(f, 3, "m", "", NULL));
    beam_callq_push(&f->q, call_on(f, 4, "m", "", NULL));
}

static void assert_failed(fixture_t *f, int seq, int status, const char *message)
{
    char id[BEAM_OBJECT_ID_SIZE];
    obj_id(id, seq);
    beam_object_t *o = beam_object_find(&f->node, id);
    assert_non_null(o);
    assert_true(o->ready);
    assert_int_equal(o->status, status);
    assert_int_equal(o->len, strlen(message));
    assert_memory_equal(o->data, message, o->len);
}

static void test_fail_all(void **state)
{
    fixture_t *f = *state;
    four_calls(f);
    beam_callq_fail_all(&f->node, &f->q, BEAM_OBJ_ACTOR_DIED, "it died", 0);
    /* sent first, then queued, each in order */
    assert_int_equal(f->caller.n, 4);
    for (int i = 0; i < 4; i++) {
        assert_string_equal(f->caller.op[i], "reply");
        assert_int_equal(f->caller.msgid[i], 11 + i);
        assert_failed(f, i + 1, BEAM_OBJ_ACTOR_DIED, "it died");
    }
    assert_true(beam_callq_idle(&f->q));
    assert_null(f->q.queue_tail);
    assert_null(f->q.sent_tail);
}

static void test_fail_all_keeps_local_calls(void **state)
{
    fixture_t *f = *state;
    four_calls(f);
    /* a second local call, sent after 2: kept too, after 1 */
    object(f, 5);
    beam_call_t *c = call_on(f, 5, "m", "", NULL);
    c->local = 1;
    beam_callq_push_sent(&f->q, c);
    beam_callq_fail_all(&f->node, &f->q, BEAM_OBJ_ACTOR_DIED, "it died", 1);
    assert_int_equal(f->caller.n, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(f->caller.msgid[i], 12 + i);
    /* the local calls wait for their member's results, in their order */
    char id[BEAM_OBJECT_ID_SIZE];
    obj_id(id, 1);
    assert_false(beam_object_find(&f->node, id)->ready);
    assert_int_equal(beam_calls_count(f->q.sent), 2);
    assert_true(is_obj(f->q.sent->obj, 1));
    assert_true(is_obj(f->q.sent_tail->obj, 5));
    assert_null(f->q.queue);
    /* a call sent after them goes after them */
    beam_callq_push_sent(&f->q, call_on(f, 6, "m", "", NULL));
    assert_int_equal(beam_calls_count(f->q.sent), 3);
    assert_true(is_obj(f->q.sent_tail->obj, 6));
    /* and at the end, they fail too */
    beam_callq_fail_all(&f->node, &f->q, BEAM_OBJ_LOST, "node lost", 0);
    assert_failed(f, 1, BEAM_OBJ_LOST, "node lost");
    assert_true(beam_callq_idle(&f->q));
}

static void test_destroy_completes_nothing(void **state)
{
    fixture_t *f = *state;
    four_calls(f);
    beam_callq_destroy(&f->q);
    assert_true(beam_callq_idle(&f->q));
    assert_null(f->q.queue_tail);
    assert_null(f->q.sent_tail);
    /* (the daemon is exiting: no one is answered) */
    assert_int_equal(f->caller.n, 0);
    for (int i = 1; i <= 4; i++) {
        char id[BEAM_OBJECT_ID_SIZE];
        obj_id(id, i);
        assert_false(beam_object_find(&f->node, id)->ready);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_new_pins_and_complete_unpins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_complete_when_its_object_is_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_out_of_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flush_sends_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flush_stops_at_a_closing_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_take_sent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fail_all, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fail_all_keeps_local_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_completes_nothing, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
