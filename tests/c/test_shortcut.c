/* test_shortcut.c — the op tables a member reads its clients' and its head's
 * frames by (src/shortcut.h, beam_shortcut_check: the tables shortcut.c runs,
 * without their state): every op it reads passes whole; each required
 * field missing and each field of the wrong type is refused naming the
 * field (the frame then goes on untouched, for the head to answer: nothing
 * is taken or lost here); an op it does not read passes untouched; and the
 * codec's peek, by which it skips those unparsed, agrees with the parse.
 * No sockets, no tables. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>

#include "shortcut.h"
#include "testmsg.h"

/* A local client's requests the member reads. */
static const tm_op_t up[] = {
    {"submit",
     1,
     {{"actor", TM_ACTOR, 1}, {"obj", TM_OBJ, 1}, {"method", TM_STR, 1}, {"args", TM_BIN, 1}, {"push", TM_BOOL, 0}}},
    {"hello", 1, {{"role", TM_STR, 0}}},
    {"put", 1, {{"obj", TM_OBJ, 1}}},
    {"pg_ready", 1, {{"obj", TM_OBJ, 1}}},
    {"get", 1, {{"objs", TM_OBJS, 1}, {"timeout_ms", TM_ZERO, 0}}},
    {"release", 1, {{"objects", TM_OBJS, 1}}},
    {"task_done", 1, {{"obj", TM_OBJ, 1}, {"status", TM_ZERO, 1}, {"data", TM_BIN, 1}}},
    {"actor_ready", 1, {{"ok", TM_BOOL, 1}}},
    {"kill", 1, {{"actor", TM_ACTOR, 1}}},
};
/* The head's pushes it reads on their way down. */
static const tm_op_t down[] = {
    {"init", 0, {{"actor", TM_ACTOR, 1}}},
    {"call", 0, {{"obj", TM_OBJ, 1}, {"method", TM_STR, 0}, {"args", TM_BIN, 0}}},
};
/* Ops it does not read: they pass unparsed. */
static const tm_op_t passing_up[] = {
    {"wait", 1, {{"objs", TM_OBJS, 1}}},
    {"status", 1, {{"x", TM_END, 0}}},
    {"create_actor", 1, {{"actor", TM_ACTOR, 1}}},
};
static const tm_op_t passing_down[] = {
    {"log", 0, {{"stream", TM_UINT, 1}, {"text", TM_STR, 1}}},
    {"result", 0, {{"obj", TM_OBJ, 1}}},
};

static int check(const tm_op_t *o, int skip, int wrong, char *err, size_t errlen)
{
    size_t len = 0;
    char *body = tm_body(o, skip, wrong, &len);
    beam_limits_t lim;
    beam_limits_default(&lim);
    assert_non_null(body);
    err[0] = '\0';
    int rc = beam_shortcut_check(body, len, o->request, &lim, err, errlen);
    /* the peek the member skips frames by says what the parse says */
    beam_peek_t pk;
    assert_int_equal(beam_msg_peek(body, len, &pk), 0);
    assert_int_equal(pk.type, o->request ? BEAM_MSG_REQUEST : BEAM_MSG_PUSH);
    assert_int_equal(pk.op_len, strlen(o->op));
    assert_memory_equal(pk.op, o->op, pk.op_len);
    assert_int_equal(pk.msgid, o->request ? 7 : 0);
    free(body);
    return rc;
}

static void every_field(const tm_op_t *o)
{
    char err[160], want[160];
    assert_int_equal(check(o, -1, -1, err, sizeof err), 1);
    for (int i = 0; o->fields[i].kind != TM_END; i++) {
        const char *name = o->fields[i].name;
        int rc = check(o, i, -1, err, sizeof err);
        if (o->fields[i].required) {
            assert_int_equal(rc, -EINVAL);
            snprintf(want, sizeof want, "field '%s' is required", name);
            assert_string_equal(err, want);
        } else {
            assert_int_equal(rc, 1);
        }
        rc = check(o, -1, i, err, sizeof err);
        if (strcmp(o->op, "hello") == 0 || (strcmp(o->op, "call") == 0 && i > 0)) {
            assert_int_equal(rc, 1); /* fields the member does not read */
            continue;
        }
        assert_int_equal(rc, -EINVAL);
        snprintf(want, sizeof want, "field '%s' ", name);
        assert_memory_equal(err, want, strlen(want));
    }
}

