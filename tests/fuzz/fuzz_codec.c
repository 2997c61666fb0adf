/* fuzz_codec.c — a libFuzzer target for the codec: arbitrary bytes go through
 * the frame decoder (fed whole and in small pieces, which must agree), every
 * frame body through beam_msg_parse and every field accessor (and the peek,
 * which must agree with the parse), and each parsed message is re-encoded
 * and must re-encode to the same bytes.
 *
 * Build (not part of CMake):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude src/codec.c src/decoder.c src/buf.c \
 *     tests/fuzz/fuzz_codec.c $(pkg-config --cflags --libs msgpack) -o fuzz_codec
 *   ./fuzz_codec -max_len=4096 tests/fuzz/corpus/codec
 * Add -DBEAM_FUZZ_STRICT to also require that whatever beam_msgpack_check
 * passes, msgpack_unpack can unpack (today it finds the depth mismatch). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "beam/codec.h"
#include "check.h"

static const char *const keys[] = {
    "objs", "timeout_ms", "num_returns", "obj", "data", "objects", "actors", "code",
    "message", "role", "pid", "actor", "token", "values", "ready", "", "k",
};

/* Calls every accessor on one key of a map, and checks the contract's codes. */
static void touch_key(const msgpack_object *map, const char *key)
{
    const char *s;
    uint32_t n;
    int64_t i;
    double d;
    int b;
    const msgpack_object_array *a;
    const msgpack_object_map *m;
    int rc[9];
    rc[0] = beam_field_str(map, key, &s, &n);
    if (rc[0] == 0)
        CHECK(n == 0 || s != NULL);
    rc[1] = beam_field_bin(map, key, &s, &n);
    rc[2] = beam_field_int(map, key, &i);
    rc[3] = beam_field_float(map, key, &d);
    rc[4] = beam_field_bool(map, key, &b);
    if (rc[4] == 0)
        CHECK(b == 0 || b == 1);
    rc[5] = beam_field_array(map, key, &a);
    rc[6] = beam_field_map(map, key, &m);
    rc[7] = beam_field_id(map, key, 28, &s);
    rc[8] = beam_field_id(map, key, 16, &s);
    const msgpack_object *o = beam_map_get(map, key);
    int absent = o == NULL || o->type == MSGPACK_OBJECT_NIL;
    int found = 0;
    for (int k = 0; k < 9; k++) {
        CHECK(rc[k] == 0 || rc[k] == -2 /* ENOENT */ || rc[k] == -22 /* EINVAL */);
        CHECK((rc[k] == -2) == absent);
        found += rc[k] == 0 && k < 7;
    }
    /* a present value has at most one type (float also takes ints) */
    CHECK(found <= 2);
    if (rc[5] == 0) {
        for (uint32_t k = 0; k < a->size; k++)
            (void)a->ptr[k].type;
    }
}

static void touch_map(const msgpack_object *map)
{
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        touch_key(map, keys[k]);
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return;
    /* every str key the peer sent, as a C string (keys with a NUL are cut) */
    for (uint32_t k = 0; k < map->via.map.size && k < 64; k++) {
        const msgpack_object *key = &map->via.map.ptr[k].key;
        if (key->type != MSGPACK_OBJECT_STR || key->via.str.size > 255)
            continue;
        char name[256];
        if (key->via.str.size) /* an empty str may have no pointer */
            memcpy(name, key->via.str.ptr, key->via.str.size);
        name[key->via.str.size] = '\0';
        touch_key(map, name);
        CHECK(beam_map_get(map, name) != NULL || strlen(name) != key->via.str.size);
    }
}

