/* frame.h — one frame received from beamd, in memory of its own: its body,
 * placed so that the first bin of at least PB_VIEW_MIN bytes starts on a
 * 64-byte address (a value's out-of-band buffers, 64-byte aligned inside
 * it, then load aligned without a copy), and its envelope, parsed once.
 *
 * Ownership moves with the pointer: the reader makes a frame, a reply slot
 * or the push queue holds it, the thread that converts it frees it or hands
 * it to a Python owner object (convert.h) that frees it when the last
 * memoryview of it goes. No function here needs the GIL. */
#ifndef PYBEAM_FRAME_H
#define PYBEAM_FRAME_H

#include <stddef.h>

#include "beam/codec.h"

/* Bins at least this long arrive in Python as memoryviews of the frame
 * (convert.h); shorter ones (ids, small values) as bytes. */
#define PB_VIEW_MIN 1024

typedef struct pb_frame_s {
    char *mem;          /* the allocation (free) */
    char *data;         /* the body, inside mem */
    size_t len;         /* body bytes */
    size_t have;        /* body bytes arrived so far (== len once whole) */
    beam_msg_t msg;     /* valid after pb_frame_parse; points into data */
    int parsed;
    struct pb_frame_s *next; /* on the push queue */
} pb_frame_t;

/* A frame of len body bytes whose first n (n <= len) are at prefix, copied
 * in; the rest is read straight into data + have. The placement is chosen
 * from the first large bin whose header lies in the prefix. Returns NULL
 * when out of memory. */
pb_frame_t *pb_frame_new(const char *prefix, size_t n, size_t len);

/* Validates the whole body against lim and parses its envelope into
 * f->msg. Returns 0, or -EPROTO with a message in err. */
int pb_frame_parse(pb_frame_t *f, const beam_limits_t *lim, char *err, size_t errlen);

/* Frees the frame and its parsed message; NULL is fine. */
void pb_frame_free(pb_frame_t *f);

#endif
