/* frame.c — received frames: aligned placement, one parse, free. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

#define PB_ALIGN 64

pb_frame_t *pb_frame_new(const char *prefix, size_t n, size_t len)
{
    pb_frame_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    long at = beam_msgpack_first_bin(prefix, n, PB_VIEW_MIN); /* the codec's walk */
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
