/* test_localresults.c — the results a member keeps for its local calls (src/localresults.h),
 * as a table: pending and done, the actor and caller each belongs to,
 * release, cut and a caller's end, and the bounds (bytes, count, one large
 * result). No connection: the gets answered from it are tested end to end
 * (tests/python/test_cluster_local.py). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "localresults.h"

typedef struct fixture_s {
    uv_loop_t loop;
    beam_node_t node;
    beam_localresults_t *k;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (!f || uv_loop_init(&f->loop) != 0)
        return -1;
    f->node.loop = &f->loop;
    beam_limits_default(&f->node.limits);
    f->node.is_member = 1;
    f->k = beam_localresults_new(&f->node, NULL);
    *state = f;
    return f->k ? 0 : -1;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    beam_localresults_free(f->k);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f);
    return 0;
}

static void obj_id(char *id, uint32_t seq)
{
    memset(id, 0, BEAM_OBJECT_ID_SIZE);
    memcpy(id + 8, &seq, sizeof seq);
}

static void actor_id(char *id, uint32_t seq)
{
    memset(id, 0, BEAM_ACTOR_ID_SIZE);
    memcpy(id + 8, &seq, sizeof seq);
}

/* A parsed message [2, op, {obj | objects, status, data}]; the caller
 * destroys m and frees *buf. */
static void make_msg(fixture_t *f, const char *op, uint32_t seq, int status, const char *data, size_t len,
                     char **buf, beam_msg_t *m)
{
    char id[BEAM_OBJECT_ID_SIZE], err[160];
    beam_enc_t enc;
    size_t n;
    obj_id(id, seq);
    beam_enc_init(&enc);
    beam_enc_push(&enc, op, 3);
    if (strcmp(op, "release") == 0) {
        beam_localresults_pack_ids(&enc.pk, "objects", id, 1, BEAM_OBJECT_ID_SIZE);
    } else {
        beam_pack_key(&enc.pk, "obj");
        beam_pack_bin(&enc.pk, id, BEAM_OBJECT_ID_SIZE);
    }
    beam_pack_key(&enc.pk, "status");
    msgpack_pack_int(&enc.pk, status);
    beam_pack_key(&enc.pk, "data");
    beam_pack_bin(&enc.pk, data, len);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    *buf = beam_enc_take(&enc, &n);
    beam_enc_destroy(&enc);
    assert_non_null(*buf);
    assert_int_equal(beam_msg_parse(*buf + BEAM_FRAME_HEADER, n - BEAM_FRAME_HEADER, &f->node.limits, m, err,
                                    sizeof err), 0);
}

static void done(fixture_t *f, uint32_t actor, uint32_t seq, int status, const char *data, size_t len)
{
    char a[BEAM_ACTOR_ID_SIZE], id[BEAM_OBJECT_ID_SIZE];
    actor_id(a, actor);
    obj_id(id, seq);
    beam_localresults_done(f->k, a, id, status, data, (uint32_t)len);
}

static void release(fixture_t *f, uint32_t caller, uint32_t seq)
{
    char *buf;
    beam_msg_t m;
    make_msg(f, "release", seq, 0, "", 0, &buf, &m);
    beam_localresults_release(f->k, caller, &m.params.via.map.ptr[0].val.via.array);
    beam_msg_destroy(&m);
    free(buf);
}

static int add(fixture_t *f, uint32_t seq, uint32_t actor, uint32_t caller)
{
    char o[BEAM_OBJECT_ID_SIZE], a[BEAM_ACTOR_ID_SIZE];
    obj_id(o, seq);
    actor_id(a, actor);
    return beam_localresults_add(f->k, o, a, caller, 0);
}

static int state(fixture_t *f, uint32_t seq)
{
    char o[BEAM_OBJECT_ID_SIZE];
    obj_id(o, seq);
    return beam_localresults_state(f->k, o, NULL, NULL, NULL);
}

