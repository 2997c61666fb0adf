/* test_request.c — the field table (src/request.h, beam_req_fields): values
 * and defaults of every type, "is required" for absent and nil, each type's
 * own error (ids' sizes with their article), the spec's own error text,
 * bounds on ints, lengths and NUL bytes, ids inside an id array, types
 * checked before bounds, and beam_field_cstr cutting to fit; a tuple read
 * by a table (beam_fields_check_tuple) by position. Replies go to a port
 * with no socket that keeps the last frame's bytes. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

/* --- a port that keeps the last frame, and requests built by hand --- */

typedef struct lastport_s {
    beam_port_t port;
    int sent;
    char *last;
    size_t last_len;
} lastport_t;

static int lp_send(beam_port_t *p, char *buf, size_t len)
{
    lastport_t *l = (lastport_t *)p;
    free(l->last);
    l->last = buf;
    l->last_len = len;
    l->sent++;
    return 0;
}
static void lp_log(beam_port_t *p, int stream, const char *text, size_t len)
{
    (void)p, (void)stream, (void)text, (void)len;
}
static void lp_close(beam_port_t *p, const char *why) { (void)p, (void)why; }
static int lp_closing(const beam_port_t *p) { return (void)p, 0; }
static const beam_port_ops_t lp_ops = {lp_send, lp_log, lp_close, lp_closing, NULL};

typedef struct fixture_s {
    beam_node_t node;
    lastport_t lp;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked un;
    beam_req_t r;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    beam_limits_default(&f->node.limits);
    f->lp.port.ops = &lp_ops;
    f->lp.port.node = &f->node;
    msgpack_sbuffer_init(&f->sb);
    msgpack_packer_init(&f->pk, &f->sb, msgpack_sbuffer_write);
    msgpack_unpacked_init(&f->un);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    free(f->lp.last);
    msgpack_sbuffer_destroy(&f->sb);
    msgpack_unpacked_destroy(&f->un);
    free(f);
    return 0;
}

/* Starts a params map of n entries (the test packs them with f->pk). */
static void params_begin(fixture_t *f, uint32_t n)
{
    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_map(&f->pk, n);
}

/* Ends the map: the request f->r reads it. */
static beam_req_t *params_end(fixture_t *f)
{
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&f->un, f->sb.data, f->sb.size, &off), MSGPACK_UNPACK_SUCCESS);
    f->r = (beam_req_t){.conn = &f->lp.port, .node = &f->node, .msgid = 7, .params = &f->un.data};
    return &f->r;
}

/* 1 if the last reply holds text (the error message is a str in the frame). */
static int replied(const fixture_t *f, const char *text)
{
    size_t n = strlen(text);
    if (!f->lp.last || f->lp.last_len < n)
        return 0;
    for (size_t i = 0; i + n <= f->lp.last_len; i++)
        if (memcmp(f->lp.last + i, text, n) == 0)
            return 1;
    return 0;
}

static void key(fixture_t *f, const char *k) { beam_pack_key(&f->pk, k); }

/* --- one table with every type --- */

enum { F_ID, F_IDS, F_BIN, F_STR, F_INT, F_BOOL, F_NUM, F_ARR, F_MAP, F_PG };
static const beam_field_spec_t every[] = {
    [F_ID] = BEAM_FIELD("obj", BEAM_F_ID, BEAM_F_REQUIRED, .size = BEAM_OBJECT_ID_SIZE),
    [F_IDS] = BEAM_FIELD("objs", BEAM_F_IDS, 0, .size = BEAM_OBJECT_ID_SIZE),
    [F_BIN] = BEAM_FIELD("data", BEAM_F_BIN, 0),
    [F_STR] = BEAM_FIELD("method", BEAM_F_STR, BEAM_F_NONUL, .min = 1, .max = 8, .bound = "must be 1..8 bytes"),
    [F_INT] = BEAM_FIELD("timeout_ms", BEAM_F_INT, 0, .def = -1, .min = -1, .max = INT64_MAX,
                         .bound = "must be -1 (forever) or >= 0"),
    [F_BOOL] = BEAM_FIELD("logs", BEAM_F_BOOL, 0, .def = 1),
    [F_NUM] = BEAM_FIELD("num_cpus", BEAM_F_NUMBER, 0),
    [F_ARR] = BEAM_FIELD("bundles", BEAM_F_ARRAY, 0, .min = 1, .max = 2, .bound = "must hold 1..2 bundles",
                         .what = "must be an array of maps"),
    [F_MAP] = BEAM_FIELD("resources", BEAM_F_MAP, 0),
    [F_PG] = BEAM_FIELD("pg", BEAM_F_ID, 0, .size = BEAM_PG_ID_SIZE),
};

