/* decoder.c — the frame decoder of include/beam/decoder.h: no I/O, every
 * length checked against the limits before anything is allocated for it. */
#include "beam/decoder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void beam_limits_default(beam_limits_t *lim)
{
    lim->max_frame = BEAM_DEFAULT_MAX_FRAME;
    lim->max_depth = BEAM_DEFAULT_MAX_DEPTH;
    lim->max_items = BEAM_DEFAULT_MAX_ITEMS;
    lim->max_str = BEAM_DEFAULT_MAX_STR;
}

int beam_frame_header(const char *p, uint32_t max_frame, uint32_t *n, char *err, size_t errlen)
{
    const unsigned char *u = (const unsigned char *)p;
    uint32_t v = (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
    if (v == 0 || v > max_frame) {
        if (err)
            snprintf(err, errlen, "frame length %u is outside 1..%u", v, max_frame);
        return -1;
    }
    *n = v;
    return 0;
}

void beam_decoder_init(beam_decoder_t *dec, const beam_limits_t *lim)
{
    memset(dec, 0, sizeof *dec);
    dec->lim = *lim;
    dec->own_min = BEAM_DECODER_OWN;
}

void beam_decoder_destroy(beam_decoder_t *dec)
{
    free(dec->buf);
    free(dec->own);
    free(dec->given);
    dec->buf = dec->own = dec->given = NULL;
    dec->len = dec->pos = dec->cap = dec->scan = dec->own_at = 0;
    dec->own_len = dec->own_have = 0;
}

static int decoder_oom(beam_decoder_t *dec)
{
    dec->failed = 1;
    snprintf(dec->err, sizeof dec->err, "out of memory buffering input");
    return -1;
}

/* Makes room for want more bytes at the shared buffer's tail: starts over
 * when everything was taken, else moves what is held to the front, then
 * grows. */
static int decoder_reserve(beam_decoder_t *dec, size_t want)
{
    if (dec->pos > 0 && dec->pos == dec->len) {
        dec->pos = dec->len = dec->scan = dec->own_at = 0;
        if (dec->cap > BEAM_DECODER_KEEP && want <= BEAM_DECODER_KEEP) {
            /* a large frame went through and nothing is held: give its
             * buffer back rather than keep it for the connection's life */
            free(dec->buf);
            dec->buf = NULL;
            dec->cap = 0;
        }
    } else if (dec->pos > 0 && dec->len + want > dec->cap) {
        memmove(dec->buf, dec->buf + dec->pos, dec->len - dec->pos);
        dec->len -= dec->pos;
        dec->scan -= dec->pos;
        dec->own_at = dec->own_at >= dec->pos ? dec->own_at - dec->pos : 0;
        dec->pos = 0;
    }
    if (dec->len + want > dec->cap) {
        size_t cap = dec->cap ? dec->cap : (want >= BEAM_DECODER_READ ? BEAM_DECODER_READ : 4096);
        while (cap < dec->len + want)
            cap *= 2;
        char *nb = realloc(dec->buf, cap);
        if (!nb)
            return decoder_oom(dec);
        dec->buf = nb;
        dec->cap = cap;
    }
    return 0;
}

static int own_filling(const beam_decoder_t *dec)
{
    return dec->own && dec->own_have < dec->own_len;
}

/* Walks the frames that became whole since the last commit. When the first
 * one that is not whole is large and no frame has its own buffer yet, that
 * buffer is made now, sized from the header (already checked against
 * max_frame), and the part of the body that came with the header moves
 * into it: the rest is read there directly. A bad header stops the walk;
 * beam_decoder_next reports it once the frames before it are taken. */
static void decoder_scan(beam_decoder_t *dec)
{
    for (;;) {
        size_t have = dec->len - dec->scan;
        if (have < BEAM_FRAME_HEADER)
            return;
        uint32_t n;
        if (beam_frame_header(dec->buf + dec->scan, dec->lim.max_frame, &n, NULL, 0) < 0)
            return;
        if (have - BEAM_FRAME_HEADER >= n) {
            dec->scan += BEAM_FRAME_HEADER + (size_t)n;
            continue;
        }
        if (n < dec->own_min || dec->own)
            return;
        char *own = malloc((size_t)n);
        if (!own)
            return; /* it is read into the shared buffer, which reports a failure */
        size_t part = have - BEAM_FRAME_HEADER;
        memcpy(own, dec->buf + dec->scan + BEAM_FRAME_HEADER, part);
        dec->own = own;
        dec->own_len = (size_t)n;
        dec->own_have = part;
        dec->own_at = dec->scan;
        dec->len = dec->scan;
        return;
    }
}

int beam_decoder_space(beam_decoder_t *dec, char **p, size_t *n)
{
    if (dec->failed)
        return -1;
    free(dec->given);
    dec->given = NULL;
    if (own_filling(dec)) {
        *p = dec->own + dec->own_have;
        *n = dec->own_len - dec->own_have;
        return 0;
    }
    if (decoder_reserve(dec, BEAM_DECODER_READ) < 0)
        return -1;
    /* no more than a read's worth: what one read takes in is what one turn
     * dispatches, so backpressure stops a client within that */
    *p = dec->buf + dec->len;
    *n = dec->cap - dec->len < BEAM_DECODER_READ ? dec->cap - dec->len : BEAM_DECODER_READ;
    return 0;
}

void beam_decoder_commit(beam_decoder_t *dec, size_t n)
{
    if (dec->failed || n == 0)
        return;
    if (own_filling(dec)) {
        dec->own_have += n;
        return;
    }
    dec->len += n;
    decoder_scan(dec);
}

int beam_decoder_feed(beam_decoder_t *dec, const char *data, size_t n)
{
    if (dec->failed)
        return -1;
    while (n > 0) {
        size_t k = n;
        if (own_filling(dec)) {
            if (k > dec->own_len - dec->own_have)
                k = dec->own_len - dec->own_have;
            memcpy(dec->own + dec->own_have, data, k);
        } else {
            if (decoder_reserve(dec, k) < 0)
                return -1;
            memcpy(dec->buf + dec->len, data, k);
        }
        beam_decoder_commit(dec, k);
        data += k;
        n -= k;
    }
    return 0;
}

int beam_decoder_next(beam_decoder_t *dec, const char **frame, size_t *len)
{
    if (dec->failed)
        return -1;
    free(dec->given);
    dec->given = NULL;
    if (dec->own && dec->pos == dec->own_at) {
        if (dec->own_have < dec->own_len)
            return 0;
        *frame = dec->given = dec->own;
        *len = dec->own_len;
        dec->own = NULL;
        dec->own_len = dec->own_have = 0;
        return 1;
    }
    size_t have = dec->len - dec->pos;
    if (have < BEAM_FRAME_HEADER)
        return 0;
    uint32_t n;
    if (beam_frame_header(dec->buf + dec->pos, dec->lim.max_frame, &n, dec->err, sizeof dec->err) < 0) {
        dec->failed = 1;
        return -1;
    }
    if (have - BEAM_FRAME_HEADER < n)
        return 0;
    *frame = dec->buf + dec->pos + BEAM_FRAME_HEADER;
    *len = (size_t)n;
    dec->pos += BEAM_FRAME_HEADER + (size_t)n;
    if (dec->scan < dec->pos)
        dec->scan = dec->pos;
    return 1;
}

char *beam_decoder_take(beam_decoder_t *dec)
{
    char *p = dec->given;
    dec->given = NULL;
    return p;
}

void beam_decoder_trim(beam_decoder_t *dec)
{
    if (dec->pos != dec->len)
        return;
    free(dec->buf);
    dec->buf = NULL;
    dec->cap = dec->len = dec->pos = dec->scan = dec->own_at = 0;
}