/* Encodes msg as beam would send it; returns the bytes (malloc'd) or NULL. */
static char *reencode(const beam_msg_t *msg, size_t *len)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    switch (msg->type) {
    case BEAM_MSG_REQUEST:
        beam_enc_begin(&enc);
        msgpack_pack_array(&enc.pk, 4);
        msgpack_pack_uint8(&enc.pk, BEAM_MSG_REQUEST);
        msgpack_pack_uint64(&enc.pk, msg->msgid);
        beam_pack_strn(&enc.pk, msg->op, msg->op_len);
        msgpack_pack_object(&enc.pk, msg->params);
        break;
    case BEAM_MSG_REPLY:
        beam_enc_begin(&enc);
        msgpack_pack_array(&enc.pk, 4);
        msgpack_pack_uint8(&enc.pk, BEAM_MSG_REPLY);
        msgpack_pack_uint64(&enc.pk, msg->msgid);
        msgpack_pack_object(&enc.pk, msg->error);
        msgpack_pack_object(&enc.pk, msg->params);
        break;
    default:
        beam_enc_begin(&enc);
        msgpack_pack_array(&enc.pk, 3);
        msgpack_pack_uint8(&enc.pk, BEAM_MSG_PUSH);
        beam_pack_strn(&enc.pk, msg->op, msg->op_len);
        msgpack_pack_object(&enc.pk, msg->params);
        break;
    }
    if (beam_enc_end(&enc, 0) < 0) {
        beam_enc_destroy(&enc);
        return NULL;
    }
    char *p = beam_enc_take(&enc, len);
    beam_enc_destroy(&enc);
    return p;
}

/* The codec's readers that look at a body without parsing it (a member's
 * peek at a frame's op, _beam's walk to a frame's first long bin): they
 * stay inside the bytes they are given, and a peek agrees with the parse
 * of any message that parses. */
static void peek_agrees(const char *body, size_t len, const beam_msg_t *msg, int parsed)
{
    beam_peek_t pk;
    long at = beam_msgpack_first_bin(body, len, 1);
    CHECK(at >= -1 && at <= (long)len);
    if (beam_msg_peek(body, len, &pk) < 0)
        return;
    CHECK(pk.type >= BEAM_MSG_REQUEST && pk.type <= BEAM_MSG_PUSH);
    if (pk.op)
        CHECK(pk.op >= body && pk.op + pk.op_len <= body + len);
    if (!parsed)
        return;
    CHECK(pk.type == msg->type);
    if (msg->type != BEAM_MSG_PUSH)
        CHECK(pk.msgid == msg->msgid);
    /* the same op: msgpack-c gives an empty str no pointer, the peek one
     * into body, so an empty op is compared by its length alone */
    if (msg->type != BEAM_MSG_REPLY)
        CHECK(pk.op_len == msg->op_len && (pk.op_len == 0 || pk.op == msg->op));
}

/* One frame body: validate, parse, read every field, and check that encoding
 * what was parsed is stable (encode(parse(encode(m))) == encode(m)). */
static void exercise(const char *body, size_t len, const beam_limits_t *lim)
{
    beam_msg_t msg;
    char err[160];
    int checked = beam_msgpack_check(body, len, lim, err, sizeof err);
    int rc = beam_msg_parse(body, len, lim, &msg, err, sizeof err);
    peek_agrees(body, len, &msg, rc == 0);
    if (checked < 0)
        CHECK(rc < 0);
#ifdef BEAM_FUZZ_STRICT
    if (checked == 0 && rc < 0)
        CHECK(strcmp(err, "msgpack could not be unpacked") != 0);
#endif
    if (rc < 0) {
        CHECK(memchr(err, '\0', sizeof err) != NULL && err[0] != '\0');
        return;
    }
    CHECK(msg.type == BEAM_MSG_REQUEST || msg.type == BEAM_MSG_REPLY || msg.type == BEAM_MSG_PUSH);
    if (msg.type != BEAM_MSG_REPLY)
        CHECK(msg.params.type == MSGPACK_OBJECT_MAP);
    touch_map(&msg.params);
    if (msg.type == BEAM_MSG_REPLY)
        touch_map(&msg.error);

    size_t n1;
    char *once = reencode(&msg, &n1);
    beam_msg_destroy(&msg);
    if (!once)
        return;
    /* parse our own encoding back: it must pass, and encode the same */
    CHECK(n1 >= BEAM_FRAME_HEADER);
    beam_limits_t loose = *lim;
    loose.max_frame = UINT32_MAX;
    loose.max_str = UINT32_MAX;
    beam_msg_t again;
    /* same shape, same or shorter encodings: what passed once passes again */
    CHECK(beam_msg_parse(once + BEAM_FRAME_HEADER, n1 - BEAM_FRAME_HEADER, &loose, &again, err,
                         sizeof err) == 0);
    size_t n2;
    char *twice = reencode(&again, &n2);
    CHECK(twice != NULL);
    CHECK(n1 == n2 && memcmp(once, twice, n1) == 0);
    free(twice);
    beam_msg_destroy(&again);
    free(once);
}