static const char ID28[] = "0123456789012345678901234567";

static void test_values_and_defaults(void **state)
{
    fixture_t *f = *state;
    beam_field_val_t v[10];
    /* only the required id: every other field takes its default */
    params_begin(f, 1);
    key(f, "obj");
    beam_pack_bin(&f->pk, ID28, 28);
    assert_int_equal(BEAM_REQ_FIELDS(params_end(f), every, v), 0);
    assert_int_equal(f->lp.sent, 0);
    assert_true(v[F_ID].present);
    assert_memory_equal(v[F_ID].s, ID28, 28);
    assert_false(v[F_STR].present);
    assert_string_equal(v[F_STR].s, "");
    assert_int_equal(v[F_STR].len, 0);
    assert_int_equal(v[F_INT].i, -1);
    assert_int_equal(v[F_BOOL].i, 1);
    assert_true(v[F_NUM].d == 0.0);
    assert_null(v[F_ARR].a);
    assert_null(v[F_MAP].m);
    /* every field given, each within bounds; nil is absent */
    params_begin(f, 10);
    key(f, "obj");
    beam_pack_bin(&f->pk, ID28, 28);
    key(f, "objs");
    msgpack_pack_array(&f->pk, 2);
    beam_pack_bin(&f->pk, ID28, 28);
    beam_pack_bin(&f->pk, ID28, 28);
    key(f, "data");
    beam_pack_bin(&f->pk, "", 0);
    key(f, "method");
    beam_pack_str(&f->pk, "go");
    key(f, "timeout_ms");
    msgpack_pack_int64(&f->pk, 0);
    key(f, "logs");
    msgpack_pack_false(&f->pk);
    key(f, "num_cpus");
    msgpack_pack_int64(&f->pk, 3); /* an int is a number */
    key(f, "bundles");
    msgpack_pack_array(&f->pk, 2);
    msgpack_pack_map(&f->pk, 0);
    msgpack_pack_map(&f->pk, 0);
    key(f, "resources");
    msgpack_pack_map(&f->pk, 0);
    key(f, "pg");
    msgpack_pack_nil(&f->pk);
    assert_int_equal(BEAM_REQ_FIELDS(params_end(f), every, v), 0);
    assert_int_equal(f->lp.sent, 0);
    assert_int_equal(v[F_IDS].a->size, 2);
    assert_true(v[F_BIN].present);
    assert_int_equal(v[F_BIN].len, 0);
    assert_int_equal(v[F_STR].len, 2);
    assert_memory_equal(v[F_STR].s, "go", 2);
    assert_int_equal(v[F_INT].i, 0);
    assert_int_equal(v[F_BOOL].i, 0);
    assert_true(v[F_NUM].d == 3.0);
    assert_int_equal(v[F_ARR].a->size, 2);
    assert_int_equal(v[F_MAP].m->size, 0);
    assert_false(v[F_PG].present);
}

static void test_required_absent_and_nil(void **state)
{
    fixture_t *f = *state;
    beam_field_val_t v[10];
    params_begin(f, 0);
    assert_int_equal(BEAM_REQ_FIELDS(params_end(f), every, v), -EINVAL);
    assert_int_equal(f->lp.sent, 1);
    assert_true(replied(f, "bad_request"));
    assert_true(replied(f, "field 'obj' is required"));
    params_begin(f, 1);
    key(f, "obj");
    msgpack_pack_nil(&f->pk);
    assert_int_equal(BEAM_REQ_FIELDS(params_end(f), every, v), -EINVAL);
    assert_true(replied(f, "field 'obj' is required"));
}

