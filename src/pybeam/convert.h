/* convert.h — Python values to msgpack and back, as beam's protocol uses
 * them: None, bool, int (64-bit), float, str, bytes-likes (bin), list and
 * tuple (array), dict with str keys (map). Needs the GIL throughout.
 *
 * A decoded bin of at least PB_VIEW_MIN bytes (a value's pickle) is a
 * read-only memoryview of the received frame, not a copy: the frame then
 * belongs to a FrameBytes object (a bytes-like owner) that the memoryviews
 * keep alive and that frees it when the last of them goes. Shorter bins
 * (ids, small values) are bytes. */
#ifndef PYBEAM_CONVERT_H
#define PYBEAM_CONVERT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "beam/codec.h"
#include "frame.h"

/* The FrameBytes type (module state holds it): a read-only buffer over one
 * pb_frame_t's body, which it owns. */
extern PyType_Spec pb_frame_bytes_spec;

/* Packs o into pk. Returns 0, or a negative errno with a Python exception
 * set (-EINVAL for a value beam does not send, -EOVERFLOW for an int out of
 * range). */
int pb_encode(msgpack_packer *pk, PyObject *o);

/* Decoding one frame's value: the frame, and what was made from it. */
typedef struct pb_decoding_s {
    PyTypeObject *frame_type; /* FrameBytes */
    pb_frame_t *frame;        /* the frame being decoded */
    PyObject *owner;          /* its FrameBytes, once a bin needed a view */
    PyObject *whole;          /* a memoryview of all of it, sliced per bin */
} pb_decoding_t;

/* Starts decoding values that point into frame; owns frame from now on. */
void pb_decoding_init(pb_decoding_t *d, PyTypeObject *frame_type, pb_frame_t *frame);
/* A new reference to o as a Python value, or NULL with an exception set. */
PyObject *pb_decode(pb_decoding_t *d, const msgpack_object *o);
/* Ends decoding: frees the frame unless memoryviews of it are alive (then
 * the last of them frees it). */
void pb_decoding_done(pb_decoding_t *d);

#endif
