/* test_decoder.c — the frame decoder's read-in-place path
 * (include/beam/decoder.h): beam_decoder_space/commit in pieces of every
 * size, a large frame read into a buffer of its own sized from its header
 * (and taken by the caller, or freed by the decoder), frames before and after
 * it in order, limits checked before that buffer is allocated, and trim. The
 * feed path's own cases are in test_codec.c. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "beam/decoder.h"

/* A stream of n frames whose bodies are sizes[i] bytes of (i + 1). */
typedef struct stream_s {
    char *buf;
    size_t len;
    size_t n;
    const size_t *sizes;
} stream_t;

static void stream_make(stream_t *s, const size_t *sizes, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += 4 + sizes[i];
    s->buf = malloc(total);
    assert_non_null(s->buf);
    s->len = total;
    s->n = n;
    s->sizes = sizes;
    char *p = s->buf;
    for (size_t i = 0; i < n; i++) {
        size_t k = sizes[i];
        p[0] = (char)(k >> 24), p[1] = (char)(k >> 16), p[2] = (char)(k >> 8), p[3] = (char)k;
        memset(p + 4, (int)(i + 1), k);
        p += 4 + k;
    }
}

static void check_frame(const stream_t *s, size_t i, const char *frame, size_t len)
{
    assert_true(i < s->n);
    assert_int_equal(len, s->sizes[i]);
    for (size_t j = 0; j < len; j++)
        if (frame[j] != (char)(i + 1))
            fail_msg("frame %zu byte %zu is %d", i, j, frame[j]);
}

/* Reads s through space/commit, at most step bytes a read, taking every
 * frame's own buffer when take is set. Returns how many own buffers came. */
static size_t read_stream(beam_decoder_t *dec, const stream_t *s, size_t step, int take)
{
    size_t off = 0, got = 0, owned = 0;
    while (off < s->len) {
        char *p;
        size_t room;
        assert_int_equal(beam_decoder_space(dec, &p, &room), 0);
        assert_true(room > 0);
        size_t n = s->len - off < step ? s->len - off : step;
        if (n > room)
            n = room;
        memcpy(p, s->buf + off, n);
        beam_decoder_commit(dec, n);
        off += n;
        const char *frame;
        size_t len;
        int rc;
        while ((rc = beam_decoder_next(dec, &frame, &len)) == 1) {
            check_frame(s, got++, frame, len);
            if (take) {
                char *own = beam_decoder_take(dec);
                if (own) {
                    assert_ptr_equal(own, frame);
                    owned++;
                    free(own);
                }
            }
        }
        assert_int_equal(rc, 0);
    }
    assert_int_equal(got, s->n);
    return owned;
}

static void test_space_small_frames_every_step(void **state)
{
    static const size_t sizes[] = {1, 7, 300, 4096, 2, 60000, 3};
    stream_t s;
    beam_limits_t lim;
    beam_limits_default(&lim);
    stream_make(&s, sizes, 7);
    static const size_t steps[] = {1, 2, 3, 5, 4099, 65536, 1u << 20};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        beam_decoder_t dec;
        beam_decoder_init(&dec, &lim);
        assert_int_equal(read_stream(&dec, &s, steps[i], 1), 0); /* all under BEAM_DECODER_OWN */
        beam_decoder_destroy(&dec);
    }
    free(s.buf);
}

/* A large frame between small ones: its body is read into a buffer of its
 * own, exactly sized, and the next read is offered exactly what is left of it. */