/* One field of `every` given alone with the required id, as packed by pack;
 * the reply must hold text. */
static void one_bad(fixture_t *f, const char *field, void (*pack)(msgpack_packer *), const char *text)
{
    beam_field_val_t v[10];
    int before = f->lp.sent;
    params_begin(f, 2);
    key(f, "obj");
    beam_pack_bin(&f->pk, ID28, 28);
    key(f, field);
    pack(&f->pk);
    assert_int_equal(BEAM_REQ_FIELDS(params_end(f), every, v), -EINVAL);
    assert_int_equal(f->lp.sent, before + 1); /* one reply */
    if (!replied(f, text))
        fail_msg("field %s: the reply does not say \"%s\"", field, text);
}

static void pk_str(msgpack_packer *pk) { beam_pack_str(pk, "x"); }
static void pk_int(msgpack_packer *pk) { msgpack_pack_int64(pk, 5); }
static void pk_bin27(msgpack_packer *pk) { beam_pack_bin(pk, ID28, 27); }
static void pk_bin18(msgpack_packer *pk) { beam_pack_bin(pk, ID28, 17); }
static void pk_float(msgpack_packer *pk) { msgpack_pack_double(pk, 1.5); }
static void pk_true(msgpack_packer *pk) { msgpack_pack_true(pk); }
static void pk_empty_str(msgpack_packer *pk) { beam_pack_str(pk, ""); }
static void pk_long_str(msgpack_packer *pk) { beam_pack_str(pk, "123456789"); }
static void pk_nul_str(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "a\0b", 3); }
static void pk_minus2(msgpack_packer *pk) { msgpack_pack_int64(pk, -2); }
static void pk_empty_array(msgpack_packer *pk) { msgpack_pack_array(pk, 0); }
static void pk_long_array(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 3);
    for (int i = 0; i < 3; i++)
        msgpack_pack_map(pk, 0);
}
static void pk_ids_short(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 2);
    beam_pack_bin(pk, ID28, 28);
    beam_pack_bin(pk, ID28, 27);
}
static void pk_ids_str(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 1);
    beam_pack_str(pk, "0123456789012345678901234567");
}

static void test_type_errors(void **state)
{
    fixture_t *f = *state;
    one_bad(f, "objs", pk_str, "field 'objs' must be an array of ids");
    one_bad(f, "data", pk_str, "field 'data' must be a bin");
    one_bad(f, "method", pk_int, "field 'method' must be a str");
    one_bad(f, "timeout_ms", pk_float, "field 'timeout_ms' must be an int");
    one_bad(f, "logs", pk_int, "field 'logs' must be a bool");
    one_bad(f, "num_cpus", pk_str, "field 'num_cpus' must be a number");
    one_bad(f, "num_cpus", pk_true, "field 'num_cpus' must be a number");
    one_bad(f, "bundles", pk_str, "field 'bundles' must be an array of maps"); /* the spec's own text */
    one_bad(f, "resources", pk_int, "field 'resources' must be a map");
    one_bad(f, "pg", pk_bin18, "field 'pg' must be an 18-byte bin");
    /* the required id itself */
    beam_field_val_t v[10];
    params_begin(f, 1);
    key(f, "obj");
    pk_bin27(&f->pk);
    assert_int_equal(BEAM_REQ_FIELDS(params_end(f), every, v), -EINVAL);
    assert_true(replied(f, "field 'obj' must be a 28-byte bin"));
}

