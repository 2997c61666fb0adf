/* convert.h — Python values to msgpack and back, as beam's protocol uses
 * them: None, bool, int (64-bit), float, str, bytes-likes (bin), list and
 * tuple (array), dict with str keys (map). Needs the GIL throughout.
 *
 * An encoded bin of at least PB_VIEW_MIN bytes is not copied: the encoder
 * packs its header and keeps a view of the Python buffer, to be written
 * in place (scatter/gather, wire.h) while the GIL is released.
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

#include <sys/uio.h>

#include "beam/codec.h"
#include "frame.h"

/* The FrameBytes type (module state holds it): a read-only buffer over one
 * pb_frame_t's body, which it owns. */
extern PyType_Spec pb_frame_bytes_spec;

/* One frame being encoded: the packed bytes, and the long bins that go
 * between them uncopied (part i's bytes follow enc's bytes [0, at)). */
typedef struct pb_part_s {
    size_t at;
    Py_buffer view; /* held until pb_out_destroy */
} pb_part_t;

typedef struct pb_out_s {
    beam_enc_t enc;
    pb_part_t *parts;
    size_t n_parts, cap_parts;
    size_t part_bytes; /* the parts' bytes together */
} pb_out_t;

/* Starts a frame (its header, then pack the value with pb_encode). */
void pb_out_init(pb_out_t *out);
/* Releases the views and the bytes. GIL held. */
void pb_out_destroy(pb_out_t *out);
/* Patches the frame header with the whole length, parts included.
 * Returns 0, -EMSGSIZE when it is over max_frame, -ENOMEM when packing ran
 * out of memory (no Python exception set). */
int pb_out_end(pb_out_t *out, uint32_t max_frame);
/* A writer of one frame's iovecs (pb_sendv, pb_dsock_write): 0 or a
 * negative errno; it may advance the iovecs as it writes. */
typedef int (*pb_out_writer_t)(void *to, struct iovec *iov, int cnt);
/* Hands the frame to write as one array of iovecs (the bytes packed, each
 * part from its own buffer), on the stack when out has few parts. write's
 * result, or -ENOMEM. GIL held. */
int pb_out_write(const pb_out_t *out, pb_out_writer_t write, void *to);

/* Packs o into out's frame. Returns 0, or a negative errno with a Python
 * exception set (-EINVAL for a value beam does not send, -EOVERFLOW for an
 * int out of range, -ENOMEM). */
int pb_encode(pb_out_t *out, PyObject *o);

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
