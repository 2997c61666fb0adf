/* test_results.c — _beam's table of pushed results (src/pybeam/results.h):
 * expecting an id, filing its push once, a push for an id never expected
 * or already arrived refused (the caller frees it), taking an entry on
 * release whatever its state, and the count the tests read. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "results.h"

static void make_id(char *id, int n)
{
    memset(id, 0, BEAM_OBJECT_ID_SIZE);
    memcpy(id + 8, &n, sizeof n);
}

static void test_expect_file_take(void **state)
{
    pb_results_t t = {0};
    char a[BEAM_OBJECT_ID_SIZE], b[BEAM_OBJECT_ID_SIZE];
    make_id(a, 1);
    make_id(b, 2);
    assert_null(pb_results_find(&t, a));
    assert_int_equal(pb_results_expect(&t, a), 0);
    assert_int_equal(pb_results_expect(&t, a), -EEXIST);
    assert_int_equal(t.count, 1);
    assert_int_equal(t.pending, 1);
    pb_result_t *e = pb_results_find(&t, a);
    assert_non_null(e);
    assert_int_equal(e->state, PB_RESULT_EXPECTED);
    assert_null(e->frame);
    /* a push for an id never expected is not taken */
    int frame1 = 1, frame2 = 2;
    assert_int_equal(pb_results_file(&t, b, &frame1, 0, NULL, 0), -ENOENT);
    assert_int_equal(t.filed, 0);
    assert_int_equal(pb_results_file(&t, a, &frame1, 0, NULL, 0), 0);
    assert_int_equal(e->state, PB_RESULT_ARRIVED);
    assert_ptr_equal(e->frame, &frame1);
    assert_int_equal(e->status, 0);
    assert_int_equal(t.filed, 1);
    assert_int_equal(t.pending, 0);
    assert_int_equal(t.failed, 0);
    /* a second push of the same id is not taken: the first stays */
    assert_int_equal(pb_results_file(&t, a, &frame2, 2, NULL, 0), -EALREADY);
    assert_ptr_equal(e->frame, &frame1);
    pb_result_t *got = pb_results_take(&t, a);
    assert_ptr_equal(got, e);
    free(got);
    assert_int_equal(t.count, 0);
    assert_null(pb_results_find(&t, a));
    assert_null(pb_results_take(&t, a));
    /* released before its push: the push then finds nothing */
    assert_int_equal(pb_results_file(&t, a, &frame2, 0, NULL, 0), -ENOENT);
}

static void test_many_and_pop(void **state)
{
    pb_results_t t = {0};
    char id[BEAM_OBJECT_ID_SIZE];
    for (int i = 0; i < 5000; i++) {
        make_id(id, i);
        assert_int_equal(pb_results_expect(&t, id), 0);
    }
    assert_int_equal(t.count, 5000);
    for (int i = 0; i < 5000; i += 2) {
        make_id(id, i);
        assert_int_equal(pb_results_file(&t, id, &t, i % 4 == 0 ? 1 : (i % 4 == 2 ? -1 : 0), NULL, 0), 0);
    }
    for (int i = 0; i < 5000; i += 3) {
        make_id(id, i);
        free(pb_results_take(&t, id));
    }
    assert_int_equal(t.count, 5000 - 1667);
    assert_int_equal(t.filed, 2500);
    /* pending: the odd ones (never filed) not taken: 2500 - those of them taken (odd multiples of 3) */
    assert_int_equal(t.pending, 2500 - 833);
    assert_int_equal(t.failed, 1250); /* status 1 counted; -1 (no value pushed) and 0 not */
    size_t popped = 0;
    for (pb_result_t *e; (e = pb_results_pop(&t)); popped++)
        free(e);
    assert_int_equal(popped, 5000 - 1667);
    assert_int_equal(t.count, 0);
    assert_int_equal(t.pending, 0);
    assert_null(pb_results_pop(&t));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expect_file_take),
        cmocka_unit_test(test_many_and_pop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
