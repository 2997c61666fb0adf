/* codec.h — beam's wire format: frames of one bounded msgpack value, the
 * I/O-free frame decoder, the envelope parser, field accessors and the encoder.
 * Every beam program links this one codec (docs/PROTOCOL.md). */
#ifndef BEAM_CODEC_H
#define BEAM_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include <msgpack.h>

#include "beam/protocol.h"
#include "beam/buf.h"
#include "beam/decoder.h"

/* Walks buf[0..len) and returns 0 when it is exactly one msgpack value within
 * lim (no ext types), else -1 with a message in err. Reads only. */
int beam_msgpack_check(const char *buf, size_t len, const beam_limits_t *lim,
                       char *err, size_t errlen);

/* Where the data of the first bin of at least min bytes starts in
 * buf[0..n) (a frame's first bytes, not necessarily all of it), or -1 when
 * there is none whose header lies there. Reads only; validates nothing
 * (_beam places a frame's memory by it, before it is whole). */
long beam_msgpack_first_bin(const char *buf, size_t n, size_t min);

/* One parsed envelope. Strings and bins point into the frame bytes, so the
 * frame must outlive the message; copy what you keep. */
typedef struct beam_msg_s {
    int type;
    uint64_t msgid;
    const char *op; /* request, push */
    uint32_t op_len;
    msgpack_object params; /* request, push: the params map; reply: result */
    msgpack_object error;  /* reply: nil or the error map */
    msgpack_zone zone;
    int has_zone;
} beam_msg_t;

/* Validates the frame against lim and parses the envelope. Returns 0, or -1
 * with a human message in err (msg needs no destroy then). */
int beam_msg_parse(const char *frame, size_t len, const beam_limits_t *lim,
                   beam_msg_t *msg, char *err, size_t errlen);
void beam_msg_destroy(beam_msg_t *msg);

/* An envelope's head read from a frame body's first bytes without parsing
 * the rest: its kind, msgid (request, reply) and op (request, push), in the
 * shapes beam's encoders write (a fixarray of 4 or 3, the kind a fixint, a
 * uint msgid, op a fixstr, str8 or str16). It validates nothing past those
 * bytes: a message acted upon is parsed whole (beam_msg_parse), a peek only
 * says which ones need not be. op points into body. */
typedef struct beam_peek_s {
    int type;
    uint64_t msgid;
    const char *op; /* NULL for a reply */
    uint32_t op_len;
} beam_peek_t;
/* 0 with out filled, or -1 when body does not start so (it may still be a
 * message, in another encoding: parse it to know). */
int beam_msg_peek(const char *body, size_t n, beam_peek_t *out);

/* One value read by its type: beam_value_X(o, ...) returns 0 with the value
 * out, -ENOENT when o is NULL or nil (absent), -EINVAL on another type. The
 * one set of type rules: beam_field_X below and fieldspec's tables use it. */
int beam_value_str(const msgpack_object *o, const char **s, uint32_t *len);
int beam_value_bin(const msgpack_object *o, const char **s, uint32_t *len);
int beam_value_id(const msgpack_object *o, size_t n, const char **id); /* a bin of exactly n bytes */
int beam_value_int(const msgpack_object *o, int64_t *v);
int beam_value_float(const msgpack_object *o, double *v); /* ints accepted */
int beam_value_bool(const msgpack_object *o, int *v);
int beam_value_array(const msgpack_object *o, const msgpack_object_array **a);
int beam_value_map(const msgpack_object *o, const msgpack_object_map **m);

/* Field access on a map with str keys: beam_value_X of the value under key.
 * Each returns 0 when found with the right type, -ENOENT when absent (or
 * nil), -EINVAL on a wrong type. */
const msgpack_object *beam_map_get(const msgpack_object *map, const char *key);
static inline int beam_field_str(const msgpack_object *map, const char *key, const char **s, uint32_t *len)
{
    return beam_value_str(beam_map_get(map, key), s, len);
}
static inline int beam_field_bin(const msgpack_object *map, const char *key, const char **s, uint32_t *len)
{
    return beam_value_bin(beam_map_get(map, key), s, len);
}
static inline int beam_field_int(const msgpack_object *map, const char *key, int64_t *v)
{
    return beam_value_int(beam_map_get(map, key), v);
}
static inline int beam_field_float(const msgpack_object *map, const char *key, double *v)
{
    return beam_value_float(beam_map_get(map, key), v);
}
static inline int beam_field_bool(const msgpack_object *map, const char *key, int *v)
{
    return beam_value_bool(beam_map_get(map, key), v);
}
static inline int beam_field_array(const msgpack_object *map, const char *key, const msgpack_object_array **a)
{
    return beam_value_array(beam_map_get(map, key), a);
}
static inline int beam_field_map(const msgpack_object *map, const char *key, const msgpack_object_map **m)
{
    return beam_value_map(beam_map_get(map, key), m);
}
/* A bin field of exactly n bytes. */
static inline int beam_field_id(const msgpack_object *map, const char *key, size_t n, const char **id)
{
    return beam_value_id(beam_map_get(map, key), n, id);
}

