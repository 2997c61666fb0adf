/* frame.c — received frames: aligned placement, one parse, free. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

#define PB_ALIGN 64

static uint32_t frame_be(const unsigned char *p, int n)
{
    uint32_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* Where the data of the first bin of at least PB_VIEW_MIN bytes starts in
 * p[0..n), or -1 when there is none whose header lies there. msgpack is a
 * prefix-order stream, so walking item headers one after another visits
 * every value without tracking the containers. */
static long frame_first_large_bin(const char *buf, size_t n)
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
            skip = frame_be(p + i, hdr);
            i += (size_t)hdr;
            if (bin && skip >= PB_VIEW_MIN)
                return (long)i;
        }
        if (n - i < skip)
            return -1;
        i += skip;
    }
    return -1;
}

pb_frame_t *pb_frame_new(const char *prefix, size_t n, size_t len)
{
    pb_frame_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    long at = frame_first_large_bin(prefix, n);
    size_t shift = at < 0 ? 0 : (PB_ALIGN - (size_t)at % PB_ALIGN) % PB_ALIGN;
    void *mem = NULL;
    if (posix_memalign(&mem, PB_ALIGN, shift + (len ? len : 1)) != 0) {
        free(f);
        return NULL;
    }
    f->mem = mem;
    f->data = f->mem + shift;
    f->len = len;
    f->have = n;
    if (n)
        memcpy(f->data, prefix, n);
    return f;
}

int pb_frame_parse(pb_frame_t *f, const beam_limits_t *lim, char *err, size_t errlen)
{
    if (beam_msg_parse(f->data, f->len, lim, &f->msg, err, errlen) < 0)
        return -EPROTO;
    f->parsed = 1;
    return 0;
}

void pb_frame_free(pb_frame_t *f)
{
    if (!f)
        return;
    if (f->parsed)
        beam_msg_destroy(&f->msg);
    free(f->mem);
    free(f);
}
