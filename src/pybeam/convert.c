/* convert.c — Python <-> msgpack, and FrameBytes, the owner that lets a
 * received payload reach pickle.loads as a memoryview. */
#include <errno.h>
#include <string.h>

#include "convert.h"

#define MAX_ENCODE_DEPTH 64
#define MAX_PARTS 128 /* long bins kept uncopied per frame; more are copied */

/* ---------- FrameBytes ---------- */

typedef struct frame_bytes_s {
    PyObject_HEAD
    pb_frame_t *frame;
} frame_bytes_t;

static int frame_bytes_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    pb_frame_t *f = ((frame_bytes_t *)self)->frame;
    if (!f) {
        PyErr_SetString(PyExc_ValueError, "an empty FrameBytes");
        return -1;
    }
    return PyBuffer_FillInfo(view, self, f->data, (Py_ssize_t)f->len, 1, flags);
}

static void frame_bytes_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    pb_frame_free(((frame_bytes_t *)self)->frame);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyType_Slot frame_bytes_slots[] = {
    {Py_bf_getbuffer, frame_bytes_getbuffer},
    {Py_tp_dealloc, frame_bytes_dealloc},
    {Py_tp_doc, "The bytes of one frame received from beamd (read-only buffer); the memoryviews of "
                "payloads received in it keep it alive."},
    {0, NULL},
};

PyType_Spec pb_frame_bytes_spec = {
    .name = "_beam.FrameBytes",
    .basicsize = sizeof(frame_bytes_t),
#ifdef Py_TPFLAGS_DISALLOW_INSTANTIATION
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, /* made only by pb_decode */
#else
    .flags = Py_TPFLAGS_DEFAULT,
#endif
    .slots = frame_bytes_slots,
};

/* ---------- Python -> msgpack ---------- */

void pb_out_init(pb_out_t *out)
{
    memset(out, 0, sizeof *out);
    beam_enc_init(&out->enc);
    beam_enc_begin(&out->enc);
}

void pb_out_destroy(pb_out_t *out)
{
    for (size_t i = 0; i < out->n_parts; i++)
        PyBuffer_Release(&out->parts[i].view);
    PyMem_Free(out->parts);
    out->parts = NULL;
    out->n_parts = out->cap_parts = 0;
    beam_enc_destroy(&out->enc);
}

int pb_out_end(pb_out_t *out, uint32_t max_frame)
{
    if (out->enc.failed)
        return -ENOMEM;
    size_t n = out->enc.sbuf.size - out->enc.frame_start - BEAM_FRAME_HEADER + out->part_bytes;
    if (n > UINT32_MAX || (max_frame && n > max_frame))
        return -EMSGSIZE;
    beam_put_u32be(out->enc.sbuf.data + out->enc.frame_start, (uint32_t)n);
    return 0;
}

/* The frame as at most cnt iovecs (2 * n_parts + 1 suffice); how many it
 * filled. */
static int out_iov(const pb_out_t *out, struct iovec *iov, int cnt)
{
    int k = 0;
    size_t from = 0;
    for (size_t i = 0; i < out->n_parts && k + 2 <= cnt; i++) {
        iov[k++] = (struct iovec){out->enc.sbuf.data + from, out->parts[i].at - from};
        iov[k++] = (struct iovec){out->parts[i].view.buf, (size_t)out->parts[i].view.len};
        from = out->parts[i].at;
    }
    if (k < cnt)
        iov[k++] = (struct iovec){out->enc.sbuf.data + from, out->enc.sbuf.size - from};
    return k;
}

int pb_out_write(const pb_out_t *out, pb_out_writer_t write, void *to)
{
    struct iovec small[9];
    int cnt = (int)(2 * out->n_parts + 1);
    struct iovec *iov = cnt <= 9 ? small : PyMem_Malloc((size_t)cnt * sizeof *iov);
    if (!iov)
        return -ENOMEM;
    int rc = write(to, iov, out_iov(out, iov, cnt));
    if (iov != small)
        PyMem_Free(iov);
    return rc;
}

