/* test_codec.c — the wire codec (include/beam/codec.h): the frame decoder fed
 * whole, byte by byte and split at every offset, the bounded msgpack walker on
 * garbage, truncated and oversized input, the envelope parser, the field
 * accessors and the encoder. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "beam/codec.h"

/* --- helpers --- */

#define MAX_FRAMES 16

/* A stream of frames made by the encoder, with where each body lies. */
typedef struct stream_s {
    char *buf;
    size_t len;
    size_t nframes;
    size_t body_off[MAX_FRAMES];
    size_t body_len[MAX_FRAMES];
} stream_t;

static void stream_mark(stream_t *s, beam_enc_t *enc)
{
    assert_true(s->nframes < MAX_FRAMES);
    s->body_off[s->nframes] = enc->frame_start + BEAM_FRAME_HEADER;
    s->body_len[s->nframes] = enc->sbuf.size - enc->frame_start - BEAM_FRAME_HEADER;
    s->nframes++;
}

static const char bin3[3] = {0x00, (char)0xff, 0x7f};
static char bin300[300];
static char str300[301];

static void fill_big(void)
{
    for (int i = 0; i < 300; i++) {
        bin300[i] = (char)i;
        str300[i] = (char)('a' + i % 26);
    }
    str300[300] = '\0';
}

/* Five frames of the three kinds, holding every msgpack type beam uses, in
 * fix, 8-, 16- and 64-bit encodings. */
static void stream_make(stream_t *s)
{
    beam_enc_t enc;
    memset(s, 0, sizeof *s);
    fill_big();
    beam_enc_init(&enc);

    /* 0: request [0, 7, "put", {...}] */
    beam_enc_request(&enc, 7, "put", 10);
    beam_pack_key(&enc.pk, "s");
    beam_pack_str(&enc.pk, "hello");
    beam_pack_key(&enc.pk, "b");
    beam_pack_bin(&enc.pk, bin3, sizeof bin3);
    beam_pack_key(&enc.pk, "m");
    msgpack_pack_map(&enc.pk, 1);
    beam_pack_key(&enc.pk, "inner");
    msgpack_pack_array(&enc.pk, 6);
    msgpack_pack_int(&enc.pk, 1);
    msgpack_pack_int(&enc.pk, -2);
    msgpack_pack_double(&enc.pk, 3.5);
    msgpack_pack_nil(&enc.pk);
    msgpack_pack_true(&enc.pk);
    msgpack_pack_false(&enc.pk);
    beam_pack_key(&enc.pk, "neg");
    msgpack_pack_int64(&enc.pk, -100000);
    beam_pack_key(&enc.pk, "neg64");
    msgpack_pack_int64(&enc.pk, INT64_MIN);
    beam_pack_key(&enc.pk, "big");
    msgpack_pack_uint64(&enc.pk, UINT64_C(1) << 40);
    beam_pack_key(&enc.pk, "f");
    msgpack_pack_double(&enc.pk, -1.25);
    beam_pack_key(&enc.pk, "f32");
    msgpack_pack_float(&enc.pk, 0.5f);
    beam_pack_key(&enc.pk, "nil");
    msgpack_pack_nil(&enc.pk);
    beam_pack_key(&enc.pk, "t");
    msgpack_pack_true(&enc.pk);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    stream_mark(s, &enc);

    /* 1: reply ok [1, 8, nil, {"values": [[0, bin300]], "n": [20 ints]}] */
    beam_enc_reply_ok(&enc, 8);
    msgpack_pack_map(&enc.pk, 2);
    beam_pack_key(&enc.pk, "values");
    msgpack_pack_array(&enc.pk, 1);
    msgpack_pack_array(&enc.pk, 2);
    msgpack_pack_int(&enc.pk, 0);
    beam_pack_bin(&enc.pk, bin300, sizeof bin300);
    beam_pack_key(&enc.pk, "n");
    msgpack_pack_array(&enc.pk, 20); /* array16 */
    for (int i = 0; i < 20; i++)
        msgpack_pack_int(&enc.pk, i * 1000);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    stream_mark(s, &enc);

    /* 2: reply error [1, 9, {code, message}, nil] */
    beam_enc_reply_error(&enc, 9, "timeout", "Get timed out");
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    stream_mark(s, &enc);

    /* 3: push [2, "log", {"stream": 2, "text": str300, 17 more keys}] (map16) */
    beam_enc_push(&enc, "log", 19);
    beam_pack_key(&enc.pk, "stream");
    msgpack_pack_int(&enc.pk, 2);
    beam_pack_key(&enc.pk, "text");
    beam_pack_str(&enc.pk, str300);
    for (int i = 0; i < 17; i++) {
        char key[8];
        snprintf(key, sizeof key, "k%02d", i);
        beam_pack_key(&enc.pk, key);
        msgpack_pack_int(&enc.pk, -i);
    }
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    stream_mark(s, &enc);

    /* 4: the smallest request: [0, 0, "", {}] */
    beam_enc_request(&enc, 0, "", 0);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    stream_mark(s, &enc);

    s->buf = beam_enc_take(&enc, &s->len);
    beam_enc_destroy(&enc);
    assert_non_null(s->buf);
}

static void stream_free(stream_t *s)
{
    free(s->buf);
    s->buf = NULL;
}

static void expect_str(const msgpack_object *map, const char *key, const char *want)
{
    const char *s;
    uint32_t n;
    assert_int_equal(beam_field_str(map, key, &s, &n), 0);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(s, want, n);
}