/* The encoder: a growable buffer with a msgpack packer writing into it. A
 * failed write (out of memory) is remembered and reported by beam_enc_end, so
 * the pack calls between need no checks of their own. A bin packed with
 * beam_pack_bin_buf may stay where it is: its bytes are then a span, a
 * reference to the buffer that holds them, placed at offset `at` of the
 * encoded bytes, and whoever sends the frame writes them from there. */
typedef struct beam_enc_span_s {
    size_t at;        /* offset in the encoded bytes where the span's bytes belong */
    const char *p;    /* the bytes, inside buf */
    size_t n;
    beam_buf_t *buf;  /* one reference, held by the encoder (then by its taker) */
} beam_enc_span_t;

/* A bin smaller than this is copied into the encoded bytes even when packed
 * with beam_pack_bin_buf: a span costs a write vector of its own. */
#define BEAM_ENC_SPAN_MIN (16u << 10)

typedef struct beam_enc_s {
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    size_t frame_start;
    int failed;
    beam_enc_span_t *spans;
    size_t nspans, capspans;
    size_t frame_spans; /* bytes the current frame's spans add to it */
} beam_enc_t;

void beam_enc_init(beam_enc_t *enc);
void beam_enc_destroy(beam_enc_t *enc);
/* Starts a frame; then pack one value (or use the envelope helpers). */
void beam_enc_begin(beam_enc_t *enc);
/* [0, msgid, op, then a map of nparams pairs follows] */
void beam_enc_request(beam_enc_t *enc, uint64_t msgid, const char *op, uint32_t nparams);
/* [1, msgid, nil, then the result value follows] */
void beam_enc_reply_ok(beam_enc_t *enc, uint64_t msgid);
/* [1, msgid, {code, message}, nil] — complete. */
void beam_enc_reply_error(beam_enc_t *enc, uint64_t msgid, const char *code, const char *message);
/* [2, op, then a map of nparams pairs follows] */
void beam_enc_push(beam_enc_t *enc, const char *op, uint32_t nparams);
/* [2, "error", {message}] — complete (the client is told why it is closed,
 * or what went wrong with a request it wanted no reply to). */
void beam_enc_error_push(beam_enc_t *enc, const char *message);
/* [2, "result", {obj, status, data}] — complete: a submit's result pushed
 * to its caller (docs/PROTOCOL.md); data is a span of buf when buf is not
 * NULL. status < 0, or len over BEAM_PUSH_MAX_DATA: [2, "result", {obj}]
 * (the caller fetches it with a get). */
void beam_enc_result_push(beam_enc_t *enc, const char *obj, int status, beam_buf_t *buf, const char *data,
                          size_t len);
/* Writes n big-endian at p (a frame header, a msgpack array32's count). */
static inline void beam_put_u32be(void *p, uint32_t n)
{
    unsigned char *h = p;
    h[0] = (unsigned char)(n >> 24);
    h[1] = (unsigned char)(n >> 16);
    h[2] = (unsigned char)(n >> 8);
    h[3] = (unsigned char)n;
}
/* Patches the frame header. Returns 0, or -1 if any write failed or the
 * frame is over max_frame (when max_frame is non-zero). */
int beam_enc_end(beam_enc_t *enc, uint32_t max_frame);
/* Hands the bytes (all frames so far) to the caller, who frees them with
 * free(); the encoder is left empty and reusable. Spans are copied in (the
 * bytes are whole), so this is for senders that need one contiguous buffer;
 * NULL (and *len 0) when that copy runs out of memory. */
char *beam_enc_take(beam_enc_t *enc, size_t *len);
/* Hands the bytes without the spans' bytes, and the spans (ordered by at,
 * each holding one buffer reference the caller must drop with
 * beam_buf_unref; the array is freed with free()). *spans is NULL when there
 * are none. The encoder is left empty and reusable. */
char *beam_enc_take_spans(beam_enc_t *enc, size_t *len, beam_enc_span_t **spans, size_t *nspans);

/* An array whose count is known only once its elements are packed: open
 * writes an array32 head and returns where its count lies in enc's bytes;
 * close writes the count there. */
size_t beam_pack_array_open(beam_enc_t *enc);
void beam_pack_array_close(beam_enc_t *enc, size_t at, uint32_t n);

void beam_pack_str(msgpack_packer *pk, const char *s);
void beam_pack_strn(msgpack_packer *pk, const char *s, size_t n);
void beam_pack_bin(msgpack_packer *pk, const void *p, size_t n);
/* Packs the bin p[0..n), which lies in buf: as a span (a new reference to
 * buf, no copy) when n is at least BEAM_ENC_SPAN_MIN, else copied. */
void beam_pack_bin_buf(beam_enc_t *enc, beam_buf_t *buf, const char *p, size_t n);
void beam_pack_key(msgpack_packer *pk, const char *key); /* same as beam_pack_str */

/* msgpack str equality with a C string. */
int beam_str_eq(const char *s, uint32_t len, const char *cstr);

#endif