static void test_space_large_frame_own_buffer(void **state)
{
    static const size_t sizes[] = {10, 300000, 20, BEAM_DECODER_OWN, 5};
    stream_t s;
    beam_limits_t lim;
    beam_limits_default(&lim);
    stream_make(&s, sizes, 5);
    static const size_t steps[] = {1, 3, 1000, 65536, 1u << 22};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        for (int take = 0; take <= 1; take++) {
            beam_decoder_t dec;
            beam_decoder_init(&dec, &lim);
            size_t owned = read_stream(&dec, &s, steps[i], take);
            if (take && steps[i] < (1u << 22)) /* read whole, a frame is already in the shared buffer */
                assert_int_equal(owned, 2);
            assert_null(dec.own);
            assert_true(dec.cap < (1u << 20)); /* the large frames never went through it */
            beam_decoder_destroy(&dec);
        }

    /* the header and a little body in one read: the rest is offered exactly */
    beam_decoder_t dec;
    beam_decoder_init(&dec, &lim);
    char *p;
    size_t room;
    assert_int_equal(beam_decoder_space(&dec, &p, &room), 0);
    assert_int_equal(room, BEAM_DECODER_READ);
    memcpy(p, s.buf, 4 + 10 + 4 + 100);
    beam_decoder_commit(&dec, 4 + 10 + 4 + 100);
    assert_non_null(dec.own);
    assert_int_equal(dec.own_len, 300000);
    assert_int_equal(dec.own_have, 100);
    assert_int_equal(beam_decoder_space(&dec, &p, &room), 0);
    assert_ptr_equal(p, dec.own + 100);
    assert_int_equal(room, 300000 - 100);
    const char *frame;
    size_t len;
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 1); /* the small one before it */
    check_frame(&s, 0, frame, len);
    assert_null(beam_decoder_take(&dec)); /* it lies in the shared buffer */
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 0);
    memcpy(p, s.buf + 4 + 10 + 4 + 100, room);
    beam_decoder_commit(&dec, room);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 1);
    check_frame(&s, 1, frame, len);
    /* not taken: the decoder frees it at the next call (ASan/valgrind see no leak) */
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 0);
    assert_null(beam_decoder_take(&dec));
    beam_decoder_destroy(&dec);
    free(s.buf);
}

/* Fed whole (feed, not space): the frames before, the large one and those
 * after it come out in order though it sits in its own buffer. */
static void test_feed_keeps_order_around_own_frame(void **state)
{
    static const size_t sizes[] = {5, 6, 200000, 7, 8};
    stream_t s;
    beam_limits_t lim;
    beam_limits_default(&lim);
    stream_make(&s, sizes, 5);
    beam_decoder_t dec;
    beam_decoder_init(&dec, &lim);
    /* up to the middle of the large body, then the rest */
    size_t cut = 4 + 5 + 4 + 6 + 4 + 1000;
    assert_int_equal(beam_decoder_feed(&dec, s.buf, cut), 0);
    assert_non_null(dec.own);
    assert_int_equal(beam_decoder_feed(&dec, s.buf + cut, s.len - cut), 0);
    const char *frame;
    size_t len, got = 0;
    while (beam_decoder_next(&dec, &frame, &len) == 1)
        check_frame(&s, got++, frame, len);
    assert_int_equal(got, 5);
    beam_decoder_destroy(&dec);
    free(s.buf);
}

/* A header over max_frame allocates nothing and fails once the frames
 * before it are out; so does one of length 0 after a large frame. */
static void test_own_buffer_bounded_by_limits(void **state)
{
    beam_limits_t lim;
    beam_limits_default(&lim);
    lim.max_frame = 1u << 20;
    beam_decoder_t dec;
    beam_decoder_init(&dec, &lim);
    const char *frame;
    size_t len;
    char bad[4 + 8] = {0, 0x10, 0, 1}; /* 1 MiB + 1 */
    assert_int_equal(beam_decoder_feed(&dec, "\0\0\0\x01z", 5), 0);
    assert_int_equal(beam_decoder_feed(&dec, bad, sizeof bad), 0);
    assert_null(dec.own);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 1);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), -1);
    assert_non_null(strstr(dec.err, "is outside 1..1048576"));
    char *p;
    size_t room;
    assert_int_equal(beam_decoder_space(&dec, &p, &room), -1); /* sticky */
    beam_decoder_destroy(&dec);

    static const size_t sizes[] = {1u << 20};
    stream_t s;
    stream_make(&s, sizes, 1);
    beam_decoder_init(&dec, &lim);
    assert_int_equal(beam_decoder_feed(&dec, s.buf, 4 + 10), 0);
    assert_non_null(dec.own); /* exactly max_frame is allowed */
    assert_int_equal(beam_decoder_feed(&dec, s.buf + 14, s.len - 14), 0);
    assert_int_equal(beam_decoder_feed(&dec, "\0\0\0\0", 4), 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 1);
    check_frame(&s, 0, frame, len);
    char *own = beam_decoder_take(&dec);
    assert_ptr_equal(own, frame);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), -1);
    assert_int_equal(dec.failed, 1);
    free(own); /* the taken buffer outlives the decoder's failure */
    beam_decoder_destroy(&dec);
    free(s.buf);
}