/* Checks frame i of stream_make's stream, parsed. */
static void check_frame(size_t i, const char *frame, size_t len)
{
    beam_limits_t lim;
    beam_msg_t msg;
    char err[160] = "";
    beam_limits_default(&lim);
    if (beam_msg_parse(frame, len, &lim, &msg, err, sizeof err) != 0)
        fail_msg("frame %zu does not parse: %s", i, err);
    const msgpack_object *p = &msg.params;
    const char *b;
    uint32_t n;
    int64_t v;
    double d;
    int flag;
    const msgpack_object_array *a;
    const msgpack_object_map *m;
    switch (i) {
    case 0:
        assert_int_equal(msg.type, BEAM_MSG_REQUEST);
        assert_int_equal(msg.msgid, 7);
        assert_true(beam_str_eq(msg.op, msg.op_len, "put"));
        assert_int_equal(p->via.map.size, 10);
        expect_str(p, "s", "hello");
        assert_int_equal(beam_field_bin(p, "b", &b, &n), 0);
        assert_int_equal(n, 3);
        assert_memory_equal(b, bin3, 3);
        assert_int_equal(beam_field_map(p, "m", &m), 0);
        assert_int_equal(m->size, 1);
        assert_true(beam_str_eq(m->ptr[0].key.via.str.ptr, m->ptr[0].key.via.str.size, "inner"));
        a = &m->ptr[0].val.via.array;
        assert_int_equal(m->ptr[0].val.type, MSGPACK_OBJECT_ARRAY);
        assert_int_equal(a->size, 6);
        assert_int_equal(a->ptr[0].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
        assert_int_equal(a->ptr[0].via.u64, 1);
        assert_int_equal(a->ptr[1].type, MSGPACK_OBJECT_NEGATIVE_INTEGER);
        assert_int_equal(a->ptr[1].via.i64, -2);
        assert_int_equal(a->ptr[2].type, MSGPACK_OBJECT_FLOAT64);
        assert_true(a->ptr[2].via.f64 == 3.5);
        assert_int_equal(a->ptr[3].type, MSGPACK_OBJECT_NIL);
        assert_int_equal(a->ptr[4].type, MSGPACK_OBJECT_BOOLEAN);
        assert_true(a->ptr[4].via.boolean);
        assert_int_equal(a->ptr[5].type, MSGPACK_OBJECT_BOOLEAN);
        assert_false(a->ptr[5].via.boolean);
        assert_int_equal(beam_field_int(p, "neg", &v), 0);
        assert_true(v == -100000);
        assert_int_equal(beam_field_int(p, "neg64", &v), 0);
        assert_true(v == INT64_MIN);
        assert_int_equal(beam_field_int(p, "big", &v), 0);
        assert_true(v == (INT64_C(1) << 40));
        assert_int_equal(beam_field_float(p, "f", &d), 0);
        assert_true(d == -1.25);
        assert_int_equal(beam_field_float(p, "f32", &d), 0);
        assert_true(d == 0.5);
        assert_int_equal(beam_field_int(p, "nil", &v), -ENOENT);
        assert_int_equal(beam_field_bool(p, "t", &flag), 0);
        assert_int_equal(flag, 1);
        break;
    case 1:
        assert_int_equal(msg.type, BEAM_MSG_REPLY);
        assert_int_equal(msg.msgid, 8);
        assert_int_equal(msg.error.type, MSGPACK_OBJECT_NIL);
        assert_int_equal(beam_field_array(p, "values", &a), 0);
        assert_int_equal(a->size, 1);
        assert_int_equal(a->ptr[0].via.array.size, 2);
        assert_int_equal(a->ptr[0].via.array.ptr[1].type, MSGPACK_OBJECT_BIN);
        assert_int_equal(a->ptr[0].via.array.ptr[1].via.bin.size, 300);
        assert_memory_equal(a->ptr[0].via.array.ptr[1].via.bin.ptr, bin300, 300);
        assert_int_equal(beam_field_array(p, "n", &a), 0);
        assert_int_equal(a->size, 20);
        assert_int_equal(a->ptr[19].via.u64, 19000);
        break;
    case 2:
        assert_int_equal(msg.type, BEAM_MSG_REPLY);
        assert_int_equal(msg.msgid, 9);
        assert_int_equal(msg.error.type, MSGPACK_OBJECT_MAP);
        expect_str(&msg.error, "code", "timeout");
        expect_str(&msg.error, "message", "Get timed out");
        assert_int_equal(msg.params.type, MSGPACK_OBJECT_NIL);
        break;
    case 3:
        assert_int_equal(msg.type, BEAM_MSG_PUSH);
        assert_true(beam_str_eq(msg.op, msg.op_len, "log"));
        assert_int_equal(p->via.map.size, 19);
        assert_int_equal(beam_field_int(p, "stream", &v), 0);
        assert_int_equal(v, 2);
        expect_str(p, "text", str300);
        assert_int_equal(beam_field_int(p, "k16", &v), 0);
        assert_true(v == -16);
        break;
    case 4:
        assert_int_equal(msg.type, BEAM_MSG_REQUEST);
        assert_int_equal(msg.msgid, 0);
        assert_int_equal(msg.op_len, 0);
        assert_int_equal(p->type, MSGPACK_OBJECT_MAP);
        assert_int_equal(p->via.map.size, 0);
        break;
    default:
        fail_msg("unexpected frame %zu", i);
    }
    beam_msg_destroy(&msg);
}

/* Takes every whole frame the decoder has, checking each against the stream. */
static void drain(beam_decoder_t *dec, const stream_t *s, size_t *got)
{
    const char *frame;
    size_t len;
    int rc;
    while ((rc = beam_decoder_next(dec, &frame, &len)) == 1) {
        assert_true(*got < s->nframes);
        assert_int_equal(len, s->body_len[*got]);
        assert_memory_equal(frame, s->buf + s->body_off[*got], len);
        check_frame(*got, frame, len);
        (*got)++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(dec->failed, 0);
}

/* --- the decoder --- */

static void test_stream_headers(void **state)
{
    stream_t s;
    stream_make(&s);
    assert_int_equal(s.nframes, 5);
    /* every header is the big-endian length of the body that follows it */
    size_t off = 0;
    for (size_t i = 0; i < s.nframes; i++) {
        const unsigned char *h = (const unsigned char *)s.buf + off;
        size_t n = ((size_t)h[0] << 24) | ((size_t)h[1] << 16) | ((size_t)h[2] << 8) | h[3];
        assert_int_equal(off + BEAM_FRAME_HEADER, s.body_off[i]);
        assert_int_equal(n, s.body_len[i]);
        off += BEAM_FRAME_HEADER + n;
    }
    assert_int_equal(off, s.len);
    stream_free(&s);
}

static void test_decode_whole(void **state)
{
    stream_t s;
    beam_limits_t lim;
    beam_decoder_t dec;
    size_t got = 0;
    stream_make(&s);
    beam_limits_default(&lim);
    beam_decoder_init(&dec, &lim);
    assert_int_equal(beam_decoder_feed(&dec, s.buf, s.len), 0);
    drain(&dec, &s, &got);
    assert_int_equal(got, s.nframes);
    /* the decoder is reusable once drained */
    got = 0;
    assert_int_equal(beam_decoder_feed(&dec, s.buf, s.len), 0);
    drain(&dec, &s, &got);
    assert_int_equal(got, s.nframes);
    beam_decoder_destroy(&dec);
    stream_free(&s);
}

static void test_decode_byte_by_byte(void **state)
{
    stream_t s;
    beam_limits_t lim;
    beam_decoder_t dec;
    size_t got = 0;
    stream_make(&s);
    beam_limits_default(&lim);
    beam_decoder_init(&dec, &lim);
    for (size_t i = 0; i < s.len; i++) {
        assert_int_equal(beam_decoder_feed(&dec, s.buf + i, 1), 0);
        size_t before = got;
        drain(&dec, &s, &got);
        /* a frame comes out exactly when its last byte arrives */
        size_t want = 0;
        for (size_t f = 0; f < s.nframes; f++)
            want += s.body_off[f] + s.body_len[f] <= i + 1;
        assert_int_equal(got, want);
        assert_true(got - before <= 1);
    }
    assert_int_equal(got, s.nframes);
    beam_decoder_destroy(&dec);
    stream_free(&s);
}

static void test_decode_split_everywhere(void **state)
{
    stream_t s;
    beam_limits_t lim;
    stream_make(&s);
    beam_limits_default(&lim);
    for (size_t k = 0; k <= s.len; k++) {
        beam_decoder_t dec;
        size_t got = 0;
        beam_decoder_init(&dec, &lim);
        assert_int_equal(beam_decoder_feed(&dec, s.buf, k), 0);
        drain(&dec, &s, &got);
        assert_int_equal(beam_decoder_feed(&dec, s.buf + k, s.len - k), 0);
        drain(&dec, &s, &got);
        assert_int_equal(got, s.nframes);
        beam_decoder_destroy(&dec);
    }
    stream_free(&s);
}

/* Three pieces at (k, k+step) for several step sizes, so the second feed lands
 * both inside headers and inside bodies, with the buffer compacted between. */
static void test_decode_split_three(void **state)
{
    stream_t s;
    beam_limits_t lim;
    static const size_t steps[] = {1, 2, 3, 4, 5, 7, 64, 333};
    stream_make(&s);
    beam_limits_default(&lim);
    for (size_t st = 0; st < sizeof steps / sizeof steps[0]; st++)
        for (size_t k = 0; k + steps[st] <= s.len; k++) {
            beam_decoder_t dec;
            size_t got = 0, j = k + steps[st];
            beam_decoder_init(&dec, &lim);
            assert_int_equal(beam_decoder_feed(&dec, s.buf, k), 0);
            drain(&dec, &s, &got);
            assert_int_equal(beam_decoder_feed(&dec, s.buf + k, j - k), 0);
            drain(&dec, &s, &got);
            assert_int_equal(beam_decoder_feed(&dec, s.buf + j, s.len - j), 0);
            drain(&dec, &s, &got);
            assert_int_equal(got, s.nframes);
            beam_decoder_destroy(&dec);
        }
    stream_free(&s);
}

/* Many copies of the stream fed in 4000-byte pieces: the buffer grows past its
 * first 4096 bytes and is compacted while frames straddle the pieces. */
static void test_decode_many(void **state)
{
    stream_t s;
    beam_limits_t lim;
    beam_decoder_t dec;
    stream_make(&s);
    beam_limits_default(&lim);
    size_t copies = 40, total = copies * s.len;
    char *big = malloc(total);
    assert_non_null(big);
    for (size_t c = 0; c < copies; c++)
        memcpy(big + c * s.len, s.buf, s.len);
    beam_decoder_init(&dec, &lim);
    size_t frames = 0;
    for (size_t off = 0; off < total; off += 4000) {
        size_t n = total - off < 4000 ? total - off : 4000;
        assert_int_equal(beam_decoder_feed(&dec, big + off, n), 0);
        const char *frame;
        size_t len;
        int rc;
        while ((rc = beam_decoder_next(&dec, &frame, &len)) == 1) {
            size_t i = frames % s.nframes;
            assert_int_equal(len, s.body_len[i]);
            assert_memory_equal(frame, s.buf + s.body_off[i], len);
            frames++;
        }
        assert_int_equal(rc, 0);
    }
    assert_int_equal(frames, copies * s.nframes);
    assert_true(dec.cap < 2 * 4096 + s.len * 2);
    beam_decoder_destroy(&dec);
    free(big);
    stream_free(&s);
}

static void test_decode_truncated(void **state)
{
    stream_t s;
    beam_limits_t lim;
    stream_make(&s);
    beam_limits_default(&lim);
    for (size_t t = 0; t < s.len; t++) {
        beam_decoder_t dec;
        size_t got = 0, want = 0;
        beam_decoder_init(&dec, &lim);
        assert_int_equal(beam_decoder_feed(&dec, s.buf, t), 0);
        drain(&dec, &s, &got); /* asserts next ends with 0, not -1 */
        for (size_t f = 0; f < s.nframes; f++)
            want += s.body_off[f] + s.body_len[f] <= t;
        assert_int_equal(got, want);
        assert_true(got < s.nframes);
        beam_decoder_destroy(&dec);
    }
    stream_free(&s);
}

static void test_decode_empty_feed(void **state)
{
    beam_limits_t lim;
    beam_decoder_t dec;
    const char *frame;
    size_t len;
    beam_limits_default(&lim);
    beam_decoder_init(&dec, &lim);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 0);
    assert_int_equal(beam_decoder_feed(&dec, "", 0), 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 0);
    assert_int_equal(beam_decoder_feed(&dec, "\0\0", 2), 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 0);
    assert_int_equal(dec.failed, 0);
    beam_decoder_destroy(&dec);
}

static void test_decode_zero_length(void **state)
{
    beam_limits_t lim;
    beam_decoder_t dec;
    const char *frame;
    size_t len;
    beam_limits_default(&lim);
    beam_decoder_init(&dec, &lim);
    assert_int_equal(beam_decoder_feed(&dec, "\0\0\0\0\x01", 5), 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), -1);
    assert_int_equal(dec.failed, 1);
    assert_non_null(strstr(dec.err, "frame length 0 is outside 1.."));
    /* sticky: no frame and no more input accepted */
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), -1);
    assert_int_equal(beam_decoder_feed(&dec, "\0\0\0\x01\x01", 5), -1);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), -1);
    beam_decoder_destroy(&dec);
}

static void test_decode_over_max_frame(void **state)
{
    beam_limits_t lim;
    beam_decoder_t dec;
    const char *frame;
    size_t len;
    beam_limits_default(&lim);
    lim.max_frame = 16;

    /* exactly max_frame is a frame */
    char ok[4 + 16];
    memcpy(ok, "\0\0\0\x10", 4);
    ok[4] = (char)0xc4; /* bin8 of 14: 2 + 14 = 16 */
    ok[5] = 14;
    memset(ok + 6, 'x', 14);
    beam_decoder_init(&dec, &lim);
    assert_int_equal(beam_decoder_feed(&dec, ok, sizeof ok), 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 1);
    assert_int_equal(len, 16);
    assert_int_equal(beam_msgpack_check(frame, len, &lim, NULL, 0), 0);
    /* one more is refused as soon as the header is in, before any body */
    assert_int_equal(beam_decoder_feed(&dec, "\0\0\0\x11", 4), 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), -1);
    assert_non_null(strstr(dec.err, "frame length 17 is outside 1..16"));
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), -1);
    assert_int_equal(beam_decoder_feed(&dec, ok, sizeof ok), -1);
    beam_decoder_destroy(&dec);

    /* the largest header with default limits */
    beam_limits_default(&lim);
    beam_decoder_init(&dec, &lim);
    assert_int_equal(beam_decoder_feed(&dec, "\xff\xff\xff\xff", 4), 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), -1);
    assert_non_null(strstr(dec.err, "frame length 4294967295 is outside 1..268435456"));
    beam_decoder_destroy(&dec);
}