/* A bin from any bytes-like: a long one is kept as a part, not copied. */
static int encode_bin(pb_out_t *out, PyObject *o)
{
    Py_buffer view;
    if (PyObject_GetBuffer(o, &view, PyBUF_CONTIG_RO) < 0)
        return -EINVAL;
    if (view.len < PB_VIEW_MIN || out->n_parts == MAX_PARTS) {
        beam_pack_bin(&out->enc.pk, view.buf, (size_t)view.len);
        PyBuffer_Release(&view);
        return 0;
    }
    if (out->n_parts == out->cap_parts) {
        size_t cap = out->cap_parts ? 2 * out->cap_parts : 4;
        pb_part_t *p = PyMem_Realloc(out->parts, cap * sizeof *p);
        if (!p) {
            PyBuffer_Release(&view);
            PyErr_NoMemory();
            return -ENOMEM;
        }
        out->parts = p;
        out->cap_parts = cap;
    }
    msgpack_pack_bin(&out->enc.pk, (size_t)view.len);
    out->parts[out->n_parts].at = out->enc.sbuf.size;
    out->parts[out->n_parts].view = view;
    out->n_parts++;
    out->part_bytes += (size_t)view.len;
    return 0;
}

static int encode(pb_out_t *out, PyObject *o, int depth);

static int encode_seq(pb_out_t *out, PyObject *o, int depth)
{
    PyObject *seq = PySequence_Fast(o, "expected a sequence");
    if (!seq)
        return -EINVAL;
    int rc = 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    msgpack_pack_array(&out->enc.pk, (size_t)n);
    for (Py_ssize_t i = 0; i < n && rc == 0; i++)
        rc = encode(out, PySequence_Fast_GET_ITEM(seq, i), depth + 1);
    Py_DECREF(seq);
    return rc;
}

static int encode_map(pb_out_t *out, PyObject *o, int depth)
{
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    msgpack_pack_map(&out->enc.pk, (size_t)PyDict_GET_SIZE(o));
    while (PyDict_Next(o, &pos, &k, &v)) {
        if (!PyUnicode_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "map keys sent to beamd must be str");
            return -EINVAL;
        }
        int rc = encode(out, k, depth + 1);
        if (rc == 0)
            rc = encode(out, v, depth + 1);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int encode_int(msgpack_packer *pk, PyObject *o)
{
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(o);
        if (PyErr_Occurred())
            return -EOVERFLOW;
        msgpack_pack_unsigned_long_long(pk, u);
        return 0;
    }
    if (overflow < 0 || (v == -1 && PyErr_Occurred())) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_OverflowError, "int too small to send to beamd");
        return -EOVERFLOW;
    }
    msgpack_pack_long_long(pk, v);
    return 0;
}

static int encode(pb_out_t *out, PyObject *o, int depth)
{
    msgpack_packer *pk = &out->enc.pk;
    if (depth > MAX_ENCODE_DEPTH) {
        PyErr_SetString(PyExc_ValueError, "value nested too deeply to send to beamd");
        return -EINVAL;
    }
    if (o == Py_None) {
        msgpack_pack_nil(pk);
    } else if (PyBool_Check(o)) {
        if (o == Py_True)
            msgpack_pack_true(pk);
        else
            msgpack_pack_false(pk);
    } else if (PyLong_Check(o)) {
        return encode_int(pk, o);
    } else if (PyFloat_Check(o)) {
        msgpack_pack_double(pk, PyFloat_AS_DOUBLE(o));
    } else if (PyUnicode_Check(o)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        if (!s)
            return -EINVAL;
        beam_pack_strn(pk, s, (size_t)n);
    } else if (PyBytes_Check(o) && PyBytes_GET_SIZE(o) < PB_VIEW_MIN) {
        beam_pack_bin(pk, PyBytes_AS_STRING(o), (size_t)PyBytes_GET_SIZE(o));
    } else if (PyBytes_Check(o) || PyByteArray_Check(o) || PyMemoryView_Check(o)) {
        return encode_bin(out, o);
    } else if (PyList_Check(o) || PyTuple_Check(o)) {
        return encode_seq(out, o, depth);
    } else if (PyDict_Check(o)) {
        return encode_map(out, o, depth);
    } else {
        PyErr_Format(PyExc_TypeError, "cannot send a %.100s to beamd", Py_TYPE(o)->tp_name);
        return -EINVAL;
    }
    return 0;
}