static void test_every_op_up(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof up / sizeof up[0]; i++)
        every_field(&up[i]);
}

static void test_every_op_down(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof down / sizeof down[0]; i++)
        every_field(&down[i]);
}

/* What the member does not read passes as it came, whatever its fields. */
static void test_other_ops_pass(void **state)
{
    (void)state;
    char err[160];
    for (size_t i = 0; i < sizeof passing_up / sizeof passing_up[0]; i++)
        assert_int_equal(check(&passing_up[i], -1, -1, err, sizeof err), 0);
    for (size_t i = 0; i < sizeof passing_down / sizeof passing_down[0]; i++)
        assert_int_equal(check(&passing_down[i], -1, -1, err, sizeof err), 0);
    /* a push from a client, or a request from the head, is not read either */
    tm_op_t push = up[0];
    push.request = 0;
    assert_int_equal(check(&push, -1, -1, err, sizeof err), 0);
    tm_op_t req = down[0];
    req.request = 1;
    assert_int_equal(check(&req, -1, -1, err, sizeof err), 0);
}

/* Bounds the tables hold: a task_done's status past 1, a get's timeout
 * under -1, an object id of the wrong length in a get's list; and bytes
 * that are not a message. */
static void test_bounds_and_garbage(void **state)
{
    (void)state;
    beam_limits_t lim;
    beam_enc_t enc;
    size_t n;
    char err[160];
    static const char obj[28] = "0123456789abcdefghijklmnopq";
    beam_limits_default(&lim);
    beam_enc_init(&enc);
    beam_enc_request(&enc, 3, "task_done", 3);
    beam_pack_key(&enc.pk, "obj");
    beam_pack_bin(&enc.pk, obj, 28);
    beam_pack_key(&enc.pk, "status");
    msgpack_pack_int(&enc.pk, 2);
    beam_pack_key(&enc.pk, "data");
    beam_pack_bin(&enc.pk, "", 0);
    beam_enc_end(&enc, 0);
    char *f = beam_enc_take(&enc, &n);
    assert_int_equal(beam_shortcut_check(f + 4, n - 4, 1, &lim, err, sizeof err), -EINVAL);
    assert_string_equal(err, "field 'status' must be 0 (ok) or 1 (task error)");
    free(f);
    beam_enc_init(&enc);
    beam_enc_request(&enc, 4, "get", 2);
    beam_pack_key(&enc.pk, "objs");
    msgpack_pack_array(&enc.pk, 1);
    beam_pack_bin(&enc.pk, obj, 27);
    beam_pack_key(&enc.pk, "timeout_ms");
    msgpack_pack_int(&enc.pk, -1);
    beam_enc_end(&enc, 0);
    f = beam_enc_take(&enc, &n);
    assert_int_equal(beam_shortcut_check(f + 4, n - 4, 1, &lim, err, sizeof err), -EINVAL);
    assert_string_equal(err, "field 'objs' must hold 28-byte bin object ids");
    free(f);
    beam_enc_init(&enc);
    beam_enc_request(&enc, 5, "get", 2);
    beam_pack_key(&enc.pk, "objs");
    msgpack_pack_array(&enc.pk, 0);
    beam_pack_key(&enc.pk, "timeout_ms");
    msgpack_pack_int(&enc.pk, -2);
    beam_enc_end(&enc, 0);
    f = beam_enc_take(&enc, &n);
    assert_int_equal(beam_shortcut_check(f + 4, n - 4, 1, &lim, err, sizeof err), -EINVAL);
    assert_string_equal(err, "field 'timeout_ms' must be -1 (forever) or more");
    free(f);
    assert_int_equal(beam_shortcut_check("\x94\x00\x01", 3, 1, &lim, err, sizeof err), -EPROTO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_op_up),
        cmocka_unit_test(test_every_op_down),
        cmocka_unit_test(test_other_ops_pass),
        cmocka_unit_test(test_bounds_and_garbage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