static void test_pending_then_done(void **st)
{
    fixture_t *f = *st;
    char o[BEAM_OBJECT_ID_SIZE];
    assert_int_equal(beam_localresults_any(f->k), 0);
    assert_int_equal(add(f, 1, 7, 3), 0);
    assert_int_equal(add(f, 1, 7, 3), -EEXIST);
    assert_int_equal(beam_localresults_any(f->k), 1);
    assert_int_equal(state(f, 1), 0);
    done(f, 8, 1, 0, "x", 1); /* another actor's worker: not its call */
    assert_int_equal(state(f, 1), 0);
    done(f, 7, 1, 1, "boom", 4);
    int status;
    const char *data;
    size_t len;
    obj_id(o, 1);
    assert_int_equal(beam_localresults_state(f->k, o, &status, &data, &len), 1);
    assert_int_equal(status, 1);
    assert_int_equal(len, 4);
    assert_memory_equal(data, "boom", 4);
    done(f, 7, 1, 0, "again", 5); /* a second result changes nothing */
    assert_int_equal(beam_localresults_state(f->k, o, &status, &data, &len), 1);
    assert_int_equal(status, 1);
    done(f, 7, 2, 0, "x", 1); /* not a local call: nothing kept */
    assert_int_equal(state(f, 2), -1);
    beam_localresults_drop(f->k, o);
    assert_int_equal(state(f, 1), -1);
    assert_int_equal(beam_localresults_any(f->k), 0);
}

static void test_release_cut_and_caller_end(void **st)
{
    fixture_t *f = *st;
    for (uint32_t i = 1; i <= 6; i++)
        assert_int_equal(add(f, i, i <= 3 ? 7 : 8, i % 2 ? 3 : 4), 0);
    done(f, 7, 1, 0, "a", 1);
    done(f, 8, 4, 0, "b", 1);
    release(f, 4, 1); /* not its caller's release */
    assert_int_equal(state(f, 1), 1);
    release(f, 3, 1);
    assert_int_equal(state(f, 1), -1);
    release(f, 3, 3); /* a pending one released: its result will not be kept */
    assert_int_equal(state(f, 3), -1);
    done(f, 7, 3, 0, "late", 4);
    assert_int_equal(state(f, 3), -1);
    char a[BEAM_ACTOR_ID_SIZE];
    actor_id(a, 7);
    beam_localresults_cut(f->k, a); /* actor 7's pending calls are the head's now */
    assert_int_equal(state(f, 2), -1);
    assert_int_equal(state(f, 4), 1);
    beam_localresults_client_gone(f->k, 4); /* 4 (done) and 6 (pending) were caller 4's */
    assert_int_equal(state(f, 4), -1);
    assert_int_equal(state(f, 6), -1);
    assert_int_equal(state(f, 5), 0);
    beam_localresults_clear(f->k);
    assert_int_equal(beam_localresults_any(f->k), 0);
}

static void test_bounds(void **st)
{
    fixture_t *f = *st;
    size_t quarter = BEAM_KEPT_BYTES / 4;
    char *big = calloc(1, quarter + 1);
    assert_non_null(big);
    /* one result over a quarter of the bound is not kept */
    assert_int_equal(add(f, 1, 7, 3), 0);
    done(f, 7, 1, 0, big, quarter + 1);
    assert_int_equal(state(f, 1), -1);
    /* five of a quarter each: the oldest goes */
    for (uint32_t i = 2; i <= 6; i++) {
        assert_int_equal(add(f, i, 7, 3), 0);
        done(f, 7, i, 0, big, quarter);
    }
    assert_int_equal(state(f, 2), -1);
    for (uint32_t i = 3; i <= 6; i++)
        assert_int_equal(state(f, i), 1);
    free(big);
    beam_localresults_clear(f->k);
    /* the count: pending calls fill it; a done one makes room when it goes */
    for (uint32_t i = 1; i <= BEAM_KEPT_MAX; i++)
        assert_int_equal(add(f, i, 7, 3), 0);
    assert_int_equal(add(f, BEAM_KEPT_MAX + 1, 7, 3), -ENOSPC);
    done(f, 7, 5, 0, "d", 1);
    assert_int_equal(add(f, BEAM_KEPT_MAX + 1, 7, 3), 0);
    assert_int_equal(state(f, 5), -1);
    assert_int_equal(state(f, BEAM_KEPT_MAX + 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pending_then_done, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_cut_and_caller_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
