/* test_ids.c — the id helpers (src/ids.h): the home node in an id's first 4
 * bytes, an id's creator and an object id's sequence, the lowercase hex
 * form and its lengths, and random bytes. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "ids.h"

static void test_home_big_endian(void **state)
{
    char id[BEAM_OBJECT_ID_SIZE] = {0};
    assert_int_equal(beam_id_home(id), 0);
    id[3] = 1;
    assert_int_equal(beam_id_home(id), 1);
    memcpy(id, "\x01\x02\x03\x04", 4);
    assert_int_equal(beam_id_home(id), 0x01020304u);
    /* high bits are not sign-extended */
    memcpy(id, "\xff\xfe\xfd\xfc", 4);
    assert_int_equal(beam_id_home(id), 0xfffefdfcu);
    memcpy(id, "\x80\x00\x00\x00", 4);
    assert_int_equal(beam_id_home(id), 0x80000000u);
    /* only the first 4 bytes count */
    memset(id + 4, 0xff, sizeof id - 4);
    assert_int_equal(beam_id_home(id), 0x80000000u);
}

static void test_hex_lowercase(void **state)
{
    static const char id[4] = {0x00, (char)0xab, 0x7f, (char)0xf0};
    char out[9];
    memset(out, 'Z', sizeof out);
    beam_id_hex(id, 4, out);
    assert_string_equal(out, "00ab7ff0");
    char all[2 * 256 + 1];
    char bytes[256];
    for (int i = 0; i < 256; i++)
        bytes[i] = (char)i;
    beam_id_hex(bytes, 256, all);
    assert_int_equal(strlen(all), 512);
    assert_memory_equal(all, "000102", 6);
    assert_memory_equal(all + 2 * 0x9f, "9fa0", 4);
    assert_memory_equal(all + 2 * 0xfe, "feff", 4);
    for (size_t i = 0; i < 512; i++)
        assert_true((all[i] >= '0' && all[i] <= '9') || (all[i] >= 'a' && all[i] <= 'f'));
}

static void test_hex_lengths(void **state)
{
    char id[BEAM_NODE_ID_SIZE];
    char out[2 * BEAM_NODE_ID_SIZE + 2];
    memset(id, 0x5a, sizeof id);
    static const struct { size_t n; size_t hex; } sizes[] = {
        {BEAM_NODE_ID_SIZE, 56}, {BEAM_OBJECT_ID_SIZE, 56}, {BEAM_ACTOR_ID_SIZE, 32},
        {BEAM_PG_ID_SIZE, 36}, {BEAM_JOB_ID_SIZE, 8}, {0, 0},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        memset(out, 'Z', sizeof out);
        beam_id_hex(id, sizes[i].n, out);
        assert_int_equal(strlen(out), sizes[i].hex);
        /* exactly 2n+1 bytes are written */
        assert_int_equal(out[sizes[i].hex + 1], 'Z');
    }
    assert_int_equal(BEAM_NODE_ID_SIZE, 28);
    assert_int_equal(BEAM_OBJECT_ID_SIZE, 28);
    assert_int_equal(BEAM_ACTOR_ID_SIZE, 16);
    assert_int_equal(BEAM_PG_ID_SIZE, 18);
    assert_int_equal(BEAM_JOB_ID_SIZE, 4);
}

/* node index 4 · connection 4 · sequence 8 · job 4 · kind 4 · index 4 */
static void make_obj(char *id, uint32_t node, uint32_t conn, uint64_t seq)
{
    memset(id, 0x77, BEAM_OBJECT_ID_SIZE);
    for (int i = 0; i < 4; i++) {
        id[i] = (char)(node >> (24 - 8 * i));
        id[4 + i] = (char)(conn >> (24 - 8 * i));
    }
    for (int i = 0; i < 8; i++)
        id[8 + i] = (char)(seq >> (56 - 8 * i));
}

static void test_creator_and_sequence(void **state)
{
    char id[BEAM_OBJECT_ID_SIZE];
    make_obj(id, 2, 7, 5);
    assert_true(beam_id_made_by(id, 2, 7));
    assert_false(beam_id_made_by(id, 7, 2));
    assert_false(beam_id_made_by(id, 2, 8));
    assert_false(beam_id_made_by(id, 1, 7));
    assert_int_equal(beam_object_seq(id), 5);
    /* high bits: no sign extension, and the halves in their places */
    make_obj(id, 0xfffffffeu, 0x80000001u, 0x8000000100000002ull);
    assert_true(beam_id_made_by(id, 0xfffffffeu, 0x80000001u));
    assert_false(beam_id_made_by(id, 0xfffffffeu, 1));
    assert_true(beam_object_seq(id) == 0x8000000100000002ull);
    /* the rest of the id does not count */
    memset(id + BEAM_ID_CREATOR_BYTES, 0, 8);
    assert_true(beam_id_made_by(id, 0xfffffffeu, 0x80000001u));
    assert_true(beam_object_seq(id) == 0);
}

static void test_random(void **state)
{
    char a[BEAM_NODE_ID_SIZE], b[BEAM_NODE_ID_SIZE], zero[BEAM_NODE_ID_SIZE];
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    memset(zero, 0, sizeof zero);
    assert_int_equal(beam_random(a, sizeof a), 0);
    assert_int_equal(beam_random(b, sizeof b), 0);
    assert_memory_not_equal(a, b, sizeof a);
    assert_memory_not_equal(a, zero, sizeof a);
    /* n bytes exactly: the byte after is left alone */
    char c[9];
    memset(c, 0x11, sizeof c);
    assert_int_equal(beam_random(c, 8), 0);
    assert_int_equal(c[8], 0x11);
    assert_int_equal(beam_random(c, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_home_big_endian),
        cmocka_unit_test(test_hex_lowercase),
        cmocka_unit_test(test_hex_lengths),
        cmocka_unit_test(test_creator_and_sequence),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
