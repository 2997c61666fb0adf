/* codec.c — the wire format of docs/PROTOCOL.md with no I/O: a bounded msgpack
 * walker, the envelope parser, field accessors, the encoder. */
#include "beam/codec.h"

#include <msgpack/unpack_define.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static uint64_t read_be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* The walker keeps, per open container, how many values it still expects.
 * A value that is not a container closes slots; a container pushes one. The
 * walk ends when the stack is empty, which must be exactly at the end. */
int beam_msgpack_check(const char *buf, size_t len, const beam_limits_t *lim,
                       char *err, size_t errlen)
{
    const unsigned char *p = (const unsigned char *)buf;
    /* msgpack-c's unpacker holds at most MSGPACK_EMBED_STACK_SIZE open
     * containers, empty ones included: never accept deeper than it can take */
    uint64_t stack[MSGPACK_EMBED_STACK_SIZE];
    uint32_t depth = 0;
    uint32_t max_depth = lim->max_depth < MSGPACK_EMBED_STACK_SIZE ? lim->max_depth : MSGPACK_EMBED_STACK_SIZE;
    uint64_t items = 0;
    size_t i = 0;

    if (len == 0)
        return fail(err, errlen, "empty frame");
    for (;;) {
        if (i >= len)
            return fail(err, errlen, "truncated msgpack value at byte %zu", i);
        unsigned char c = p[i++];
        uint64_t skip = 0, count = 0;
        int container = 0, is_str = 0; /* container: 1 array, 2 map */
        int hdr = 0;
        if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
            /* fixint, nil, bool */
        } else if (c >= 0x80 && c <= 0x8f) {
            container = 2, count = c & 0x0f;
        } else if (c >= 0x90 && c <= 0x9f) {
            container = 1, count = c & 0x0f;
        } else if (c >= 0xa0 && c <= 0xbf) {
            is_str = 1, skip = c & 0x1f;
        } else {
            switch (c) {
            case 0xc4: hdr = 1; break;                      /* bin 8/16/32 */
            case 0xc5: hdr = 2; break;
            case 0xc6: hdr = 4; break;
            case 0xca: skip = 4; break;                     /* float32 */
            case 0xcb: skip = 8; break;                     /* float64 */
            case 0xcc: case 0xd0: skip = 1; break;
            case 0xcd: case 0xd1: skip = 2; break;
            case 0xce: case 0xd2: skip = 4; break;
            case 0xcf: case 0xd3: skip = 8; break;
            case 0xd9: hdr = 1, is_str = 1; break;          /* str 8/16/32 */
            case 0xda: hdr = 2, is_str = 1; break;
            case 0xdb: hdr = 4, is_str = 1; break;
            case 0xdc: hdr = 2, container = 1; break;       /* array 16/32 */
            case 0xdd: hdr = 4, container = 1; break;
            case 0xde: hdr = 2, container = 2; break;       /* map 16/32 */
            case 0xdf: hdr = 4, container = 2; break;
            case 0xc1:
                return fail(err, errlen, "byte 0xc1 is never used in msgpack (at %zu)", i - 1);
            default:
                return fail(err, errlen, "msgpack ext types are not accepted (at %zu)", i - 1);
            }
            if (hdr) {
                if (len - i < (size_t)hdr)
                    return fail(err, errlen, "truncated msgpack header at byte %zu", i);
                uint64_t n = read_be(p + i, hdr);
                i += hdr;
                if (container)
                    count = n;
                else
                    skip = n;
            }
        }
        if (is_str && skip > lim->max_str)
            return fail(err, errlen, "str of %llu bytes is over the limit of %u",
                        (unsigned long long)skip, lim->max_str);
        if (skip > len - i)
            return fail(err, errlen, "truncated msgpack value at byte %zu", i);
        i += skip;
        if (container) {
            uint64_t values = container == 2 ? count * 2 : count;
            /* every value takes at least one byte */
            if (values > len - i)
                return fail(err, errlen, "container of %llu elements cannot fit in the %zu bytes left",
                            (unsigned long long)count, len - i);
            items += count;
            if (items > lim->max_items)
                return fail(err, errlen, "more than %u elements in one frame", lim->max_items);
            if (depth >= max_depth) /* an empty container takes a slot in msgpack-c too */
                return fail(err, errlen, "nesting deeper than %u", max_depth);
            if (values > 0) {
                stack[depth++] = values;
                continue;
            }
        }
        /* a complete value: close the containers it completes */
        while (depth > 0 && --stack[depth - 1] == 0)
            depth--;
        if (depth == 0)
            break;
    }
    if (i != len)
        return fail(err, errlen, "%zu stray bytes after the msgpack value", len - i);
    return 0;
}

