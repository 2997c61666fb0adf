/* make_corpus.c — writes the seed corpus for fuzz_codec (tests/fuzz/corpus/codec/):
 * a handful of valid frames made by beam's own encoder, one stream per file.
 *   cc -Iinclude src/codec.c src/decoder.c src/buf.c tests/fuzz/make_corpus.c $(pkg-config --cflags --libs msgpack) \
 *     -o make_corpus && ./make_corpus tests/fuzz/corpus/codec */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "beam/codec.h"

static const char obj_id[28] = "\x00\x00\x00\x01" "\x00\x00\x00\x02" "\x00\x00\x00\x00\x00\x00\x00\x07"
                               "\x00\x00\x00\x02" "\xff\xff\xff\xff" "\x00\x00\x00\x00";
static const char actor_id[16] = "\x00\x00\x00\x01" "\x00\x00\x00\x02" "\x00\x00\x00\x01" "\x00\x00\x00\x02";

static int write_file(const char *dir, const char *name, beam_enc_t *enc)
{
    char path[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *buf = beam_enc_take(enc, &len);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        free(buf);
        return -1;
    }
    free(buf);
    return 0;
}

static void put(beam_enc_t *enc, uint64_t msgid)
{
    beam_enc_request(enc, msgid, "put", 4);
    beam_pack_key(&enc->pk, "obj");
    beam_pack_bin(&enc->pk, obj_id, sizeof obj_id);
    beam_pack_key(&enc->pk, "data");
    beam_pack_bin(&enc->pk, "\x80\x05\x95\x01", 4);
    beam_pack_key(&enc->pk, "objects");
    msgpack_pack_array(&enc->pk, 1);
    beam_pack_bin(&enc->pk, obj_id, sizeof obj_id);
    beam_pack_key(&enc->pk, "actors");
    msgpack_pack_array(&enc->pk, 1);
    beam_pack_bin(&enc->pk, actor_id, sizeof actor_id);
    beam_enc_end(enc, 0);
}

static void get(beam_enc_t *enc, uint64_t msgid)
{
    beam_enc_request(enc, msgid, "get", 2);
    beam_pack_key(&enc->pk, "objs");
    msgpack_pack_array(&enc->pk, 2);
    beam_pack_bin(&enc->pk, obj_id, sizeof obj_id);
    beam_pack_bin(&enc->pk, obj_id, sizeof obj_id);
    beam_pack_key(&enc->pk, "timeout_ms");
    msgpack_pack_int64(&enc->pk, -1);
    beam_enc_end(enc, 0);
}

static void values(beam_enc_t *enc, uint64_t msgid)
{
    beam_enc_reply_ok(enc, msgid);
    msgpack_pack_map(&enc->pk, 1);
    beam_pack_key(&enc->pk, "values");
    msgpack_pack_array(&enc->pk, 2);
    msgpack_pack_array(&enc->pk, 2);
    msgpack_pack_int(&enc->pk, 0);
    beam_pack_bin(&enc->pk, "value", 5);
    msgpack_pack_nil(&enc->pk);
    beam_enc_end(enc, 0);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    beam_enc_t enc;
    int rc = 0;
    beam_enc_init(&enc);

    beam_enc_request(&enc, 1, "hello", 2);
    beam_pack_key(&enc.pk, "role");
    beam_pack_str(&enc.pk, "driver");
    beam_pack_key(&enc.pk, "pid");
    msgpack_pack_int(&enc.pk, 4242);
    beam_enc_end(&enc, 0);
    rc |= write_file(dir, "request_hello", &enc);

    put(&enc, 0);
    rc |= write_file(dir, "request_put", &enc);

    get(&enc, 7);
    rc |= write_file(dir, "request_get", &enc);

    beam_enc_request(&enc, 9, "wait", 3);
    beam_pack_key(&enc.pk, "objs");
    msgpack_pack_array(&enc.pk, 1);
    beam_pack_bin(&enc.pk, obj_id, sizeof obj_id);
    beam_pack_key(&enc.pk, "num_returns");
    msgpack_pack_int(&enc.pk, 1);
    beam_pack_key(&enc.pk, "timeout_ms");
    msgpack_pack_int(&enc.pk, 0);
    beam_enc_end(&enc, 0);
    rc |= write_file(dir, "request_wait", &enc);

    /* every scalar and container kind: floats, negatives, nil, bools, nesting */
    beam_enc_request(&enc, 10, "create_actor", 6);
    beam_pack_key(&enc.pk, "num_gpus");
    msgpack_pack_double(&enc.pk, 0.5);
    beam_pack_key(&enc.pk, "num_cpus");
    msgpack_pack_float(&enc.pk, 1.0f);
    beam_pack_key(&enc.pk, "resources");
    msgpack_pack_map(&enc.pk, 2);
    beam_pack_key(&enc.pk, "node:10.0.0.7");
    msgpack_pack_double(&enc.pk, 0.001);
    beam_pack_key(&enc.pk, "nested");
    msgpack_pack_array(&enc.pk, 3);
    msgpack_pack_array(&enc.pk, 2);
    msgpack_pack_int64(&enc.pk, -1);
    msgpack_pack_int64(&enc.pk, INT64_MIN);
    msgpack_pack_map(&enc.pk, 0);
    msgpack_pack_uint64(&enc.pk, UINT64_MAX);
    beam_pack_key(&enc.pk, "noset_cuda");
    msgpack_pack_true(&enc.pk);
    beam_pack_key(&enc.pk, "name");
    msgpack_pack_nil(&enc.pk);
    beam_pack_key(&enc.pk, "env");
    msgpack_pack_map(&enc.pk, 1);
    beam_pack_key(&enc.pk, "CUDA_VISIBLE_DEVICES");
    beam_pack_str(&enc.pk, "0,1");
    beam_enc_end(&enc, 0);
    rc |= write_file(dir, "request_nested", &enc);

    /* nested to the default depth limit (32 open containers) */
    beam_enc_request(&enc, 12, "deep", 1);
    beam_pack_key(&enc.pk, "k");
    for (int i = 0; i < 30; i++)
        msgpack_pack_array(&enc.pk, 1);
    msgpack_pack_int(&enc.pk, 1);
    beam_enc_end(&enc, 0);
    rc |= write_file(dir, "request_deep", &enc);

    values(&enc, 7);
    rc |= write_file(dir, "reply_values", &enc);

    beam_enc_reply_error(&enc, 8, "timeout", "Get timed out: some object(s) not ready.");
    beam_enc_end(&enc, 0);
    rc |= write_file(dir, "reply_error", &enc);

    beam_enc_push(&enc, "log", 2);
    beam_pack_key(&enc.pk, "stream");
    msgpack_pack_int(&enc.pk, 2);
    beam_pack_key(&enc.pk, "text");
    beam_pack_str(&enc.pk, "(Worker pid=7) hello\n");
    beam_enc_end(&enc, 0);
    rc |= write_file(dir, "push_log", &enc);

    /* several frames in one stream */
    put(&enc, 0);
    get(&enc, 11);
    values(&enc, 11);
    beam_enc_push(&enc, "error", 1);
    beam_pack_key(&enc.pk, "message");
    beam_pack_str(&enc.pk, "protocol error");
    beam_enc_end(&enc, 0);
    rc |= write_file(dir, "stream_mixed", &enc);

    beam_enc_destroy(&enc);
    return rc ? 1 : 0;
}