/* A bad header after good frames: the good ones come out first. */
static void test_decode_error_after_frames(void **state)
{
    stream_t s;
    beam_limits_t lim;
    beam_decoder_t dec;
    const char *frame;
    size_t len, got = 0;
    stream_make(&s);
    beam_limits_default(&lim);
    beam_decoder_init(&dec, &lim);
    assert_int_equal(beam_decoder_feed(&dec, s.buf, s.len), 0);
    assert_int_equal(beam_decoder_feed(&dec, "\0\0\0\0", 4), 0);
    while (beam_decoder_next(&dec, &frame, &len) == 1) {
        assert_int_equal(len, s.body_len[got]);
        got++;
    }
    assert_int_equal(got, s.nframes);
    assert_int_equal(dec.failed, 1);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), -1);
    beam_decoder_destroy(&dec);
    stream_free(&s);
}

/* The decoder does not judge bodies: garbage comes out and parse refuses it. */
static void test_decode_garbage_body(void **state)
{
    beam_limits_t lim;
    beam_decoder_t dec;
    beam_msg_t msg;
    const char *frame;
    size_t len;
    char err[160] = "";
    beam_limits_default(&lim);
    beam_decoder_init(&dec, &lim);
    assert_int_equal(beam_decoder_feed(&dec, "\0\0\0\x02\xc1\xc1", 6), 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &len), 1);
    assert_int_equal(len, 2);
    assert_int_equal(beam_msg_parse(frame, len, &lim, &msg, err, sizeof err), -1);
    assert_non_null(strstr(err, "0xc1"));
    assert_int_equal(msg.has_zone, 0);
    beam_decoder_destroy(&dec);
}

/* --- beam_msgpack_check --- */

typedef struct check_case_s {
    const char *bytes;
    size_t len;
    const char *err; /* NULL: must pass */
} check_case_t;

#define C(lit, e) {lit, sizeof lit - 1, e}

static void run_cases(const check_case_t *cases, size_t n, const beam_limits_t *lim)
{
    for (size_t i = 0; i < n; i++) {
        char err[160];
        strcpy(err, "untouched");
        int rc = beam_msgpack_check(cases[i].bytes, cases[i].len, lim, err, sizeof err);
        if (cases[i].err == NULL) {
            if (rc != 0)
                fail_msg("case %zu should pass, got: %s", i, err);
        } else {
            if (rc != -1)
                fail_msg("case %zu should fail with '%s'", i, cases[i].err);
            if (!strstr(err, cases[i].err))
                fail_msg("case %zu: wanted '%s' in '%s'", i, cases[i].err, err);
        }
    }
}

static void test_check_valid(void **state)
{
    beam_limits_t lim;
    beam_limits_default(&lim);
    static const check_case_t cases[] = {
        C("\x00", NULL), C("\x7f", NULL), C("\xe0", NULL), C("\xff", NULL),
        C("\xc0", NULL), C("\xc2", NULL), C("\xc3", NULL),
        C("\xcc\xff", NULL), C("\xcd\xff\xff", NULL), C("\xce\0\0\0\0", NULL),
        C("\xcf\0\0\0\0\0\0\0\0", NULL), C("\xd0\x80", NULL), C("\xd1\0\0", NULL),
        C("\xd2\0\0\0\0", NULL), C("\xd3\0\0\0\0\0\0\0\0", NULL),
        C("\xca\0\0\0\0", NULL), C("\xcb\0\0\0\0\0\0\0\0", NULL),
        C("\xa0", NULL), C("\xa3" "abc", NULL), C("\xd9\x02" "ab", NULL),
        C("\xda\0\x01" "a", NULL), C("\xdb\0\0\0\x01" "a", NULL),
        C("\xc4\0", NULL), C("\xc4\x01" "a", NULL), C("\xc5\0\x02" "ab", NULL),
        C("\xc6\0\0\0\x01" "a", NULL),
        C("\x90", NULL), C("\x80", NULL), C("\x91\x90", NULL), C("\x92\x80\x90", NULL),
        C("\xdc\0\0", NULL), C("\xdc\0\x02\x01\x02", NULL), C("\xdd\0\0\0\x01\xc0", NULL),
        C("\xde\0\0", NULL), C("\xde\0\x01\xa1k\x01", NULL), C("\xdf\0\0\0\x01\x01\x02", NULL),
        C("\x94\x00\x01\xa3get\x81\xa1k\x92\xc3\xcb\0\0\0\0\0\0\0\0", NULL),
    };
    run_cases(cases, sizeof cases / sizeof cases[0], &lim);
}

static void test_check_garbage(void **state)
{
    beam_limits_t lim;
    beam_limits_default(&lim);
    static const check_case_t cases[] = {
        {"", 0, "empty frame"},
        C("\xc1", "byte 0xc1 is never used in msgpack (at 0)"),
        C("\x92\x01\xc1", "byte 0xc1 is never used in msgpack (at 2)"),
        C("\x01\x02", "1 stray bytes after the msgpack value"),
        C("\x90\x90\x90", "2 stray bytes after the msgpack value"),
        C("\xa1" "ab", "1 stray bytes"),
        C("\x92\x01\x02\x03", "1 stray bytes"),
        /* every ext type: fixext 1/2/4/8/16, ext 8/16/32 */
        C("\xd4\x01\x00", "msgpack ext types are not accepted (at 0)"),
        C("\xd5\x01\x00\x00", "ext types"),
        C("\xd6\x01\x00\x00\x00\x00", "ext types"),
        C("\xd7\x01\0\0\0\0\0\0\0\0", "ext types"),
        C("\xd8\x01\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", "ext types"),
        C("\xc7\x01\x01\x00", "ext types"),
        C("\xc8\0\x01\x01\x00", "ext types"),
        C("\xc9\0\0\0\x01\x01\x00", "ext types"),
        C("\x91\xd6\xff\0\0\0\0", "msgpack ext types are not accepted (at 1)"),
        /* counts larger than the bytes that remain */
        C("\xdd\xff\xff\xff\xff", "container of 4294967295 elements cannot fit in the 0 bytes left"),
        C("\xdf\xff\xff\xff\xff", "container of 4294967295 elements cannot fit"),
        C("\xdc\xff\xff\x01\x02", "container of 65535 elements cannot fit in the 2 bytes left"),
        C("\xde\x00\x02\x01\x02\x03", "container of 2 elements cannot fit in the 3 bytes left"),
        C("\x81\x01", "container of 1 elements cannot fit in the 1 bytes left"),
        C("\x9f\x01\x01", "cannot fit"),
        C("\x91\xdd\x7f\xff\xff\xff", "cannot fit"),
        /* a body that needs more bytes than the frame has */
        C("\x92\x92\x01\x01", "truncated msgpack value at byte 4"),
        C("\xa3" "ab", "truncated msgpack value at byte 1"),
        C("\xd9\x05" "abc", "truncated msgpack value at byte 2"),
        C("\xc4\x05" "abc", "truncated msgpack value"),
        C("\xc6\xff\xff\xff\xf0" "ab", "truncated msgpack value at byte 5"),
    };
    run_cases(cases, sizeof cases / sizeof cases[0], &lim);
}

/* A header cut short for every sized type: the length field or the fixed
 * payload is missing. */
static void test_check_truncated_headers(void **state)
{
    beam_limits_t lim;
    beam_limits_default(&lim);
    static const check_case_t cases[] = {
        C("\xd9", "truncated msgpack header at byte 1"),
        C("\xda\x00", "truncated msgpack header at byte 1"),
        C("\xdb\x00\x00\x00", "truncated msgpack header at byte 1"),
        C("\xc4", "truncated msgpack header"),
        C("\xc5\x00", "truncated msgpack header"),
        C("\xc6\x00\x00\x00", "truncated msgpack header"),
        C("\xdc\x00", "truncated msgpack header"),
        C("\xdd\x00\x00\x00", "truncated msgpack header"),
        C("\xde\x00", "truncated msgpack header"),
        C("\xdf\x00\x00", "truncated msgpack header"),
        C("\x91\xdf\x00\x00", "truncated msgpack header at byte 2"),
        C("\xcc", "truncated msgpack value at byte 1"),
        C("\xcd\x00", "truncated msgpack value"),
        C("\xce\x00\x00\x00", "truncated msgpack value"),
        C("\xcf\x00\x00\x00\x00\x00\x00\x00", "truncated msgpack value"),
        C("\xd0", "truncated msgpack value"),
        C("\xd1\x00", "truncated msgpack value"),
        C("\xd2\x00\x00\x00", "truncated msgpack value"),
        C("\xd3\x00\x00\x00\x00\x00\x00\x00", "truncated msgpack value"),
        C("\xca\x00\x00\x00", "truncated msgpack value"),
        C("\xcb\x00\x00\x00\x00\x00\x00\x00", "truncated msgpack value"),
        C("\x91\xcb\x00", "truncated msgpack value at byte 2"),
    };
    run_cases(cases, sizeof cases / sizeof cases[0], &lim);
}

/* n nested one-element arrays around inner (a byte). */
static size_t nested(char *buf, size_t n, char inner)
{
    memset(buf, 0x91, n);
    buf[n] = inner;
    return n + 1;
}

