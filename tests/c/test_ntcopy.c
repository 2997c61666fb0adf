/* test_ntcopy.c — pb_ntcopy (src/pybeam/ntcopy.h): every byte lands, at
 * any alignment of either side and any length, with either width of
 * stores, and nothing outside the destination is written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ntcopy.h"

enum { BLOCK = 4 * 4096, MAX = 3 * BLOCK + 200, PAD = 64 };

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131u + seed);
}

typedef void copy_fn(void *, const void *, size_t);

static void copies_every_byte(copy_fn *copy)
{
    unsigned char *src = malloc(MAX + PAD), *dst = malloc(MAX + 2 * PAD);
    assert_non_null(src);
    assert_non_null(dst);
    fill(src, MAX + PAD, 7);
    size_t lens[] = {0, 1, 63, 64, 65, 4097, BLOCK - 1, BLOCK, BLOCK + 1, BLOCK + 63, BLOCK + 64, 2 * BLOCK + 100, MAX};
    for (size_t so = 0; so < 17; so += 3)
        for (size_t doff = 0; doff < PAD; doff += 5)
            for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
                size_t n = lens[i];
                memset(dst, 0xEE, MAX + 2 * PAD);
                copy(dst + doff, src + so, n);
                if (n)
                    assert_memory_equal(dst + doff, src + so, n);
                for (size_t k = 0; k < doff; k++)
                    assert_int_equal(dst[k], 0xEE);
                for (size_t k = doff + n; k < MAX + 2 * PAD; k++)
                    assert_int_equal(dst[k], 0xEE);
            }
    free(src);
    free(dst);
}

static void test_copies_every_byte_at_every_alignment_and_length(void **state)
{
    (void)state;
    copies_every_byte(pb_ntcopy);
}

static void test_the_sse2_stores_copy_every_byte_too(void **state)
{
    (void)state;
    copies_every_byte(pb_ntcopy_sse2);
}

static void test_a_large_copy_lands_whole(void **state)
{
    (void)state;
    size_t n = (8u << 20) + 12345;
    unsigned char *src = malloc(n), *dst = malloc(n + 1);
    assert_non_null(src);
    assert_non_null(dst);
    fill(src, n, 3);
    dst[n] = 0x5A;
    pb_ntcopy(dst, src, n);
    assert_memory_equal(dst, src, n);
    assert_int_equal(dst[n], 0x5A);
    free(src);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copies_every_byte_at_every_alignment_and_length),
        cmocka_unit_test(test_the_sse2_stores_copy_every_byte_too),
        cmocka_unit_test(test_a_large_copy_lands_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