static void test_bounds(void **state)
{
    fixture_t *f = *state;
    one_bad(f, "method", pk_empty_str, "field 'method' must be 1..8 bytes");
    one_bad(f, "method", pk_long_str, "field 'method' must be 1..8 bytes");
    one_bad(f, "method", pk_nul_str, "field 'method' must be 1..8 bytes");
    one_bad(f, "timeout_ms", pk_minus2, "field 'timeout_ms' must be -1 (forever) or >= 0");
    one_bad(f, "bundles", pk_empty_array, "field 'bundles' must hold 1..2 bundles");
    one_bad(f, "bundles", pk_long_array, "field 'bundles' must hold 1..2 bundles");
    one_bad(f, "objs", pk_ids_short, "field 'objs' must hold 28-byte bin object ids");
    one_bad(f, "objs", pk_ids_str, "field 'objs' must hold 28-byte bin object ids");
}

/* Every type is checked before any bound: a field out of bounds before a
 * field of the wrong type reports the wrong type. */
static void test_types_before_bounds(void **state)
{
    fixture_t *f = *state;
    beam_field_val_t v[10];
    params_begin(f, 3);
    key(f, "obj");
    beam_pack_bin(&f->pk, ID28, 28);
    key(f, "method");
    beam_pack_str(&f->pk, "far too long");
    key(f, "logs");
    beam_pack_str(&f->pk, "yes");
    assert_int_equal(BEAM_REQ_FIELDS(params_end(f), every, v), -EINVAL);
    assert_true(replied(f, "field 'logs' must be a bool"));
    assert_false(replied(f, "'method'"));
}

static void test_cstr(void **state)
{
    (void)state;
    beam_field_val_t v = {.present = 1, .s = "abcdef", .len = 6};
    char out[4];
    beam_field_cstr(&v, out, sizeof out);
    assert_string_equal(out, "abc");
    char big[16];
    beam_field_cstr(&v, big, sizeof big);
    assert_string_equal(big, "abcdef");
    beam_field_val_t none = {.s = "", .len = 0};
    beam_field_cstr(&none, big, sizeof big);
    assert_string_equal(big, "");
}

/* An array of strs (link messages' env, sys_path, gpus): every element a
 * str, none with a NUL under BEAM_F_NONUL, its length bounded. */
static void test_strs(void **state)
{
    fixture_t *f = *state;
    static const beam_field_spec_t strs[] = {
        BEAM_FIELD("env", BEAM_F_STRS, BEAM_F_REQUIRED | BEAM_F_NONUL, .min = 0, .max = 2, .bound = "is too long"),
    };
    beam_field_val_t v[1];
    params_begin(f, 1);
    key(f, "env");
    msgpack_pack_array(&f->pk, 2);
    beam_pack_str(&f->pk, "A=1");
    beam_pack_str(&f->pk, "B=2");
    assert_int_equal(BEAM_REQ_FIELDS(params_end(f), strs, v), 0);
    assert_int_equal(v[0].a->size, 2);
    params_begin(f, 1);
    key(f, "env");
    msgpack_pack_array(&f->pk, 2);
    beam_pack_str(&f->pk, "A=1");
    beam_pack_bin(&f->pk, "B=2", 3);
    assert_int_equal(BEAM_REQ_FIELDS(params_end(f), strs, v), -EINVAL);
    assert_true(replied(f, "field 'env' must be an array of strs"));
    params_begin(f, 1);
    key(f, "env");
    msgpack_pack_array(&f->pk, 1);
    beam_pack_strn(&f->pk, "A\0B", 3);
    assert_int_equal(BEAM_REQ_FIELDS(params_end(f), strs, v), -EINVAL);
    assert_true(replied(f, "field 'env' must be an array of strs"));
    params_begin(f, 1);
    key(f, "env");
    msgpack_pack_array(&f->pk, 3);
    for (int i = 0; i < 3; i++)
        beam_pack_str(&f->pk, "x");
    assert_int_equal(BEAM_REQ_FIELDS(params_end(f), strs, v), -EINVAL);
    assert_true(replied(f, "field 'env' is too long"));
}