static void test_check_depth(void **state)
{
    beam_limits_t lim;
    char buf[128], err[160];
    beam_limits_default(&lim);
    size_t n = nested(buf, 32, 0x01);
    assert_int_equal(beam_msgpack_check(buf, n, &lim, err, sizeof err), 0);
    n = nested(buf, 33, 0x01);
    assert_int_equal(beam_msgpack_check(buf, n, &lim, err, sizeof err), -1);
    assert_string_equal(err, "nesting deeper than 32");
    n = nested(buf, 100, 0x01);
    assert_int_equal(beam_msgpack_check(buf, n, &lim, err, sizeof err), -1);
    assert_string_equal(err, "nesting deeper than 32");

    lim.max_depth = 3;
    assert_int_equal(beam_msgpack_check("\x91\x81\x01\x91\x01", 5, &lim, err, sizeof err), 0);
    assert_int_equal(beam_msgpack_check("\x91\x81\x01\x91\x91\x01", 6, &lim, err, sizeof err), -1);
    assert_string_equal(err, "nesting deeper than 3");
    /* depth is nesting, not a count: siblings at depth 3 are fine */
    assert_int_equal(beam_msgpack_check("\x92\x91\x91\x01\x91\x91\x01", 7, &lim, err, sizeof err), 0);

    /* the walker's own stack is bounded whatever the limit says */
    lim.max_depth = 1000;
    n = nested(buf, 65, 0x01);
    assert_int_equal(beam_msgpack_check(buf, n, &lim, err, sizeof err), -1);
    assert_non_null(strstr(err, "nesting deeper than "));
    /* empty containers are values, not nesting, below the limit */
    lim.max_depth = 3;
    assert_int_equal(beam_msgpack_check("\x91\x91\x90", 3, &lim, err, sizeof err), 0);
    assert_int_equal(beam_msgpack_check("\x91\x91\x80", 3, &lim, err, sizeof err), 0);
}

static void test_check_items(void **state)
{
    beam_limits_t lim;
    char err[160];
    beam_limits_default(&lim);
    lim.max_items = 3;
    assert_int_equal(beam_msgpack_check("\x93\x01\x02\x03", 4, &lim, err, sizeof err), 0);
    assert_int_equal(beam_msgpack_check("\x94\x01\x02\x03\x04", 5, &lim, err, sizeof err), -1);
    assert_string_equal(err, "more than 3 elements in one frame");
    /* items add up across containers: 2 + 1 + 1 */
    assert_int_equal(beam_msgpack_check("\x92\x91\x01\x91\x01", 5, &lim, err, sizeof err), -1);
    assert_string_equal(err, "more than 3 elements in one frame");
    /* a map counts its pairs: 1 + 2 */
    assert_int_equal(beam_msgpack_check("\x91\x82\x01\x02\x03\x04", 6, &lim, err, sizeof err), 0);
    assert_int_equal(beam_msgpack_check("\x92\x82\x01\x02\x03\x04\x01", 7, &lim, err, sizeof err), -1);

    /* a large announced count is refused before its elements are walked */
    lim.max_items = 1000;
    char *big = calloc(1, 5 + 2000);
    assert_non_null(big);
    memcpy(big, "\xdd\x00\x00\x07\xd0", 5); /* array32 of 2000 */
    assert_int_equal(beam_msgpack_check(big, 5 + 2000, &lim, err, sizeof err), -1);
    assert_string_equal(err, "more than 1000 elements in one frame");
    lim.max_items = 2000;
    assert_int_equal(beam_msgpack_check(big, 5 + 2000, &lim, err, sizeof err), 0);
    free(big);
}

static void test_check_str_limit(void **state)
{
    beam_limits_t lim;
    char err[160];
    beam_limits_default(&lim);
    lim.max_str = 3;
    assert_int_equal(beam_msgpack_check("\xa3" "abc", 4, &lim, err, sizeof err), 0);
    assert_int_equal(beam_msgpack_check("\xa4" "abcd", 5, &lim, err, sizeof err), -1);
    assert_string_equal(err, "str of 4 bytes is over the limit of 3");
    assert_int_equal(beam_msgpack_check("\xd9\x04" "abcd", 6, &lim, err, sizeof err), -1);
    assert_string_equal(err, "str of 4 bytes is over the limit of 3");
    /* the limit is checked on the header, before the bytes are there */
    assert_int_equal(beam_msgpack_check("\xdb\x7f\xff\xff\xff", 5, &lim, err, sizeof err), -1);
    assert_string_equal(err, "str of 2147483647 bytes is over the limit of 3");
    /* bins are not strs */
    assert_int_equal(beam_msgpack_check("\xc4\x05" "abcde", 7, &lim, err, sizeof err), 0);
    /* map keys are strs too */
    assert_int_equal(beam_msgpack_check("\x81\xa4" "abcd\x01", 7, &lim, err, sizeof err), -1);
}

static void test_check_null_err(void **state)
{
    beam_limits_t lim;
    beam_limits_default(&lim);
    assert_int_equal(beam_msgpack_check("\xc1", 1, &lim, NULL, 0), -1);
    char err[4] = "xyz";
    assert_int_equal(beam_msgpack_check("\xc1", 1, &lim, err, 0), -1);
    assert_string_equal(err, "xyz");
    /* a short buffer gets a truncated, terminated message */
    assert_int_equal(beam_msgpack_check("\xc1", 1, &lim, err, sizeof err), -1);
    assert_string_equal(err, "byt");
}

/* --- the walker and msgpack-c agree on depth ---
 *
 * msgpack-c's unpacker has a fixed stack of MSGPACK_EMBED_STACK_SIZE (32)
 * containers and refuses a 33rd even when it is empty. The walker once
 * counted only non-empty containers and allowed up to min(max_depth, 64), so
 * frames it passed could fail in msgpack_unpack with "msgpack could not be
 * unpacked" instead of the limit's message. These stay as regression tests. */

/* [0, 1, "op", {"k": <n nested arrays around inner>}] */
static size_t deep_request(char *buf, size_t n, char inner)
{
    memcpy(buf, "\x94\x00\x01\xa2op\x81\xa1k", 9);
    return 9 + nested(buf + 9, n, inner);
}

static void test_depth_empty_innermost(void **state)
{
    beam_limits_t lim;
    beam_msg_t msg;
    char buf[128], err[160] = "";
    beam_limits_default(&lim);
    /* envelope + params + 30 arrays = 32 open containers, then an empty one */
    size_t n = deep_request(buf, 30, (char)0x90);
    int checked = beam_msgpack_check(buf, n, &lim, err, sizeof err);
    int parsed = beam_msg_parse(buf, n, &lim, &msg, err, sizeof err);
    if (parsed == 0)
        beam_msg_destroy(&msg);
    /* whatever the walker passes, the parser must parse */
    if (checked == 0 && parsed != 0)
        fail_msg("beam_msgpack_check passed it but beam_msg_parse said: %s", err);
    assert_int_equal(checked, -1);
}

static void test_depth_limit_over_32(void **state)
{
    beam_limits_t lim;
    beam_msg_t msg;
    char buf[128], err[160] = "";
    beam_limits_default(&lim);
    lim.max_depth = 40; /* beamd --max-depth 40 */
    size_t n = deep_request(buf, 34, 0x01); /* 36 deep */
    int checked = beam_msgpack_check(buf, n, &lim, err, sizeof err);
    int parsed = beam_msg_parse(buf, n, &lim, &msg, err, sizeof err);
    if (parsed == 0)
        beam_msg_destroy(&msg);
    if (checked == 0 && parsed != 0)
        fail_msg("beam_msgpack_check passed it but beam_msg_parse said: %s", err);
}

/* --- beam_msg_parse --- */

/* Packs a value with a plain msgpack packer (no frame header). */
typedef struct raw_s {
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
} raw_t;

static void raw_init(raw_t *r)
{
    msgpack_sbuffer_init(&r->sbuf);
    msgpack_packer_init(&r->pk, &r->sbuf, msgpack_sbuffer_write);
}

static void raw_destroy(raw_t *r)
{
    msgpack_sbuffer_destroy(&r->sbuf);
}