/* trim gives an idle decoder's shared buffer back, never one that holds a
 * partial frame. */
static void test_trim(void **state)
{
    beam_limits_t lim;
    beam_limits_default(&lim);
    beam_decoder_t dec;
    beam_decoder_init(&dec, &lim);
    const char *frame;
    size_t len;
    assert_int_equal(beam_decoder_feed(&dec, "\0\0\0\x01z\0\0", 7), 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 1);
    beam_decoder_trim(&dec);
    assert_non_null(dec.buf); /* two bytes of the next header are held */
    assert_int_equal(beam_decoder_feed(&dec, "\0\x01y", 3), 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 1);
    assert_int_equal(len, 1);
    assert_int_equal(frame[0], 'y');
    beam_decoder_trim(&dec);
    assert_null(dec.buf);
    assert_int_equal(dec.cap, 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 0);
    beam_decoder_destroy(&dec);
}

/* The frame rule every reader shares (beamd's decoder, _beam's reader):
 * one table of headers, each read alone and through the decoder. */
static void test_frame_header_rule(void **state)
{
    (void)state;
    static const struct {
        const char hdr[4];
        uint32_t max;
        int ok;
        uint32_t n;
    } cases[] = {
        {{0, 0, 0, 0}, 100, 0, 0},          {{0, 0, 0, 1}, 100, 1, 1},   {{0, 0, 0, 100}, 100, 1, 100},
        {{0, 0, 0, 101}, 100, 0, 0},        {{0x7f, 0, 0, 0}, 100, 0, 0}, {{(char)0xff, (char)0xff, (char)0xff, (char)0xff}, UINT32_MAX, 1, UINT32_MAX},
        {{0, 1, 0, 0}, 1u << 16, 1, 1u << 16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t n = 0;
        char err[80] = "";
        int rc = beam_frame_header(cases[i].hdr, cases[i].max, &n, err, sizeof err);
        assert_int_equal(rc, cases[i].ok ? 0 : -1);
        if (cases[i].ok)
            assert_int_equal(n, cases[i].n);
        else
            assert_non_null(strstr(err, "is outside 1.."));
        /* the decoder applies the same rule: a bad header fails it */
        if (cases[i].max == UINT32_MAX || cases[i].n > 1000)
            continue;
        beam_limits_t lim;
        beam_limits_default(&lim);
        lim.max_frame = cases[i].max;
        beam_decoder_t dec;
        beam_decoder_init(&dec, &lim);
        const char *f;
        size_t len;
        assert_int_equal(beam_decoder_feed(&dec, cases[i].hdr, 4), 0);
        assert_int_equal(beam_decoder_next(&dec, &f, &len), cases[i].ok ? 0 : -1);
        beam_decoder_destroy(&dec);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_space_small_frames_every_step),
        cmocka_unit_test(test_space_large_frame_own_buffer),
        cmocka_unit_test(test_feed_keeps_order_around_own_frame),
        cmocka_unit_test(test_own_buffer_bounded_by_limits),
        cmocka_unit_test(test_trim),
        cmocka_unit_test(test_frame_header_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