static int obj_uint(const msgpack_object *o, uint64_t *v)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return -1;
    *v = o->via.u64;
    return 0;
}

int beam_msg_parse(const char *frame, size_t len, const beam_limits_t *lim,
                   beam_msg_t *msg, char *err, size_t errlen)
{
    memset(msg, 0, sizeof *msg);
    if (beam_msgpack_check(frame, len, lim, err, errlen) < 0)
        return -1;
    msgpack_object root;
    size_t off = 0;
    if (!msgpack_zone_init(&msg->zone, 2048))
        return fail(err, errlen, "out of memory");
    msg->has_zone = 1;
    if (msgpack_unpack(frame, len, &off, &msg->zone, &root) != MSGPACK_UNPACK_SUCCESS) {
        beam_msg_destroy(msg);
        return fail(err, errlen, "msgpack could not be unpacked");
    }
    uint64_t type;
    if (root.type != MSGPACK_OBJECT_ARRAY || root.via.array.size < 1 ||
        obj_uint(&root.via.array.ptr[0], &type) < 0) {
        beam_msg_destroy(msg);
        return fail(err, errlen, "a message is an array starting with its kind (0, 1 or 2)");
    }
    const msgpack_object *a = root.via.array.ptr;
    uint32_t n = root.via.array.size;
    msg->type = (int)type;
    switch (type) {
    case BEAM_MSG_REQUEST:
        if (n != 4 || obj_uint(&a[1], &msg->msgid) < 0 || a[2].type != MSGPACK_OBJECT_STR ||
            a[3].type != MSGPACK_OBJECT_MAP) {
            beam_msg_destroy(msg);
            return fail(err, errlen, "a request is [0, msgid uint, op str, params map]");
        }
        msg->op = a[2].via.str.ptr;
        msg->op_len = a[2].via.str.size;
        msg->params = a[3];
        return 0;
    case BEAM_MSG_REPLY:
        if (n != 4 || obj_uint(&a[1], &msg->msgid) < 0 ||
            (a[2].type != MSGPACK_OBJECT_NIL && a[2].type != MSGPACK_OBJECT_MAP)) {
            beam_msg_destroy(msg);
            return fail(err, errlen, "a reply is [1, msgid uint, error nil|map, result]");
        }
        msg->error = a[2];
        msg->params = a[3];
        return 0;
    case BEAM_MSG_PUSH:
        if (n != 3 || a[1].type != MSGPACK_OBJECT_STR || a[2].type != MSGPACK_OBJECT_MAP) {
            beam_msg_destroy(msg);
            return fail(err, errlen, "a push is [2, op str, params map]");
        }
        msg->op = a[1].via.str.ptr;
        msg->op_len = a[1].via.str.size;
        msg->params = a[2];
        return 0;
    default:
        beam_msg_destroy(msg);
        return fail(err, errlen, "unknown message kind %llu", (unsigned long long)type);
    }
}

static size_t be_n(const unsigned char *p, int n)
{
    size_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

long beam_msgpack_first_bin(const char *buf, size_t n, size_t min)
{
    const unsigned char *p = (const unsigned char *)buf;
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i++];
        size_t skip = 0;
        int hdr = 0, bin = 0;
        if (c <= 0x7f || c >= 0xe0 || (c >= 0x80 && c <= 0x9f) || c == 0xc0 || c == 0xc2 || c == 0xc3)
            continue; /* fixint, fixmap, fixarray, nil, bool: nothing to skip */
        if (c >= 0xa0 && c <= 0xbf) {
            skip = c & 0x1f;
        } else {
            switch (c) {
            case 0xc4: hdr = 1, bin = 1; break;
            case 0xc5: hdr = 2, bin = 1; break;
            case 0xc6: hdr = 4, bin = 1; break;
            case 0xd9: hdr = 1; break; /* str 8/16/32 */
            case 0xda: hdr = 2; break;
            case 0xdb: hdr = 4; break;
            case 0xca: skip = 4; break;
            case 0xcb: skip = 8; break;
            case 0xcc: case 0xd0: skip = 1; break;
            case 0xcd: case 0xd1: skip = 2; break;
            case 0xce: case 0xd2: skip = 4; break;
            case 0xcf: case 0xd3: skip = 8; break;
            case 0xdc: skip = 2; break; /* array/map 16/32: their counts */
            case 0xdd: skip = 4; break;
            case 0xde: skip = 2; break;
            case 0xdf: skip = 4; break;
            default: return -1;         /* ext: beam sends none */
            }
        }
        if (hdr) {
            if (n - i < (size_t)hdr)
                return -1;
            skip = be_n(p + i, hdr);
            i += (size_t)hdr;
            if (bin && skip >= min)
                return (long)i;
        }
        if (n - i < skip)
            return -1;
        i += skip;
    }
    return -1;
}