typedef struct pass_s {
    uint64_t hash;
    size_t frames;
    int rc;
} pass_t;

static void hash_bytes(uint64_t *h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        *h = (*h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    *h = (*h ^ n) * 0x100000001b3ull;
}

/* Feeds data in pieces of `step` bytes (0: all at once) and takes frames as
 * they come; the first pass also exercises each frame. */
static void stream(const uint8_t *data, size_t size, size_t step, const beam_limits_t *lim,
                   int parse, pass_t *out)
{
    beam_decoder_t dec;
    beam_decoder_init(&dec, lim);
    out->hash = 0xcbf29ce484222325ull;
    out->frames = 0;
    out->rc = 0;
    size_t off = 0;
    do {
        size_t n = step == 0 ? size : (size - off < step ? size - off : step);
        if (beam_decoder_feed(&dec, (const char *)data + off, n) < 0) {
            out->rc = -1;
            break;
        }
        off += n;
        const char *frame;
        size_t len;
        int rc;
        while ((rc = beam_decoder_next(&dec, &frame, &len)) == 1) {
            CHECK(len >= 1 && len <= lim->max_frame);
            hash_bytes(&out->hash, frame, len);
            out->frames++;
            if (parse)
                exercise(frame, len, lim);
        }
        if (rc < 0) {
            CHECK(dec.failed && dec.err[0] != '\0');
            CHECK(beam_decoder_next(&dec, &frame, &len) == -1); /* sticky */
            out->rc = -1;
            break;
        }
    } while (off < size);
    beam_decoder_destroy(&dec);
}

/* Reads the input the way beamd does, through beam_decoder_space/commit in
 * pieces of at most `step` bytes, with frames of 16 bytes and up in buffers
 * of their own (every other one taken by the caller): the same frames come out. */
static void stream_space(const uint8_t *data, size_t size, size_t step, const beam_limits_t *lim, pass_t *out)
{
    beam_decoder_t dec;
    beam_decoder_init(&dec, lim);
    dec.own_min = 16;
    out->hash = 0xcbf29ce484222325ull;
    out->frames = 0;
    out->rc = 0;
    size_t off = 0;
    do {
        char *p;
        size_t room;
        if (beam_decoder_space(&dec, &p, &room) < 0) {
            out->rc = -1;
            break;
        }
        CHECK(room > 0);
        size_t n = size - off < step ? size - off : step;
        if (n > room)
            n = room;
        memcpy(p, data + off, n);
        beam_decoder_commit(&dec, n);
        off += n;
        const char *frame;
        size_t len;
        int rc;
        while ((rc = beam_decoder_next(&dec, &frame, &len)) == 1) {
            CHECK(len >= 1 && len <= lim->max_frame);
            hash_bytes(&out->hash, frame, len);
            if (out->frames++ % 2) {
                char *own = beam_decoder_take(&dec);
                CHECK(!own || own == frame);
                free(own);
            }
        }
        if (rc < 0) {
            CHECK(dec.failed && dec.err[0] != '\0');
            CHECK(beam_decoder_next(&dec, &frame, &len) == -1); /* sticky */
            out->rc = -1;
            break;
        }
    } while (off < size);
    beam_decoder_destroy(&dec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    beam_limits_t lim;
    beam_limits_default(&lim);
    /* small limits so the fuzzer reaches them with small inputs */
    lim.max_frame = 1u << 16;
    lim.max_items = 1u << 12;
    lim.max_str = 1u << 10;

    /* the input as one frame body */
    exercise((const char *)data, size, &lim);

    /* the input as a stream, whole and in pieces: the same frames come out */
    pass_t whole, pieces;
    stream(data, size, 0, &lim, 1, &whole);
    stream(data, size, size % 7 + 1, &lim, 0, &pieces);
    CHECK(whole.frames == pieces.frames);
    CHECK(whole.hash == pieces.hash);
    CHECK(whole.rc == pieces.rc);
    pass_t spaced;
    stream_space(data, size, size % 13 + 1, &lim, &spaced);
    CHECK(whole.frames == spaced.frames);
    CHECK(whole.hash == spaced.hash);
    CHECK(whole.rc == spaced.rc);
    return 0;
}