/* A tuple (fieldspec.h, beam_fields_check_tuple: a local_batch record): an
 * array of exactly as many elements as rows, element i read by row i with
 * the same types, defaults and bounds as a map's fields; nil is absent. */
static void test_tuple(void **state)
{
    fixture_t *f = *state;
    static const beam_field_spec_t rec[] = {
        BEAM_FIELD("kind", BEAM_F_INT, BEAM_F_REQUIRED, .min = 0, .max = 1, .bound = "must be 0 or 1"),
        BEAM_FIELD("id", BEAM_F_ID, BEAM_F_REQUIRED, .size = BEAM_OBJECT_ID_SIZE),
        BEAM_FIELD("frame", BEAM_F_BIN, 0),
        BEAM_FIELD("push", BEAM_F_BOOL, 0, .def = 1),
    };
    beam_field_val_t v[4];
    const char *field, *what;
    char buf[64];
    size_t off;
    for (int round = 0; round < 9; round++) {
        msgpack_sbuffer_clear(&f->sb);
        uint32_t n = round == 5 ? 3 : round == 6 ? 5 : 4;
        if (round == 7)
            msgpack_pack_map(&f->pk, 0); /* not an array */
        else
            msgpack_pack_array(&f->pk, n);
        if (round != 7) {
            if (round == 1)
                msgpack_pack_int8(&f->pk, -1);
            else if (round == 8)
                msgpack_pack_nil(&f->pk);
            else
                msgpack_pack_uint8(&f->pk, 1);
            if (round == 2)
                beam_pack_bin(&f->pk, ID28, 27);
            else
                beam_pack_bin(&f->pk, ID28, 28);
            if (round == 3)
                beam_pack_str(&f->pk, "frame");
            else if (round == 4 || n == 3)
                msgpack_pack_nil(&f->pk);
            else
                beam_pack_bin(&f->pk, "frame", 5);
            if (n >= 4)
                msgpack_pack_nil(&f->pk); /* push: its default */
            if (n == 5)
                msgpack_pack_true(&f->pk);
        }
        off = 0;
        assert_int_equal(msgpack_unpack_next(&f->un, f->sb.data, f->sb.size, &off), MSGPACK_UNPACK_SUCCESS);
        int rc = beam_fields_check_tuple(&f->un.data, rec, 4, v, &field, &what, buf, sizeof buf);
        switch (round) {
        case 0: /* well formed, push left to its default */
        case 4: /* an optional field nil: absent */
            assert_int_equal(rc, 0);
            assert_int_equal(v[0].i, 1);
            assert_memory_equal(v[1].s, ID28, 28);
            assert_int_equal(v[3].present, 0);
            assert_int_equal(v[3].i, 1);
            if (round == 0) {
                assert_true(v[2].present);
                assert_int_equal(v[2].len, 5);
                assert_memory_equal(v[2].s, "frame", 5);
            } else {
                assert_false(v[2].present);
                assert_int_equal(v[2].len, 0);
            }
            break;
        case 1:
            assert_int_equal(rc, -EINVAL);
            assert_string_equal(field, "kind");
            assert_string_equal(what, "must be 0 or 1");
            break;
        case 2:
            assert_int_equal(rc, -EINVAL);
            assert_string_equal(field, "id");
            assert_string_equal(what, "must be a 28-byte bin");
            break;
        case 3:
            assert_int_equal(rc, -EINVAL);
            assert_string_equal(field, "frame");
            assert_string_equal(what, "must be a bin");
            break;
        case 8: /* a required field nil */
            assert_int_equal(rc, -EINVAL);
            assert_string_equal(field, "kind");
            assert_string_equal(what, "is required");
            break;
        default: /* three or five elements, or a map */
            assert_int_equal(rc, -EINVAL);
            assert_null(field);
            assert_string_equal(what, "must be an array of 4 elements");
            break;
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_values_and_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_required_absent_and_nil, setup, teardown),
        cmocka_unit_test_setup_teardown(test_type_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_types_before_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cstr, setup, teardown),
        cmocka_unit_test_setup_teardown(test_strs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tuple, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