/* An unsigned int at b[*i..n) as msgpack encodes one (positive fixint,
 * uint8..64, or a signed form holding a value >= 0): 0, or -1. */
static int peek_uint(const unsigned char *b, size_t n, size_t *i, uint64_t *v)
{
    static const unsigned char width[4] = {1, 2, 4, 8};
    unsigned char t = b[*i];
    if (t <= 0x7f) {
        *v = t;
        (*i)++;
        return 0;
    }
    int sign = t >= 0xd0 && t <= 0xd3;
    if (!sign && !(t >= 0xcc && t <= 0xcf))
        return -1;
    size_t w = width[t & 3];
    if (*i + 1 + w > n || (sign && (b[*i + 1] & 0x80)))
        return -1;
    uint64_t x = 0;
    for (size_t k = 0; k < w; k++)
        x = x << 8 | b[*i + 1 + k];
    *v = x;
    *i += 1 + w;
    return 0;
}

int beam_msg_peek(const char *body, size_t n, beam_peek_t *out)
{
    const unsigned char *b = (const unsigned char *)body;
    size_t i = 2;
    memset(out, 0, sizeof *out);
    if (n < 3 || b[1] > BEAM_MSG_PUSH || b[0] != (b[1] == BEAM_MSG_PUSH ? 0x93 : 0x94))
        return -1;
    out->type = b[1];
    if (out->type != BEAM_MSG_PUSH && peek_uint(b, n, &i, &out->msgid) < 0)
        return -1;
    if (out->type == BEAM_MSG_REPLY)
        return 0;
    if (i >= n)
        return -1;
    size_t len, at;
    if ((b[i] & 0xe0) == 0xa0) { /* fixstr */
        len = b[i] & 0x1fu;
        at = i + 1;
    } else if (b[i] == 0xd9 && i + 1 < n) {
        len = b[i + 1];
        at = i + 2;
    } else if (b[i] == 0xda && i + 2 < n) {
        len = (size_t)b[i + 1] << 8 | b[i + 2];
        at = i + 3;
    } else {
        return -1;
    }
    if (at + len > n)
        return -1;
    out->op = body + at;
    out->op_len = (uint32_t)len;
    return 0;
}

void beam_msg_destroy(beam_msg_t *msg)
{
    if (msg->has_zone)
        msgpack_zone_destroy(&msg->zone);
    msg->has_zone = 0;
}

int beam_str_eq(const char *s, uint32_t len, const char *cstr)
{
    size_t n = strlen(cstr);
    return n == len && (n == 0 || memcmp(s, cstr, n) == 0); /* an empty str may have no pointer */
}

const msgpack_object *beam_map_get(const msgpack_object *map, const char *key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && beam_str_eq(k->via.str.ptr, k->via.str.size, key))
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

static int absent(const msgpack_object *o)
{
    return !o || o->type == MSGPACK_OBJECT_NIL;
}

int beam_value_str(const msgpack_object *o, const char **s, uint32_t *len)
{
    if (absent(o))
        return -ENOENT;
    if (o->type != MSGPACK_OBJECT_STR)
        return -EINVAL;
    *s = o->via.str.ptr;
    *len = o->via.str.size;
    return 0;
}

int beam_value_bin(const msgpack_object *o, const char **s, uint32_t *len)
{
    if (absent(o))
        return -ENOENT;
    if (o->type != MSGPACK_OBJECT_BIN)
        return -EINVAL;
    *s = o->via.bin.ptr;
    *len = o->via.bin.size;
    return 0;
}

int beam_value_id(const msgpack_object *o, size_t n, const char **id)
{
    uint32_t len;
    int rc = beam_value_bin(o, id, &len);
    if (rc == 0 && len != n)
        return -EINVAL;
    return rc;
}

int beam_value_int(const msgpack_object *o, int64_t *v)
{
    if (absent(o))
        return -ENOENT;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
        *v = (int64_t)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *v = o->via.i64;
    else
        return -EINVAL;
    return 0;
}

int beam_value_float(const msgpack_object *o, double *v)
{
    if (absent(o))
        return -ENOENT;
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: *v = o->via.f64; return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: *v = (double)o->via.u64; return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: *v = (double)o->via.i64; return 0;
    default: return -EINVAL;
    }
}

int beam_value_bool(const msgpack_object *o, int *v)
{
    if (absent(o))
        return -ENOENT;
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return -EINVAL;
    *v = o->via.boolean;
    return 0;
}