int pb_encode(pb_out_t *out, PyObject *o)
{
    return encode(out, o, 0);
}

/* ---------- msgpack -> Python ---------- */

void pb_decoding_init(pb_decoding_t *d, PyTypeObject *frame_type, pb_frame_t *frame)
{
    d->frame_type = frame_type;
    d->frame = frame;
    d->owner = NULL;
    d->whole = NULL;
}

/* A memoryview of the frame's bytes [ptr, ptr + size). */
static PyObject *decode_view(pb_decoding_t *d, const char *ptr, uint32_t size)
{
    if (!d->owner) {
        frame_bytes_t *owner = PyObject_New(frame_bytes_t, d->frame_type);
        if (!owner)
            return NULL;
        owner->frame = d->frame;  /* owns it from now on */
        d->owner = (PyObject *)owner;
        d->whole = PyMemoryView_FromObject(d->owner);
        if (!d->whole)
            return NULL;
    } else if (!d->whole) {
        return NULL; /* the first view failed: its error is already set */
    }
    Py_ssize_t start = ptr - d->frame->data;
    return PySequence_GetSlice(d->whole, start, start + (Py_ssize_t)size);
}

static PyObject *decode_array(pb_decoding_t *d, const msgpack_object_array *a)
{
    PyObject *l = PyList_New((Py_ssize_t)a->size);
    for (uint32_t i = 0; l && i < a->size; i++) {
        PyObject *v = pb_decode(d, &a->ptr[i]);
        if (!v) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, v);
    }
    return l;
}

static PyObject *decode_map(pb_decoding_t *d, const msgpack_object_map *m)
{
    PyObject *dict = PyDict_New();
    for (uint32_t i = 0; dict && i < m->size; i++) {
        PyObject *k = pb_decode(d, &m->ptr[i].key);
        PyObject *v = k ? pb_decode(d, &m->ptr[i].val) : NULL;
        if (!v || PyDict_SetItem(dict, k, v) < 0)
            Py_CLEAR(dict);
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    return dict;
}

PyObject *pb_decode(pb_decoding_t *d, const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: Py_RETURN_NONE;
    case MSGPACK_OBJECT_BOOLEAN: return PyBool_FromLong(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return PyLong_FromUnsignedLongLong(o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return PyLong_FromLongLong(o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return PyFloat_FromDouble(o->via.f64);
    case MSGPACK_OBJECT_STR:
        return PyUnicode_DecodeUTF8(o->via.str.ptr, (Py_ssize_t)o->via.str.size, "surrogateescape");
    case MSGPACK_OBJECT_BIN:
        if (o->via.bin.size >= PB_VIEW_MIN && d->frame)
            return decode_view(d, o->via.bin.ptr, o->via.bin.size);
        return PyBytes_FromStringAndSize(o->via.bin.ptr, (Py_ssize_t)o->via.bin.size);
    case MSGPACK_OBJECT_ARRAY: return decode_array(d, &o->via.array);
    case MSGPACK_OBJECT_MAP: return decode_map(d, &o->via.map);
    default:
        PyErr_SetString(PyExc_ValueError, "beamd sent a value of a kind beam does not use");
        return NULL;
    }
}

void pb_decoding_done(pb_decoding_t *d)
{
    if (!d->owner) {
        pb_frame_free(d->frame);
    } else {
        /* the parsed message is not needed any more; the bytes are, by the views */
        if (d->frame->parsed)
            beam_msg_destroy(&d->frame->msg);
        d->frame->parsed = 0;
        Py_XDECREF(d->whole);
        Py_DECREF(d->owner);
    }
    d->frame = NULL;
    d->owner = d->whole = NULL;
}
