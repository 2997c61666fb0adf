/* test_relay.c — the link messages' op tables of both switches (src/relay.h,
 * beam_relay_check: the tables the switches run, without their handlers):
 * every op each side takes passes whole and with its optional fields left
 * out; each required field missing, and each field of the wrong type, is
 * refused with the words relay logs as it closes the link; an op the other
 * side never sends, and a message that is not a push, are refused too. No
 * sockets, no tables. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>

#include "relay.h"
#include "testmsg.h"

/* What a member sends its head once it is up, and its greeting. */
static const tm_op_t from_member[] = {
    {"client_frame", 0, {{"vconn", TM_VCONN, 1}, {"frame", TM_BIN, 1}}},
    {"local_batch", 0, {{"msgs", TM_ARRAY, 1}}},
    {"client_open", 0, {{"vconn", TM_VCONN, 1}, {"pid", TM_UINT, 1}, {"uid", TM_ZERO, 1}}},
    {"client_closed", 0, {{"vconn", TM_VCONN, 1}}},
    {"worker_started", 0, {{"actor", TM_ACTOR, 1}, {"pid", TM_UINT, 1}}},
    {"worker_log", 0, {{"actor", TM_ACTOR, 1}, {"stream", TM_UINT, 1}, {"text", TM_STR, 1}}},
    {"worker_exit", 0, {{"actor", TM_ACTOR, 1}, {"pid", TM_UINT, 1}, {"status", TM_ZERO, 1}, {"signal", TM_ZERO, 1}}},
};
static const tm_op_t join = {"join", 0,
                             {{"node_id", TM_NODE, 1},
                              {"node_ip", TM_STR, 1},
                              {"hostname", TM_STR, 1},
                              {"socket", TM_STR, 1},
                              {"max_frame", TM_UINT, 0},
                              {"resources", TM_RES, 1},
                              {"gpus", TM_STRS, 1}}};

/* What the head sends a member once it has welcomed it, and the welcome. */
static const tm_op_t from_head[] = {
    {"client_frame", 0, {{"vconn", TM_VCONN, 1}, {"frame", TM_BIN, 1}}},
    {"close_client", 0, {{"vconn", TM_VCONN, 1}}},
    {"spawn",
     0,
     {{"actor", TM_ACTOR, 1},
      {"class_name", TM_STR, 1},
      {"python", TM_STR, 1},
      {"cwd", TM_STR, 0},
      {"gpus", TM_STR, 0},
      {"token", TM_STR, 1},
      {"noset_cuda", TM_ZERO, 0},
      {"owner_pid", TM_UINT, 0},
      {"env", TM_STRS, 1},
      {"sys_path", TM_STRS, 1}}},
    {"kill_worker", 0, {{"actor", TM_ACTOR, 1}}},
};
static const tm_op_t welcome = {"welcome", 0, {{"node_index", TM_UINT, 1}, {"max_frame", TM_UINT, 0}, {"head_id", TM_NODE, 0}}};

/* relay's verdict on o's message (skip, wrong: tm_body's), err its words. */
static int check(const tm_op_t *o, int skip, int wrong, int at_head, int up, char *err, size_t errlen)
{
    size_t len = 0;
    char *body = tm_body(o, skip, wrong, &len), perr[160];
    beam_limits_t lim;
    beam_msg_t m;
    beam_limits_default(&lim);
    assert_non_null(body);
    assert_int_equal(beam_msg_parse(body, len, &lim, &m, perr, sizeof perr), 0);
    err[0] = '\0';
    int rc = beam_relay_check(&m, at_head, up, err, errlen);
    beam_msg_destroy(&m);
    free(body);
    return rc;
}

/* Every field of o: whole it passes; without a required one, or with any
 * one of the wrong type, it is refused naming that field. */
static void every_field(const tm_op_t *o, int at_head, int up)
{
    char err[160], want[160];
    assert_int_equal(check(o, -1, -1, at_head, up, err, sizeof err), 0);
    for (int i = 0; o->fields[i].kind != TM_END; i++) {
        const char *name = o->fields[i].name;
        int rc = check(o, i, -1, at_head, up, err, sizeof err);
        if (o->fields[i].required) {
            assert_int_equal(rc, -EINVAL);
            snprintf(want, sizeof want, "a %s without '%s'", o->op, name);
            assert_string_equal(err, want);
        } else {
            assert_int_equal(rc, 0);
        }
        assert_int_equal(check(o, -1, i, at_head, up, err, sizeof err), -EINVAL);
        snprintf(want, sizeof want, "a %s with a bad '%s' (it ", o->op, name);
        assert_memory_equal(err, want, strlen(want));
    }
}