int beam_value_array(const msgpack_object *o, const msgpack_object_array **a)
{
    if (absent(o))
        return -ENOENT;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return -EINVAL;
    *a = &o->via.array;
    return 0;
}

int beam_value_map(const msgpack_object *o, const msgpack_object_map **m)
{
    if (absent(o))
        return -ENOENT;
    if (o->type != MSGPACK_OBJECT_MAP)
        return -EINVAL;
    *m = &o->via.map;
    return 0;
}

/* The packer's write callback: sbuffer's own, but a failure is remembered. */
static int enc_write(void *data, const char *buf, size_t len)
{
    beam_enc_t *enc = data;
    if (enc->failed)
        return -1;
    if (msgpack_sbuffer_write(&enc->sbuf, buf, len) != 0) {
        enc->failed = 1;
        return -1;
    }
    return 0;
}

void beam_enc_init(beam_enc_t *enc)
{
    memset(enc, 0, sizeof *enc);
    msgpack_sbuffer_init(&enc->sbuf);
    msgpack_packer_init(&enc->pk, enc, enc_write);
}

/* Drops the spans from index k on. */
static void spans_drop(beam_enc_t *enc, size_t k)
{
    while (enc->nspans > k)
        beam_buf_unref(enc->spans[--enc->nspans].buf);
}

void beam_enc_destroy(beam_enc_t *enc)
{
    msgpack_sbuffer_destroy(&enc->sbuf);
    memset(&enc->sbuf, 0, sizeof enc->sbuf);
    spans_drop(enc, 0);
    free(enc->spans);
    enc->spans = NULL;
    enc->capspans = 0;
}

void beam_enc_begin(beam_enc_t *enc)
{
    static const char zero[BEAM_FRAME_HEADER] = {0};
    enc->frame_start = enc->sbuf.size;
    enc->frame_spans = 0;
    enc_write(enc, zero, sizeof zero);
}

void beam_enc_request(beam_enc_t *enc, uint64_t msgid, const char *op, uint32_t nparams)
{
    beam_enc_begin(enc);
    msgpack_pack_array(&enc->pk, 4);
    msgpack_pack_uint8(&enc->pk, BEAM_MSG_REQUEST);
    msgpack_pack_uint64(&enc->pk, msgid);
    beam_pack_str(&enc->pk, op);
    msgpack_pack_map(&enc->pk, nparams);
}

void beam_enc_reply_ok(beam_enc_t *enc, uint64_t msgid)
{
    beam_enc_begin(enc);
    msgpack_pack_array(&enc->pk, 4);
    msgpack_pack_uint8(&enc->pk, BEAM_MSG_REPLY);
    msgpack_pack_uint64(&enc->pk, msgid);
    msgpack_pack_nil(&enc->pk);
}

void beam_enc_reply_error(beam_enc_t *enc, uint64_t msgid, const char *code, const char *message)
{
    beam_enc_begin(enc);
    msgpack_pack_array(&enc->pk, 4);
    msgpack_pack_uint8(&enc->pk, BEAM_MSG_REPLY);
    msgpack_pack_uint64(&enc->pk, msgid);
    msgpack_pack_map(&enc->pk, 2);
    beam_pack_key(&enc->pk, "code");
    beam_pack_str(&enc->pk, code);
    beam_pack_key(&enc->pk, "message");
    beam_pack_str(&enc->pk, message);
    msgpack_pack_nil(&enc->pk);
}

void beam_enc_push(beam_enc_t *enc, const char *op, uint32_t nparams)
{
    beam_enc_begin(enc);
    msgpack_pack_array(&enc->pk, 3);
    msgpack_pack_uint8(&enc->pk, BEAM_MSG_PUSH);
    beam_pack_str(&enc->pk, op);
    msgpack_pack_map(&enc->pk, nparams);
}

void beam_enc_error_push(beam_enc_t *enc, const char *message)
{
    beam_enc_push(enc, "error", 1);
    beam_pack_key(&enc->pk, "message");
    beam_pack_str(&enc->pk, message);
}

void beam_enc_result_push(beam_enc_t *enc, const char *obj, int status, beam_buf_t *buf, const char *data,
                          size_t len)
{
    int with_value = status >= 0 && len <= BEAM_PUSH_MAX_DATA;
    beam_enc_push(enc, "result", with_value ? 3 : 1);
    beam_pack_key(&enc->pk, "obj");
    beam_pack_bin(&enc->pk, obj, BEAM_OBJECT_ID_SIZE);
    if (!with_value)
        return;
    beam_pack_key(&enc->pk, "status");
    msgpack_pack_int(&enc->pk, status);
    beam_pack_key(&enc->pk, "data");
    if (buf)
        beam_pack_bin_buf(enc, buf, data, len);
    else
        beam_pack_bin(&enc->pk, data, len);
}