static void expect_parse_fail(raw_t *r, const char *want)
{
    beam_limits_t lim;
    beam_msg_t msg;
    char err[160] = "";
    beam_limits_default(&lim);
    assert_int_equal(beam_msg_parse(r->sbuf.data, r->sbuf.size, &lim, &msg, err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("wanted '%s' in '%s'", want, err);
    assert_int_equal(msg.has_zone, 0);
    beam_msg_destroy(&msg); /* harmless after a failure */
    raw_destroy(r);
}

static void test_parse_not_array(void **state)
{
    raw_t r;
    const char *want = "a message is an array starting with its kind (0, 1 or 2)";
    raw_init(&r);
    msgpack_pack_map(&r.pk, 0);
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_int(&r.pk, 0);
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_array(&r.pk, 0);
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_array(&r.pk, 4);
    beam_pack_str(&r.pk, "0");
    msgpack_pack_int(&r.pk, 1);
    beam_pack_str(&r.pk, "op");
    msgpack_pack_map(&r.pk, 0);
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_array(&r.pk, 3);
    msgpack_pack_int(&r.pk, -1);
    beam_pack_str(&r.pk, "op");
    msgpack_pack_map(&r.pk, 0);
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_array(&r.pk, 1);
    msgpack_pack_double(&r.pk, 0.0);
    expect_parse_fail(&r, want);
}

static void test_parse_unknown_kind(void **state)
{
    raw_t r;
    raw_init(&r);
    msgpack_pack_array(&r.pk, 3);
    msgpack_pack_int(&r.pk, 3);
    beam_pack_str(&r.pk, "op");
    msgpack_pack_map(&r.pk, 0);
    expect_parse_fail(&r, "unknown message kind 3");
    raw_init(&r);
    msgpack_pack_array(&r.pk, 1);
    msgpack_pack_uint64(&r.pk, UINT64_C(1) << 32); /* not truncated to 0 */
    expect_parse_fail(&r, "unknown message kind 4294967296");
}

static void test_parse_bad_request(void **state)
{
    const char *want = "a request is [0, msgid uint, op str, params map]";
    raw_t r;
    /* op not a str */
    raw_init(&r);
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_int(&r.pk, 0);
    msgpack_pack_int(&r.pk, 1);
    msgpack_pack_int(&r.pk, 5);
    msgpack_pack_map(&r.pk, 0);
    expect_parse_fail(&r, want);
    /* op a bin */
    raw_init(&r);
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_int(&r.pk, 0);
    msgpack_pack_int(&r.pk, 1);
    beam_pack_bin(&r.pk, "get", 3);
    msgpack_pack_map(&r.pk, 0);
    expect_parse_fail(&r, want);
    /* params not a map */
    raw_init(&r);
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_int(&r.pk, 0);
    msgpack_pack_int(&r.pk, 1);
    beam_pack_str(&r.pk, "get");
    msgpack_pack_array(&r.pk, 0);
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_int(&r.pk, 0);
    msgpack_pack_int(&r.pk, 1);
    beam_pack_str(&r.pk, "get");
    msgpack_pack_nil(&r.pk);
    expect_parse_fail(&r, want);
    /* msgid negative, msgid a str */
    raw_init(&r);
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_int(&r.pk, 0);
    msgpack_pack_int(&r.pk, -1);
    beam_pack_str(&r.pk, "get");
    msgpack_pack_map(&r.pk, 0);
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_int(&r.pk, 0);
    beam_pack_str(&r.pk, "1");
    beam_pack_str(&r.pk, "get");
    msgpack_pack_map(&r.pk, 0);
    expect_parse_fail(&r, want);
    /* wrong lengths */
    raw_init(&r);
    msgpack_pack_array(&r.pk, 3);
    msgpack_pack_int(&r.pk, 0);
    msgpack_pack_int(&r.pk, 1);
    beam_pack_str(&r.pk, "get");
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_array(&r.pk, 5);
    msgpack_pack_int(&r.pk, 0);
    msgpack_pack_int(&r.pk, 1);
    beam_pack_str(&r.pk, "get");
    msgpack_pack_map(&r.pk, 0);
    msgpack_pack_nil(&r.pk);
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_array(&r.pk, 1);
    msgpack_pack_int(&r.pk, 0);
    expect_parse_fail(&r, want);
}

static void test_parse_bad_reply(void **state)
{
    const char *want = "a reply is [1, msgid uint, error nil|map, result]";
    raw_t r;
    raw_init(&r);
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_int(&r.pk, 1);
    msgpack_pack_int(&r.pk, 1);
    beam_pack_str(&r.pk, "error");
    msgpack_pack_nil(&r.pk);
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_array(&r.pk, 3);
    msgpack_pack_int(&r.pk, 1);
    msgpack_pack_int(&r.pk, 1);
    msgpack_pack_nil(&r.pk);
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_array(&r.pk, 5);
    msgpack_pack_int(&r.pk, 1);
    msgpack_pack_int(&r.pk, 1);
    msgpack_pack_nil(&r.pk);
    msgpack_pack_nil(&r.pk);
    msgpack_pack_nil(&r.pk);
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_int(&r.pk, 1);
    msgpack_pack_double(&r.pk, 1.0);
    msgpack_pack_nil(&r.pk);
    msgpack_pack_nil(&r.pk);
    expect_parse_fail(&r, want);
}

static void test_parse_bad_push(void **state)
{
    const char *want = "a push is [2, op str, params map]";
    raw_t r;
    raw_init(&r);
    msgpack_pack_array(&r.pk, 3);
    msgpack_pack_int(&r.pk, 2);
    msgpack_pack_int(&r.pk, 7);
    msgpack_pack_map(&r.pk, 0);
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_array(&r.pk, 3);
    msgpack_pack_int(&r.pk, 2);
    beam_pack_str(&r.pk, "log");
    msgpack_pack_array(&r.pk, 0);
    expect_parse_fail(&r, want);
    /* one element too many */
    raw_init(&r);
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_int(&r.pk, 2);
    beam_pack_str(&r.pk, "log");
    msgpack_pack_map(&r.pk, 0);
    msgpack_pack_nil(&r.pk);
    expect_parse_fail(&r, want);
    raw_init(&r);
    msgpack_pack_array(&r.pk, 2);
    msgpack_pack_int(&r.pk, 2);
    beam_pack_str(&r.pk, "log");
    expect_parse_fail(&r, want);
    /* a push has no msgid: the request shape is wrong for it */
    raw_init(&r);
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_int(&r.pk, 2);
    msgpack_pack_int(&r.pk, 0);
    beam_pack_str(&r.pk, "log");
    msgpack_pack_map(&r.pk, 0);
    expect_parse_fail(&r, want);
}

static void test_parse_limits_apply(void **state)
{
    beam_limits_t lim;
    beam_msg_t msg;
    char err[160] = "";
    raw_t r;
    raw_init(&r);
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_int(&r.pk, 0);
    msgpack_pack_int(&r.pk, 1);
    beam_pack_str(&r.pk, "a-long-op");
    msgpack_pack_map(&r.pk, 0);
    beam_limits_default(&lim);
    lim.max_str = 4;
    assert_int_equal(beam_msg_parse(r.sbuf.data, r.sbuf.size, &lim, &msg, err, sizeof err), -1);
    assert_string_equal(err, "str of 9 bytes is over the limit of 4");
    /* stray bytes after the envelope */
    lim.max_str = 100;
    msgpack_pack_nil(&r.pk);
    assert_int_equal(beam_msg_parse(r.sbuf.data, r.sbuf.size, &lim, &msg, err, sizeof err), -1);
    assert_string_equal(err, "1 stray bytes after the msgpack value");
    assert_int_equal(beam_msg_parse(r.sbuf.data, r.sbuf.size - 1, &lim, &msg, err, sizeof err), 0);
    beam_msg_destroy(&msg);
    raw_destroy(&r);
}

static void test_parse_good(void **state)
{
    beam_limits_t lim;
    beam_msg_t msg;
    char err[160] = "";
    raw_t r;
    beam_limits_default(&lim);

    raw_init(&r);
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_int(&r.pk, 1);
    msgpack_pack_uint64(&r.pk, UINT64_MAX);
    msgpack_pack_nil(&r.pk);
    msgpack_pack_int(&r.pk, 42);
    assert_int_equal(beam_msg_parse(r.sbuf.data, r.sbuf.size, &lim, &msg, err, sizeof err), 0);
    assert_int_equal(msg.type, BEAM_MSG_REPLY);
    assert_true(msg.msgid == UINT64_MAX);
    assert_int_equal(msg.error.type, MSGPACK_OBJECT_NIL);
    assert_int_equal(msg.params.type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    assert_int_equal(msg.params.via.u64, 42);
    assert_null(msg.op);
    assert_int_equal(msg.has_zone, 1);
    beam_msg_destroy(&msg);
    assert_int_equal(msg.has_zone, 0);
    beam_msg_destroy(&msg); /* idempotent */
    raw_destroy(&r);

    /* strings point into the frame, not copies */
    raw_init(&r);
    msgpack_pack_array(&r.pk, 3);
    msgpack_pack_int(&r.pk, 2);
    beam_pack_str(&r.pk, "init");
    msgpack_pack_map(&r.pk, 0);
    assert_int_equal(beam_msg_parse(r.sbuf.data, r.sbuf.size, &lim, &msg, err, sizeof err), 0);
    assert_int_equal(msg.type, BEAM_MSG_PUSH);
    assert_ptr_equal(msg.op, r.sbuf.data + 3);
    assert_int_equal(msg.op_len, 4);
    assert_int_equal(msg.msgid, 0);
    beam_msg_destroy(&msg);
    raw_destroy(&r);
}

/* --- field accessors --- */

typedef struct fields_s {
    raw_t raw;
    beam_msg_t msg;
    char id28[28];
} fields_t;

/* A request whose params hold one field of every kind, plus nil and a non-str key. */
static void fields_make(fields_t *f)
{
    beam_limits_t lim;
    char err[160] = "";
    msgpack_packer *pk = &f->raw.pk;
    for (int i = 0; i < 28; i++)
        f->id28[i] = (char)(0xa0 + i);
    raw_init(&f->raw);
    msgpack_pack_array(pk, 4);
    msgpack_pack_int(pk, 0);
    msgpack_pack_int(pk, 1);
    beam_pack_str(pk, "op");
    msgpack_pack_map(pk, 16);
    beam_pack_key(pk, "s");
    beam_pack_str(pk, "str");
    beam_pack_key(pk, "empty");
    beam_pack_str(pk, "");
    beam_pack_key(pk, "b");
    beam_pack_bin(pk, "\x01\x02\x03", 3);
    beam_pack_key(pk, "id");
    beam_pack_bin(pk, f->id28, 28);
    beam_pack_key(pk, "i");
    msgpack_pack_int(pk, 42);
    beam_pack_key(pk, "neg");
    msgpack_pack_int(pk, -7);
    beam_pack_key(pk, "max");
    msgpack_pack_uint64(pk, INT64_MAX);
    beam_pack_key(pk, "huge");
    msgpack_pack_uint64(pk, (uint64_t)INT64_MAX + 1);
    beam_pack_key(pk, "f");
    msgpack_pack_double(pk, 2.5);
    beam_pack_key(pk, "f32");
    msgpack_pack_float(pk, 0.25f);
    beam_pack_key(pk, "t");
    msgpack_pack_true(pk);
    beam_pack_key(pk, "no");
    msgpack_pack_false(pk);
    beam_pack_key(pk, "a");
    msgpack_pack_array(pk, 2);
    msgpack_pack_int(pk, 1);
    msgpack_pack_int(pk, 2);
    beam_pack_key(pk, "m");
    msgpack_pack_map(pk, 1);
    beam_pack_key(pk, "x");
    msgpack_pack_int(pk, 1);
    beam_pack_key(pk, "nil");
    msgpack_pack_nil(pk);
    msgpack_pack_int(pk, 5); /* a non-str key is skipped, not matched */
    beam_pack_str(pk, "five");
    beam_limits_default(&lim);
    assert_int_equal(beam_msg_parse(f->raw.sbuf.data, f->raw.sbuf.size, &lim, &f->msg, err, sizeof err), 0);
}

static void fields_destroy(fields_t *f)
{
    beam_msg_destroy(&f->msg);
    raw_destroy(&f->raw);
}

static void test_field_str(void **state)
{
    fields_t f;
    const char *s = NULL;
    uint32_t n = 99;
    fields_make(&f);
    const msgpack_object *p = &f.msg.params;
    assert_int_equal(beam_field_str(p, "s", &s, &n), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(s, "str", 3);
    assert_int_equal(beam_field_str(p, "empty", &s, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(beam_field_str(p, "absent", &s, &n), -ENOENT);
    assert_int_equal(beam_field_str(p, "nil", &s, &n), -ENOENT);
    assert_int_equal(beam_field_str(p, "b", &s, &n), -EINVAL);
    assert_int_equal(beam_field_str(p, "i", &s, &n), -EINVAL);
    assert_int_equal(beam_field_str(p, "a", &s, &n), -EINVAL);
    /* keys match whole: "s" is not a prefix match of "str"-like keys */
    assert_int_equal(beam_field_str(p, "", &s, &n), -ENOENT);
    assert_int_equal(beam_field_str(p, "ss", &s, &n), -ENOENT);
    assert_int_equal(beam_field_str(p, "5", &s, &n), -ENOENT);
    fields_destroy(&f);
}

static void test_field_bin_and_id(void **state)
{
    fields_t f;
    const char *s = NULL;
    uint32_t n = 0;
    fields_make(&f);
    const msgpack_object *p = &f.msg.params;
    assert_int_equal(beam_field_bin(p, "b", &s, &n), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(s, "\x01\x02\x03", 3);
    assert_int_equal(beam_field_bin(p, "absent", &s, &n), -ENOENT);
    assert_int_equal(beam_field_bin(p, "nil", &s, &n), -ENOENT);
    assert_int_equal(beam_field_bin(p, "s", &s, &n), -EINVAL);
    assert_int_equal(beam_field_bin(p, "m", &s, &n), -EINVAL);

    const char *id = NULL;
    assert_int_equal(beam_field_id(p, "id", 28, &id), 0);
    assert_memory_equal(id, f.id28, 28);
    assert_int_equal(beam_field_id(p, "id", 16, &id), -EINVAL);
    assert_int_equal(beam_field_id(p, "id", 29, &id), -EINVAL);
    assert_int_equal(beam_field_id(p, "b", 28, &id), -EINVAL);
    assert_int_equal(beam_field_id(p, "s", 3, &id), -EINVAL); /* a str of the right length */
    assert_int_equal(beam_field_id(p, "absent", 28, &id), -ENOENT);
    assert_int_equal(beam_field_id(p, "nil", 28, &id), -ENOENT);
    fields_destroy(&f);
}

static void test_field_int(void **state)
{
    fields_t f;
    int64_t v = 0;
    fields_make(&f);
    const msgpack_object *p = &f.msg.params;
    assert_int_equal(beam_field_int(p, "i", &v), 0);
    assert_true(v == 42);
    assert_int_equal(beam_field_int(p, "neg", &v), 0);
    assert_true(v == -7);
    assert_int_equal(beam_field_int(p, "max", &v), 0);
    assert_true(v == INT64_MAX);
    v = 123;
    assert_int_equal(beam_field_int(p, "huge", &v), -EINVAL);
    assert_true(v == 123);
    assert_int_equal(beam_field_int(p, "f", &v), -EINVAL);
    assert_int_equal(beam_field_int(p, "t", &v), -EINVAL);
    assert_int_equal(beam_field_int(p, "s", &v), -EINVAL);
    assert_int_equal(beam_field_int(p, "absent", &v), -ENOENT);
    assert_int_equal(beam_field_int(p, "nil", &v), -ENOENT);
    fields_destroy(&f);
}

static void test_field_float(void **state)
{
    fields_t f;
    double d = 0;
    fields_make(&f);
    const msgpack_object *p = &f.msg.params;
    assert_int_equal(beam_field_float(p, "f", &d), 0);
    assert_true(d == 2.5);
    assert_int_equal(beam_field_float(p, "f32", &d), 0);
    assert_true(d == 0.25);
    assert_int_equal(beam_field_float(p, "i", &d), 0);
    assert_true(d == 42.0);
    assert_int_equal(beam_field_float(p, "neg", &d), 0);
    assert_true(d == -7.0);
    assert_int_equal(beam_field_float(p, "huge", &d), 0);
    assert_true(d == 9223372036854775808.0);
    assert_int_equal(beam_field_float(p, "s", &d), -EINVAL);
    assert_int_equal(beam_field_float(p, "t", &d), -EINVAL);
    assert_int_equal(beam_field_float(p, "absent", &d), -ENOENT);
    assert_int_equal(beam_field_float(p, "nil", &d), -ENOENT);
    fields_destroy(&f);
}

static void test_field_bool(void **state)
{
    fields_t f;
    int v = -1;
    fields_make(&f);
    const msgpack_object *p = &f.msg.params;
    assert_int_equal(beam_field_bool(p, "t", &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(beam_field_bool(p, "no", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(beam_field_bool(p, "i", &v), -EINVAL); /* no int truthiness */
    assert_int_equal(beam_field_bool(p, "s", &v), -EINVAL);
    assert_int_equal(beam_field_bool(p, "absent", &v), -ENOENT);
    assert_int_equal(beam_field_bool(p, "nil", &v), -ENOENT);
    fields_destroy(&f);
}

static void test_field_array_and_map(void **state)
{
    fields_t f;
    const msgpack_object_array *a = NULL;
    const msgpack_object_map *m = NULL;
    fields_make(&f);
    const msgpack_object *p = &f.msg.params;
    assert_int_equal(beam_field_array(p, "a", &a), 0);
    assert_int_equal(a->size, 2);
    assert_int_equal(a->ptr[1].via.u64, 2);
    assert_int_equal(beam_field_array(p, "m", &a), -EINVAL);
    assert_int_equal(beam_field_array(p, "s", &a), -EINVAL);
    assert_int_equal(beam_field_array(p, "absent", &a), -ENOENT);
    assert_int_equal(beam_field_array(p, "nil", &a), -ENOENT);
    assert_int_equal(beam_field_map(p, "m", &m), 0);
    assert_int_equal(m->size, 1);
    assert_int_equal(beam_field_map(p, "a", &m), -EINVAL);
    assert_int_equal(beam_field_map(p, "absent", &m), -ENOENT);
    assert_int_equal(beam_field_map(p, "nil", &m), -ENOENT);
    fields_destroy(&f);
}

static void test_map_get(void **state)
{
    fields_t f;
    fields_make(&f);
    const msgpack_object *p = &f.msg.params;
    /* map_get sees nil (the accessors treat it as absent) */
    const msgpack_object *o = beam_map_get(p, "nil");
    assert_non_null(o);
    assert_int_equal(o->type, MSGPACK_OBJECT_NIL);
    assert_null(beam_map_get(p, "absent"));
    assert_null(beam_map_get(NULL, "s"));
    /* on something not a map, nothing is found */
    const msgpack_object *arr = beam_map_get(p, "a");
    assert_non_null(arr);
    assert_null(beam_map_get(arr, "s"));
    int64_t v;
    assert_int_equal(beam_field_int(arr, "i", &v), -ENOENT);
    fields_destroy(&f);

    assert_true(beam_str_eq("abc", 3, "abc"));
    assert_false(beam_str_eq("abc", 2, "abc"));
    assert_false(beam_str_eq("abd", 3, "abc"));
    assert_true(beam_str_eq("", 0, ""));
    assert_false(beam_str_eq("abcd", 4, "abc"));
}

/* --- the encoder --- */

/* Decodes all of buf (which must hold nframes frames) and parses frame want
 * (0-based) into msg. The message points into the returned copy of that
 * frame, which the caller frees after beam_msg_destroy. */
static char *decode_nth(const char *buf, size_t len, size_t want, size_t nframes, beam_msg_t *msg)
{
    beam_limits_t lim;
    beam_decoder_t dec;
    const char *frame;
    size_t flen, i = 0;
    char err[160] = "";
    char *copy = NULL;
    beam_limits_default(&lim);
    beam_decoder_init(&dec, &lim);
    assert_int_equal(beam_decoder_feed(&dec, buf, len), 0);
    while (beam_decoder_next(&dec, &frame, &flen) == 1) {
        if (i == want) {
            copy = malloc(flen);
            assert_non_null(copy);
            memcpy(copy, frame, flen);
            if (beam_msg_parse(copy, flen, &lim, msg, err, sizeof err) != 0)
                fail_msg("frame %zu: %s", i, err);
        }
        i++;
    }
    assert_int_equal(dec.failed, 0);
    assert_int_equal(i, nframes);
    assert_non_null(copy);
    beam_decoder_destroy(&dec);
    return copy;
}

static void test_enc_round_trip(void **state)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_request(&enc, 42, "get", 2);
    beam_pack_key(&enc.pk, "objs");
    msgpack_pack_array(&enc.pk, 1);
    beam_pack_bin(&enc.pk, "0123456789012345678901234567", 28);
    beam_pack_key(&enc.pk, "timeout_ms");
    msgpack_pack_int(&enc.pk, -1);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    beam_enc_reply_ok(&enc, 43);
    msgpack_pack_map(&enc.pk, 0);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    beam_enc_reply_error(&enc, 44, "bad_request", "field 'objs' must be an array of ids");
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    beam_enc_push(&enc, "error", 1);
    beam_pack_key(&enc.pk, "message");
    beam_pack_str(&enc.pk, "protocol error");
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    size_t len;
    char *buf = beam_enc_take(&enc, &len);
    beam_enc_destroy(&enc);

    beam_limits_t lim;
    beam_decoder_t dec;
    beam_msg_t msg;
    const char *frame;
    size_t flen;
    char err[160] = "";
    const msgpack_object_array *a;
    int64_t v;
    beam_limits_default(&lim);
    beam_decoder_init(&dec, &lim);
    assert_int_equal(beam_decoder_feed(&dec, buf, len), 0);

    assert_int_equal(beam_decoder_next(&dec, &frame, &flen), 1);
    assert_int_equal(beam_msg_parse(frame, flen, &lim, &msg, err, sizeof err), 0);
    assert_int_equal(msg.type, BEAM_MSG_REQUEST);
    assert_int_equal(msg.msgid, 42);
    assert_true(beam_str_eq(msg.op, msg.op_len, "get"));
    assert_int_equal(msg.params.via.map.size, 2);
    assert_int_equal(beam_field_array(&msg.params, "objs", &a), 0);
    assert_int_equal(a->size, 1);
    assert_int_equal(a->ptr[0].type, MSGPACK_OBJECT_BIN);
    assert_memory_equal(a->ptr[0].via.bin.ptr, "0123456789012345678901234567", 28);
    assert_int_equal(beam_field_int(&msg.params, "timeout_ms", &v), 0);
    assert_true(v == -1);
    beam_msg_destroy(&msg);

    assert_int_equal(beam_decoder_next(&dec, &frame, &flen), 1);
    assert_int_equal(beam_msg_parse(frame, flen, &lim, &msg, err, sizeof err), 0);
    assert_int_equal(msg.type, BEAM_MSG_REPLY);
    assert_int_equal(msg.msgid, 43);
    assert_int_equal(msg.error.type, MSGPACK_OBJECT_NIL);
    assert_int_equal(msg.params.type, MSGPACK_OBJECT_MAP);
    assert_int_equal(msg.params.via.map.size, 0);
    beam_msg_destroy(&msg);

    assert_int_equal(beam_decoder_next(&dec, &frame, &flen), 1);
    assert_int_equal(beam_msg_parse(frame, flen, &lim, &msg, err, sizeof err), 0);
    assert_int_equal(msg.type, BEAM_MSG_REPLY);
    assert_int_equal(msg.msgid, 44);
    assert_int_equal(msg.error.type, MSGPACK_OBJECT_MAP);
    assert_int_equal(msg.error.via.map.size, 2);
    expect_str(&msg.error, "code", "bad_request");
    expect_str(&msg.error, "message", "field 'objs' must be an array of ids");
    assert_int_equal(msg.params.type, MSGPACK_OBJECT_NIL);
    beam_msg_destroy(&msg);

    assert_int_equal(beam_decoder_next(&dec, &frame, &flen), 1);
    assert_int_equal(beam_msg_parse(frame, flen, &lim, &msg, err, sizeof err), 0);
    assert_int_equal(msg.type, BEAM_MSG_PUSH);
    assert_true(beam_str_eq(msg.op, msg.op_len, "error"));
    expect_str(&msg.params, "message", "protocol error");
    beam_msg_destroy(&msg);

    assert_int_equal(beam_decoder_next(&dec, &frame, &flen), 0);
    beam_decoder_destroy(&dec);
    free(buf);
}

static void test_enc_exact_bytes(void **state)
{
    beam_enc_t enc;
    size_t len;
    beam_enc_init(&enc);
    beam_enc_reply_error(&enc, 3, "x", "y");
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    char *buf = beam_enc_take(&enc, &len);
    /* [1, 3, {"code": "x", "message": "y"}, nil]; msgid goes out as the
     * smallest uint, like any msgpack packer's */
    static const char want[] = "\0\0\0\x16" "\x94\x01\x03\x82\xa4" "code" "\xa1x"
                               "\xa7" "message" "\xa1y" "\xc0";
    assert_int_equal(len, sizeof want - 1);
    assert_memory_equal(buf, want, len);
    free(buf);
    beam_enc_destroy(&enc);
}

static void test_enc_end_over_max(void **state)
{
    beam_enc_t enc;
    static char blob[100];
    beam_enc_init(&enc);
    beam_enc_push(&enc, "a", 0);
    assert_int_equal(beam_enc_end(&enc, 64), 0);
    size_t first = enc.sbuf.size;
    beam_enc_push(&enc, "b", 1);
    beam_pack_key(&enc.pk, "blob");
    beam_pack_bin(&enc.pk, blob, sizeof blob);
    assert_int_equal(beam_enc_end(&enc, 64), -1);
    assert_int_equal(enc.sbuf.size, first); /* the oversized frame is gone */
    assert_int_equal(enc.failed, 0);
    /* a frame of exactly max_frame is kept */
    beam_enc_begin(&enc);
    beam_pack_bin(&enc.pk, blob, 62); /* c4 3e + 62 = 64 */
    assert_int_equal(beam_enc_end(&enc, 64), 0);
    size_t second = enc.sbuf.size;
    assert_int_equal(second - first, 4 + 64);
    beam_enc_begin(&enc);
    beam_pack_bin(&enc.pk, blob, 63);
    assert_int_equal(beam_enc_end(&enc, 64), -1);
    assert_int_equal(enc.sbuf.size, second);
    /* max_frame 0 means no limit */
    beam_enc_push(&enc, "c", 1);
    beam_pack_key(&enc.pk, "blob");
    beam_pack_bin(&enc.pk, blob, sizeof blob);
    assert_int_equal(beam_enc_end(&enc, 0), 0);

    size_t len;
    char *buf = beam_enc_take(&enc, &len);
    beam_enc_destroy(&enc);
    beam_limits_t lim;
    beam_decoder_t dec;
    beam_msg_t msg;
    const char *frame;
    size_t flen;
    char err[160] = "";
    beam_limits_default(&lim);
    beam_decoder_init(&dec, &lim);
    assert_int_equal(beam_decoder_feed(&dec, buf, len), 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &flen), 1);
    assert_int_equal(beam_msg_parse(frame, flen, &lim, &msg, err, sizeof err), 0);
    assert_true(beam_str_eq(msg.op, msg.op_len, "a"));
    beam_msg_destroy(&msg);
    assert_int_equal(beam_decoder_next(&dec, &frame, &flen), 1);
    assert_int_equal(flen, 64);
    assert_int_equal(beam_msgpack_check(frame, flen, &lim, err, sizeof err), 0);
    assert_int_equal(beam_decoder_next(&dec, &frame, &flen), 1);
    assert_int_equal(beam_msg_parse(frame, flen, &lim, &msg, err, sizeof err), 0);
    assert_true(beam_str_eq(msg.op, msg.op_len, "c"));
    beam_msg_destroy(&msg);
    assert_int_equal(beam_decoder_next(&dec, &frame, &flen), 0);
    beam_decoder_destroy(&dec);
    free(buf);
}

static void test_enc_take_and_reuse(void **state)
{
    beam_enc_t enc;
    size_t len = 99;
    beam_enc_init(&enc);
    char *none = beam_enc_take(&enc, &len);
    assert_int_equal(len, 0);
    free(none);

    beam_enc_request(&enc, 1, "first", 0);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    char *one = beam_enc_take(&enc, &len);
    assert_non_null(one);
    size_t len1 = len;
    assert_int_equal(enc.sbuf.size, 0);
    assert_null(enc.sbuf.data);

    /* the taken bytes are the caller's; the encoder starts over */
    beam_enc_request(&enc, 2, "second", 1);
    beam_pack_key(&enc.pk, "k");
    msgpack_pack_true(&enc.pk);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    beam_enc_push(&enc, "third", 0);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    char *two = beam_enc_take(&enc, &len);
    assert_non_null(two);
    beam_enc_destroy(&enc);
    beam_enc_destroy(&enc); /* destroy twice is harmless */

    beam_msg_t msg;
    char *frame = decode_nth(one, len1, 0, 1, &msg);
    assert_int_equal(msg.msgid, 1);
    assert_true(beam_str_eq(msg.op, msg.op_len, "first"));
    beam_msg_destroy(&msg);
    free(frame);
    free(one);
    frame = decode_nth(two, len, 0, 2, &msg);
    assert_int_equal(msg.msgid, 2);
    assert_true(beam_str_eq(msg.op, msg.op_len, "second"));
    beam_msg_destroy(&msg);
    free(frame);
    frame = decode_nth(two, len, 1, 2, &msg);
    assert_int_equal(msg.type, BEAM_MSG_PUSH);
    assert_true(beam_str_eq(msg.op, msg.op_len, "third"));
    beam_msg_destroy(&msg);
    free(frame);
    /* the second frame's header was patched relative to the new buffer */
    assert_int_equal(two[0], 0);
    assert_int_equal((unsigned char)two[3], 1 + 1 + 1 + 7 + 1 + 2 + 1);
    free(two);
}

/* A bin packed from a buffer stays there as a span: the frame's header
 * counts it, take_spans hands it with its offset and a reference, take
 * copies it in (the same bytes as beam_pack_bin), and a frame dropped for
 * being over max_frame drops its spans. */
static void test_enc_spans(void **state)
{
    size_t n = BEAM_ENC_SPAN_MIN + 3;
    beam_buf_t *b = beam_buf_new(n);
    assert_non_null(b);
    memset(b->data, 'q', n);
    beam_enc_t enc, plain;
    beam_enc_init(&enc);
    beam_enc_init(&plain);
    for (int i = 0; i < 2; i++) {
        beam_enc_t *e = i ? &plain : &enc;
        beam_enc_push(e, "call", 2);
        beam_pack_key(&e->pk, "args");
        if (i)
            beam_pack_bin(&e->pk, b->data, n);
        else
            beam_pack_bin_buf(e, b, b->data, n);
        beam_pack_key(&e->pk, "small");
        if (i)
            beam_pack_bin(&e->pk, b->data, 5);
        else
            beam_pack_bin_buf(e, b, b->data, 5); /* under the minimum: copied */
        assert_int_equal(beam_enc_end(e, 0), 0);
    }
    assert_int_equal(b->refs, 2);
    assert_int_equal(enc.nspans, 1);
    size_t flat_len, plain_len;
    char *want = beam_enc_take(&plain, &plain_len);
    char *flat = beam_enc_take(&enc, &flat_len);
    assert_int_equal(flat_len, plain_len);
    assert_memory_equal(flat, want, plain_len);
    assert_int_equal(b->refs, 1); /* take dropped the span's reference */
    free(flat);

    beam_enc_push(&enc, "call", 1);
    beam_pack_key(&enc.pk, "args");
    beam_pack_bin_buf(&enc, b, b->data, n);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    beam_enc_span_t *spans;
    size_t nspans, len;
    char *bytes = beam_enc_take_spans(&enc, &len, &spans, &nspans);
    assert_int_equal(nspans, 1);
    assert_int_equal(len + n, plain_len - 2 - 5 - 1 - 5); /* without "small" and the span's bytes */
    assert_ptr_equal(spans[0].buf, b);
    assert_ptr_equal(spans[0].p, b->data);
    assert_int_equal(spans[0].n, n);
    assert_int_equal(spans[0].at, len); /* the bin's body comes last */
    size_t body = ((size_t)(unsigned char)bytes[0] << 24) | ((size_t)(unsigned char)bytes[1] << 16) |
                  ((size_t)(unsigned char)bytes[2] << 8) | (unsigned char)bytes[3];
    assert_int_equal(body, len + n - BEAM_FRAME_HEADER);
    assert_int_equal(b->refs, 2);
    beam_buf_unref(spans[0].buf);
    free(spans);
    free(bytes);

    /* over max_frame: the frame and its span go, the frames before stay */
    beam_enc_reply_ok(&enc, 9);
    msgpack_pack_nil(&enc.pk);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    size_t before = enc.sbuf.size;
    beam_enc_push(&enc, "call", 1);
    beam_pack_key(&enc.pk, "args");
    beam_pack_bin_buf(&enc, b, b->data, n);
    assert_int_equal(b->refs, 2);
    assert_int_equal(beam_enc_end(&enc, (uint32_t)n), -1);
    assert_int_equal(enc.sbuf.size, before);
    assert_int_equal(enc.nspans, 0);
    assert_int_equal(b->refs, 1);
    /* destroy drops what is left */
    beam_enc_push(&enc, "call", 1);
    beam_pack_key(&enc.pk, "args");
    beam_pack_bin_buf(&enc, b, b->data, n);
    assert_int_equal(b->refs, 2);
    beam_enc_destroy(&enc);
    beam_enc_destroy(&plain);
    free(want);
    assert_int_equal(b->refs, 1);
    beam_buf_unref(b);

    /* wrap owns what it is given */
    char *d = malloc(4);
    assert_non_null(d);
    beam_buf_t *w = beam_buf_wrap(d, 4);
    assert_non_null(w);
    assert_ptr_equal(w->data, d);
    beam_buf_unref(beam_buf_ref(w));
    beam_buf_unref(w);
    beam_buf_unref(NULL);
}

/* The peek (a member skips frames by it): the envelope's head in each
 * width the encoders may write, and anything else left to the parse. */
static void test_msg_peek(void **state)
{
    (void)state;
    beam_peek_t pk;
    /* [0, 300, "submit", {}] */
    static const char req[] = "\x94\x00\xcd\x01\x2c\xa6submit\x80";
    assert_int_equal(beam_msg_peek(req, sizeof req - 1, &pk), 0);
    assert_int_equal(pk.type, BEAM_MSG_REQUEST);
    assert_int_equal(pk.msgid, 300);
    assert_int_equal(pk.op_len, 6);
    assert_memory_equal(pk.op, "submit", 6);
    /* [1, 2^40, nil, nil] */
    static const char rep[] = "\x94\x01\xcf\x00\x00\x01\x00\x00\x00\x00\x00\xc0\xc0";
    assert_int_equal(beam_msg_peek(rep, sizeof rep - 1, &pk), 0);
    assert_int_equal(pk.type, BEAM_MSG_REPLY);
    assert_true(pk.msgid == (uint64_t)1 << 40);
    assert_null(pk.op);
    /* [2, "init"...] with the op as str8, and as str16 */
    static const char push8[] = "\x93\x02\xd9\x04init\x80";
    assert_int_equal(beam_msg_peek(push8, sizeof push8 - 1, &pk), 0);
    assert_int_equal(pk.type, BEAM_MSG_PUSH);
    assert_memory_equal(pk.op, "init", 4);
    static const char push16[] = "\x93\x02\xda\x00\x04" "call" "\x80";
    assert_int_equal(beam_msg_peek(push16, sizeof push16 - 1, &pk), 0);
    assert_memory_equal(pk.op, "call", 4);
    /* a signed msgid holding a value >= 0 is read; a negative one is not */
    static const char sgn[] = "\x94\x00\xd0\x05\xa1x\x80";
    assert_int_equal(beam_msg_peek(sgn, sizeof sgn - 1, &pk), 0);
    assert_int_equal(pk.msgid, 5);
    static const char neg[] = "\x94\x00\xd0\xfb\xa1x\x80";
    assert_int_equal(beam_msg_peek(neg, sizeof neg - 1, &pk), -1);
    /* cut at every byte: never read past the end */
    for (size_t n = 0; n < sizeof req - 2; n++)
        if (beam_msg_peek(req, n, &pk) == 0)
            assert_true(pk.op + pk.op_len <= req + n);
    /* shapes it leaves to the parse: a map, a 3-array request, kind 3, an int op */
    assert_int_equal(beam_msg_peek("\x80", 1, &pk), -1);
    assert_int_equal(beam_msg_peek("\x93\x00\x01\xa1x", 5, &pk), -1);
    assert_int_equal(beam_msg_peek("\x94\x03\x01\xa1x", 5, &pk), -1);
    assert_int_equal(beam_msg_peek("\x93\x02\x01\x80", 4, &pk), -1);
    assert_int_equal(beam_msg_peek("\x94\x00\x01\xa9x", 5, &pk), -1); /* op longer than the bytes */
}

/* An array whose count is written once its elements are packed. */
static void test_pack_array_open(void **state)
{
    (void)state;
    beam_enc_t enc;
    beam_limits_t lim;
    beam_msg_t m;
    char err[160];
    size_t n;
    beam_limits_default(&lim);
    beam_enc_init(&enc);
    beam_enc_push(&enc, "local_batch", 1);
    beam_pack_key(&enc.pk, "msgs");
    size_t at = beam_pack_array_open(&enc);
    for (int i = 0; i < 3; i++)
        msgpack_pack_int(&enc.pk, i);
    beam_pack_array_close(&enc, at, 3);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    char *f = beam_enc_take(&enc, &n);
    beam_enc_destroy(&enc);
    assert_int_equal(beam_msg_parse(f + BEAM_FRAME_HEADER, n - BEAM_FRAME_HEADER, &lim, &m, err, sizeof err), 0);
    const msgpack_object_array *a;
    assert_int_equal(beam_field_array(&m.params, "msgs", &a), 0);
    assert_int_equal(a->size, 3);
    assert_int_equal(a->ptr[2].via.u64, 2);
    beam_msg_destroy(&m);
    free(f);
}

/* _beam places a frame by the first long bin's offset (the codec's walk). */
static void test_first_bin(void **state)
{
    (void)state;
    /* [2, "call", {"a": 7, "args": bin8 of 200 bytes}] */
    char body[300];
    size_t n = 0;
    memcpy(body, "\x93\x02\xa4" "call" "\x82\xa1" "a" "\x07\xa4" "args" "\xc4\xc8", 18);
    n = 18;
    memset(body + n, 'x', 200);
    n += 200;
    assert_int_equal(beam_msgpack_first_bin(body, n, 100), 18);
    assert_int_equal(beam_msgpack_first_bin(body, n, 201), -1);
    assert_int_equal(beam_msgpack_first_bin(body, 17, 100), -1); /* its header cut */
    assert_int_equal(beam_msgpack_first_bin("\xc7\x01\x00\x00", 4, 1), -1); /* ext: none in beam */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_headers),
        cmocka_unit_test(test_decode_whole),
        cmocka_unit_test(test_decode_byte_by_byte),
        cmocka_unit_test(test_decode_split_everywhere),
        cmocka_unit_test(test_decode_split_three),
        cmocka_unit_test(test_decode_many),
        cmocka_unit_test(test_decode_truncated),
        cmocka_unit_test(test_decode_empty_feed),
        cmocka_unit_test(test_decode_zero_length),
        cmocka_unit_test(test_decode_over_max_frame),
        cmocka_unit_test(test_decode_error_after_frames),
        cmocka_unit_test(test_decode_garbage_body),
        cmocka_unit_test(test_check_valid),
        cmocka_unit_test(test_check_garbage),
        cmocka_unit_test(test_check_truncated_headers),
        cmocka_unit_test(test_check_depth),
        cmocka_unit_test(test_check_items),
        cmocka_unit_test(test_check_str_limit),
        cmocka_unit_test(test_check_null_err),
        cmocka_unit_test(test_depth_empty_innermost),
        cmocka_unit_test(test_depth_limit_over_32),
        cmocka_unit_test(test_parse_not_array),
        cmocka_unit_test(test_parse_unknown_kind),
        cmocka_unit_test(test_parse_bad_request),
        cmocka_unit_test(test_parse_bad_reply),
        cmocka_unit_test(test_parse_bad_push),
        cmocka_unit_test(test_parse_limits_apply),
        cmocka_unit_test(test_parse_good),
        cmocka_unit_test(test_field_str),
        cmocka_unit_test(test_field_bin_and_id),
        cmocka_unit_test(test_field_int),
        cmocka_unit_test(test_field_float),
        cmocka_unit_test(test_field_bool),
        cmocka_unit_test(test_field_array_and_map),
        cmocka_unit_test(test_map_get),
        cmocka_unit_test(test_enc_round_trip),
        cmocka_unit_test(test_enc_exact_bytes),
        cmocka_unit_test(test_enc_end_over_max),
        cmocka_unit_test(test_enc_take_and_reuse),
        cmocka_unit_test(test_enc_spans),
        cmocka_unit_test(test_msg_peek),
        cmocka_unit_test(test_pack_array_open),
        cmocka_unit_test(test_first_bin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
