/* buf.c — reference-counted byte buffers (include/beam/buf.h). */
#include "beam/buf.h"

#include <stdlib.h>

beam_buf_t *beam_buf_new(size_t len)
{
    beam_buf_t *b = malloc(sizeof *b + (len ? len : 1));
    if (!b)
        return NULL;
    b->refs = 1;
    b->len = len;
    b->data = (char *)(b + 1);
    b->release = NULL;
    return b;
}

beam_buf_t *beam_buf_wrap(char *data, size_t len)
{
    beam_buf_t *b = malloc(sizeof *b);
    if (!b) {
        free(data);
        return NULL;
    }
    b->refs = 1;
    b->len = len;
    b->data = data;
    b->release = NULL;
    return b;
}

beam_buf_t *beam_buf_ref(beam_buf_t *b)
{
    b->refs++;
    return b;
}

void beam_buf_unref(beam_buf_t *b)
{
    if (!b || --b->refs > 0)
        return;
    if (b->release) {
        b->release(b);
        return;
    }
    if (b->data != (char *)(b + 1))
        free(b->data);
    free(b);
}