int beam_enc_end(beam_enc_t *enc, uint32_t max_frame)
{
    if (enc->failed)
        return -1;
    size_t n = enc->sbuf.size - enc->frame_start - BEAM_FRAME_HEADER + enc->frame_spans;
    if (n > UINT32_MAX || (max_frame && n > max_frame)) {
        /* drop the oversized frame, and the spans it had */
        size_t k = enc->nspans;
        while (k > 0 && enc->spans[k - 1].at > enc->frame_start)
            k--;
        spans_drop(enc, k);
        enc->sbuf.size = enc->frame_start;
        enc->frame_spans = 0;
        return -1;
    }
    beam_put_u32be(enc->sbuf.data + enc->frame_start, (uint32_t)n);
    return 0;
}

char *beam_enc_take_spans(beam_enc_t *enc, size_t *len, beam_enc_span_t **spans, size_t *nspans)
{
    *len = enc->sbuf.size;
    char *p = msgpack_sbuffer_release(&enc->sbuf);
    *spans = enc->spans;
    *nspans = enc->nspans;
    enc->spans = NULL;
    enc->nspans = enc->capspans = 0;
    enc->frame_spans = 0;
    enc->failed = 0;
    return p;
}

char *beam_enc_take(beam_enc_t *enc, size_t *len)
{
    beam_enc_span_t *spans;
    size_t nspans, n;
    char *p = beam_enc_take_spans(enc, &n, &spans, &nspans);
    if (!spans) {
        *len = n;
        return p;
    }
    size_t total = n;
    for (size_t i = 0; i < nspans; i++)
        total += spans[i].n;
    char *flat = p ? malloc(total) : NULL;
    if (flat) {
        size_t from = 0, to = 0;
        for (size_t i = 0; i < nspans; i++) {
            memcpy(flat + to, p + from, spans[i].at - from);
            to += spans[i].at - from;
            from = spans[i].at;
            memcpy(flat + to, spans[i].p, spans[i].n);
            to += spans[i].n;
        }
        memcpy(flat + to, p + from, n - from);
    }
    for (size_t i = 0; i < nspans; i++)
        beam_buf_unref(spans[i].buf);
    free(spans);
    free(p);
    *len = flat ? total : 0;
    return flat;
}

void beam_pack_bin_buf(beam_enc_t *enc, beam_buf_t *buf, const char *p, size_t n)
{
    if (n < BEAM_ENC_SPAN_MIN || !buf || enc->failed) {
        beam_pack_bin(&enc->pk, p, n);
        return;
    }
    if (enc->nspans == enc->capspans) {
        size_t cap = enc->capspans ? enc->capspans * 2 : 4;
        beam_enc_span_t *ns = realloc(enc->spans, cap * sizeof *ns);
        if (!ns) {
            beam_pack_bin(&enc->pk, p, n); /* a copy still works */
            return;
        }
        enc->spans = ns;
        enc->capspans = cap;
    }
    msgpack_pack_bin(&enc->pk, n);
    if (enc->failed)
        return;
    beam_enc_span_t *sp = &enc->spans[enc->nspans++];
    sp->at = enc->sbuf.size;
    sp->p = p;
    sp->n = n;
    sp->buf = beam_buf_ref(buf);
    enc->frame_spans += n;
}

void beam_pack_strn(msgpack_packer *pk, const char *s, size_t n)
{
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

size_t beam_pack_array_open(beam_enc_t *enc)
{
    static const char array32[5] = {(char)0xdd, 0, 0, 0, 0};
    /* the raw head: msgpack-c packs the smallest form, and the count is not known yet */
    msgpack_pack_bin_body(&enc->pk, array32, sizeof array32);
    return enc->sbuf.size - 4;
}

void beam_pack_array_close(beam_enc_t *enc, size_t at, uint32_t n)
{
    if (!enc->failed && at + 4 <= enc->sbuf.size)
        beam_put_u32be(enc->sbuf.data + at, n);
}

void beam_pack_str(msgpack_packer *pk, const char *s)
{
    beam_pack_strn(pk, s, strlen(s));
}

void beam_pack_key(msgpack_packer *pk, const char *key)
{
    beam_pack_str(pk, key);
}

void beam_pack_bin(msgpack_packer *pk, const void *p, size_t n)
{
    msgpack_pack_bin(pk, n);
    msgpack_pack_bin_body(pk, p, n);
}