static void test_head_takes_every_member_op(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof from_member / sizeof from_member[0]; i++)
        every_field(&from_member[i], 1, 1);
    every_field(&join, 1, 0);
}

static void test_member_takes_every_head_op(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof from_head / sizeof from_head[0]; i++)
        every_field(&from_head[i], 0, 1);
    every_field(&welcome, 0, 0);
}

/* An op the other side never sends is refused by name, on either side, and
 * a greeting is taken only before the link is up. */
static void test_ops_of_the_wrong_side(void **state)
{
    (void)state;
    char err[160];
    assert_int_equal(check(&from_head[2], -1, -1, 1, 1, err, sizeof err), -EINVAL); /* spawn at the head */
    assert_string_equal(err, "a 'spawn', which a member does not send");
    assert_int_equal(check(&join, -1, -1, 0, 1, err, sizeof err), -EINVAL);
    assert_string_equal(err, "a 'join', which the head does not send");
    assert_int_equal(check(&from_member[4], -1, -1, 0, 1, err, sizeof err), -EINVAL);
    assert_int_equal(check(&join, -1, -1, 1, 1, err, sizeof err), -EINVAL); /* a second join */
    assert_int_equal(check(&welcome, -1, -1, 0, 1, err, sizeof err), -EINVAL);
    assert_int_equal(check(&from_head[0], -1, -1, 0, 0, err, sizeof err), -EINVAL); /* before the welcome */
    tm_op_t req = from_member[0];
    req.request = 1;
    assert_int_equal(check(&req, -1, -1, 1, 1, err, sizeof err), -EINVAL);
    assert_string_equal(err, "a link message that is not a push");
}

/* Bounds: a vconn of 0; an array of strs holding something else. */
static void test_bounds(void **state)
{
    (void)state;
    beam_limits_t lim;
    beam_limits_default(&lim);
    char err[160];
    beam_msg_t m;
    beam_enc_t enc;
    size_t n;
    /* client_closed {vconn: 0} */
    beam_enc_init(&enc);
    beam_enc_push(&enc, "client_closed", 1);
    beam_pack_key(&enc.pk, "vconn");
    msgpack_pack_uint32(&enc.pk, 0);
    beam_enc_end(&enc, 0);
    char *f = beam_enc_take(&enc, &n);
    assert_int_equal(beam_msg_parse(f + 4, n - 4, &lim, &m, err, sizeof err), 0);
    assert_int_equal(beam_relay_check(&m, 1, 1, err, sizeof err), -EINVAL);
    assert_string_equal(err, "a client_closed with a bad 'vconn' (it is out of range)");
    beam_msg_destroy(&m);
    free(f);
    /* spawn {..., env: ["A=1", 7]} */
    beam_enc_init(&enc);
    beam_enc_push(&enc, "spawn", 6);
    beam_pack_key(&enc.pk, "actor");
    beam_pack_bin(&enc.pk, "0123456789abcdef", 16);
    beam_pack_key(&enc.pk, "class_name");
    beam_pack_str(&enc.pk, "A");
    beam_pack_key(&enc.pk, "python");
    beam_pack_str(&enc.pk, "python3");
    beam_pack_key(&enc.pk, "token");
    beam_pack_str(&enc.pk, "t");
    beam_pack_key(&enc.pk, "env");
    msgpack_pack_array(&enc.pk, 2);
    beam_pack_str(&enc.pk, "A=1");
    msgpack_pack_int(&enc.pk, 7);
    beam_pack_key(&enc.pk, "sys_path");
    msgpack_pack_array(&enc.pk, 0);
    beam_enc_end(&enc, 0);
    f = beam_enc_take(&enc, &n);
    assert_int_equal(beam_msg_parse(f + 4, n - 4, &lim, &m, err, sizeof err), 0);
    assert_int_equal(beam_relay_check(&m, 0, 1, err, sizeof err), -EINVAL);
    assert_string_equal(err, "a spawn with a bad 'env' (it must be an array of strs)");
    beam_msg_destroy(&m);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_takes_every_member_op),
        cmocka_unit_test(test_member_takes_every_head_op),
        cmocka_unit_test(test_ops_of_the_wrong_side),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
