/* direct.c — _beam.DirectConn (direct.h): dsock.h's socket as a Python
 * object: frames encoded from Python values (convert.h), read with the GIL
 * let go and turned into Python values as beamd's pushes are. */
#define _GNU_SOURCE /* sched_getcpu */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "beam/codec.h"
#include "convert.h"
#include "direct.h"
#include "dsock.h"
#include "pb_client.h"

/* A read waits in slices this long, so the main thread runs Python's
 * signal handlers (^C) while it waits. */
#define DIRECT_SLICE_MS PB_RCVTIMEO_MS

typedef struct direct_s {
    PyObject_HEAD
    pb_dsock_t s;
    int reading;        /* a thread is in read (set and read with the GIL held) */
    int close_deferred; /* close() came while a read was in progress */
    int peer_cpu;       /* the CPU the peer last sent a result from (-1: none yet): direct_wait's early wake */
} direct_t;

static int dsock_write_to(void *s, struct iovec *iov, int cnt)
{
    return pb_dsock_write(s, iov, cnt);
}

/* The known ops' params, in the order read gives them as a tuple and
 * call/result take them (each op's keys; NULL ends a list). */
static const char *const CALL_KEYS[] = {"obj", "method", "args", "forgets", NULL};
static const char *const RESULT_KEYS[] = {"obj", "status", "data", NULL};
/* what a result carries: its keys, and the CPU it was sent from (direct_wait) */
static const char *const RESULT_SENT_KEYS[] = {"obj", "status", "data", "cpu", NULL};
static const char *const FORGET_KEYS[] = {"objs", NULL};

static const char *const *direct_keys(const char *op, size_t len)
{
    if (len == 4 && memcmp(op, "call", 4) == 0)
        return CALL_KEYS;
    if (len == 6 && memcmp(op, "result", 6) == 0)
        return RESULT_KEYS;
    if (len == 6 && memcmp(op, "forget", 6) == 0)
        return FORGET_KEYS;
    return NULL;
}

/* Encodes the push [2, op, params] (params: a dict, or values for keys)
 * and writes it; returns the bytes unwritten as a Python int. */
static PyObject *direct_push(direct_t *d, const char *op, PyObject *params, const char *const *keys,
                             PyObject *const *values)
{
    if (d->s.fd < 0) {
        PyErr_SetString(PyExc_ConnectionError, "the direct connection is closed");
        return NULL;
    }
    pb_out_t out;
    pb_out_init(&out);
    msgpack_pack_array(&out.enc.pk, 3);
    msgpack_pack_uint8(&out.enc.pk, BEAM_MSG_PUSH);
    beam_pack_str(&out.enc.pk, op);
    int bad = 0;
    if (params) {
        bad = pb_encode(&out, params) < 0;
    } else {
        size_t n = 0;
        while (keys[n])
            n++;
        msgpack_pack_map(&out.enc.pk, n);
        for (size_t i = 0; i < n && !bad; i++) {
            beam_pack_key(&out.enc.pk, keys[i]);
            bad = pb_encode(&out, values[i]) < 0;
        }
    }
    if (bad) {
        pb_out_destroy(&out);
        return NULL;
    }
    int rc = pb_out_end(&out, d->s.limits.max_frame);
    if (rc == -EMSGSIZE) {
        pb_out_destroy(&out);
        return PyErr_Format(PyExc_ValueError, "beam: the direct '%s' frame is larger than the frame limit (%u bytes)",
                            op, d->s.limits.max_frame);
    }
    if (rc == 0)
        rc = pb_out_write(&out, dsock_write_to, &d->s);
    pb_out_destroy(&out);
    if (rc < 0)
        return PyErr_NoMemory();
    return PyLong_FromSize_t(pb_dsock_unwritten(&d->s));
}

static PyObject *direct_send(direct_t *d, PyObject *args)
{
    const char *op;
    PyObject *params;
    if (!PyArg_ParseTuple(args, "sO!:send", &op, &PyDict_Type, &params))
        return NULL;
    return direct_push(d, op, params, NULL, NULL);
}

static PyObject *direct_call(direct_t *d, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "call(obj, method, args, forgets) takes 4 arguments");
        return NULL;
    }
    return direct_push(d, "call", NULL, CALL_KEYS, args);
}

static PyObject *direct_result(direct_t *d, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "result(obj, status, data) takes 3 arguments");
        return NULL;
    }
    PyObject *cpu = PyLong_FromLong(sched_getcpu());
    if (!cpu)
        return NULL;
    PyObject *values[] = {args[0], args[1], args[2], cpu};
    PyObject *r = direct_push(d, "result", NULL, RESULT_SENT_KEYS, values);
    Py_DECREF(cpu);
    return r;
}

static PyObject *direct_flush(direct_t *d, PyObject *unused)
{
    return PyLong_FromSize_t(pb_dsock_flush(&d->s));
}

static PyObject *direct_wait_writable(direct_t *d, PyObject *args)
{
    int timeout_ms;
    if (!PyArg_ParseTuple(args, "i:wait_writable", &timeout_ms))
        return NULL;
    if (d->s.fd >= 0 && pb_dsock_unwritten(&d->s) > 0) {
        struct pollfd p = {.fd = d->s.fd, .events = POLLOUT};
        Py_BEGIN_ALLOW_THREADS
        poll(&p, 1, timeout_ms);
        Py_END_ALLOW_THREADS
    }
    return direct_flush(d, NULL);
}

/* A known op's params as the tuple of its keys' values (None for a key
 * missing), in keys' order. GIL held. */
static PyObject *direct_decode_known(pb_decoding_t *dec, const msgpack_object_map *m, const char *const *keys)
{
    Py_ssize_t n = 0;
    while (keys[n])
        n++;
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t k = 0; t && k < n; k++) {
        size_t klen = strlen(keys[k]);
        PyObject *v = NULL;
        for (uint32_t i = 0; t && i < m->size && !v; i++) {
            const msgpack_object *key = &m->ptr[i].key;
            if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == klen &&
                memcmp(key->via.str.ptr, keys[k], klen) == 0) {
                v = pb_decode(dec, &m->ptr[i].val);
                if (!v)
                    Py_CLEAR(t);
            }
        }
        if (t && !v)
            v = Py_NewRef(Py_None);
        if (t)
            PyTuple_SET_ITEM(t, k, v);
    }
    return t;
}

/* The frames as [(op, params), ...]: a known op's params as a tuple
 * (direct_keys), another's as a dict; frees them. GIL held. */
static PyObject *direct_decode(direct_t *d, pb_dframe_t *head)
{
    PyTypeObject *frame_type = ((pb_module_state_t *)PyType_GetModuleState(Py_TYPE(d)))->FrameBytesType;
    PyObject *list = PyList_New(0);
    while (head) {
        pb_dframe_t *g = head;
        head = g->next;
        pb_frame_t *f = g->frame;
        free(g);
        PyObject *op = list ? PyUnicode_DecodeUTF8(f->msg.op, (Py_ssize_t)f->msg.op_len, "surrogateescape") : NULL;
        if (!op) {
            pb_frame_free(f); /* and the rest, once an error is set */
            Py_CLEAR(list);
            continue;
        }
        pb_decoding_t dec;
        pb_decoding_init(&dec, frame_type, f);
        const char *const *keys = direct_keys(f->msg.op, f->msg.op_len);
        PyObject *params = keys && f->msg.params.type == MSGPACK_OBJECT_MAP
                               ? direct_decode_known(&dec, &f->msg.params.via.map, keys)
                               : pb_decode(&dec, &f->msg.params);
        pb_decoding_done(&dec);
        PyObject *item = params ? PyTuple_Pack(2, op, params) : NULL;
        Py_DECREF(op);
        Py_XDECREF(params);
        if (!item || PyList_Append(list, item) < 0)
            Py_CLEAR(list);
        Py_XDECREF(item);
    }
    return list;
}

/* Waits at most timeout_ms (-1: without end) for whole frames, in slices
 * that let the signal handlers run; *head gets them (NULL at the timeout
 * or the end). 0, or -1 with an exception set (a handler raised). */
static int direct_wait(direct_t *d, int timeout_ms, pb_dframe_t **head)
{
    if (d->reading) {
        PyErr_SetString(PyExc_RuntimeError, "another thread reads this direct connection");
        return -1;
    }
    /* The early wake (dsock.c's blocking read) pays where the peer runs on
     * another CPU: there, the wake-up it brings forward is the late one of
     * a halted vCPU. On this CPU, it only costs: the woken caller, nice 0,
     * preempts the worker, niced as Ray's, to find nothing yet. Set here,
     * by the one reader: pump reads it without the GIL. */
    d->s.wake_early = d->peer_cpu < 0 || d->peer_cpu != sched_getcpu();
    int64_t deadline = timeout_ms < 0 ? -1 : pb_now_ns() + (int64_t)timeout_ms * 1000000;
    int rc = 0;
    d->reading = 1;
    for (;;) {
        int ms = DIRECT_SLICE_MS;
        if (deadline >= 0) {
            int64_t left = deadline - pb_now_ns();
            left = left <= 0 ? 0 : (left + 999999) / 1000000;
            ms = left < ms ? (int)left : ms;
        }
        Py_BEGIN_ALLOW_THREADS
        (void)pb_dsock_pump(&d->s, ms, head); /* -EINTR: as the end of a slice */
        Py_END_ALLOW_THREADS
        if (*head || d->s.ended || ms == 0 || (deadline >= 0 && pb_now_ns() >= deadline))
            break;
        /* a slice or a signal: the handlers run now (a no-op off the main thread) */
        if (PyErr_CheckSignals() < 0) {
            rc = -1;
            break;
        }
    }
    d->reading = 0;
    if (d->close_deferred)
        pb_dsock_close(&d->s);
    return rc;
}

static PyObject *direct_read(direct_t *d, PyObject *args)
{
    int timeout_ms = -1;
    if (!PyArg_ParseTuple(args, "|i:read", &timeout_ms))
        return NULL;
    pb_dframe_t *head = NULL;
    if (direct_wait(d, timeout_ms, &head) < 0)
        return NULL;
    if (head)
        return direct_decode(d, head);
    if (d->s.ended)
        Py_RETURN_NONE;
    return PyList_New(0);
}

/* Files one result frame's (status, data) under its obj in results when
 * obj is in pending (taking it out); frees the frame. 0, or -1 with an
 * exception set. GIL held. */
static int direct_file(direct_t *d, pb_frame_t *f, PyObject *pending, PyObject *results)
{
    if (!(f->msg.op_len == 6 && memcmp(f->msg.op, "result", 6) == 0) || f->msg.params.type != MSGPACK_OBJECT_MAP) {
        pb_frame_free(f);
        return 0; /* a caller gets results only */
    }
    PyTypeObject *frame_type = ((pb_module_state_t *)PyType_GetModuleState(Py_TYPE(d)))->FrameBytesType;
    pb_decoding_t dec;
    pb_decoding_init(&dec, frame_type, f);
    int64_t cpu; /* read before decoding_done frees the parsed message */
    if (beam_field_int(&f->msg.params, "cpu", &cpu) == 0 && cpu >= 0 && cpu < INT_MAX)
        d->peer_cpu = (int)cpu;
    PyObject *t = direct_decode_known(&dec, &f->msg.params.via.map, RESULT_KEYS);
    pb_decoding_done(&dec);
    if (!t)
        return -1;
    PyObject *obj = PyTuple_GET_ITEM(t, 0);
    int rc = PySet_Contains(pending, obj);
    if (rc == 1) {
        PyObject *entry = PyTuple_Pack(2, PyTuple_GET_ITEM(t, 1), PyTuple_GET_ITEM(t, 2));
        rc = entry && PySet_Discard(pending, obj) >= 0 && PyDict_SetItem(results, obj, entry) == 0 ? 0 : -1;
        Py_XDECREF(entry);
    }
    Py_DECREF(t);
    return rc < 0 ? -1 : 0;
}

/* lock.release() or lock.acquire(). 0, or -1 with an exception set. */
static int direct_lock_call(PyObject *lock, const char *name)
{
    PyObject *r = PyObject_CallMethod(lock, name, NULL);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

static PyObject *direct_read_results(direct_t *d, PyObject *args)
{
    PyObject *lock, *pending, *results;
    int timeout_ms = -1;
    if (!PyArg_ParseTuple(args, "OO!O!|i:read_results", &lock, &PySet_Type, &pending, &PyDict_Type, &results,
                          &timeout_ms))
        return NULL;
    if (d->reading) {
        PyErr_SetString(PyExc_RuntimeError, "another thread reads this direct connection");
        return NULL;
    }
    if (direct_lock_call(lock, "release") < 0)
        return NULL;
    pb_dframe_t *head = NULL;
    int rc = direct_wait(d, timeout_ms, &head);
    PyObject *type, *value, *tb; /* a handler's exception, kept over the acquire */
    PyErr_Fetch(&type, &value, &tb);
    if (direct_lock_call(lock, "acquire") < 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        pb_dframes_free(head);
        return NULL;
    }
    PyErr_Restore(type, value, tb);
    if (rc < 0)
        return NULL;
    int ended = head == NULL && d->s.ended;
    while (head) {
        pb_dframe_t *g = head;
        head = g->next;
        pb_frame_t *f = g->frame;
        free(g);
        if (rc < 0)
            pb_frame_free(f);
        else
            rc = direct_file(d, f, pending, results);
    }
    if (rc < 0)
        return NULL;
    if (ended)
        Py_RETURN_NONE;
    Py_RETURN_TRUE;
}

/* ---------- the type ---------- */

static PyObject *direct_fileno(direct_t *d, PyObject *unused)
{
    return PyLong_FromLong(d->s.fd);
}

static PyObject *direct_close(direct_t *d, PyObject *unused)
{
    if (d->reading) {
        /* the reader is in poll on the fd: the end wakes it, and it closes */
        if (d->s.fd >= 0)
            shutdown(d->s.fd, SHUT_RDWR);
        d->close_deferred = 1;
    } else {
        pb_dsock_close(&d->s);
    }
    Py_RETURN_NONE;
}

static PyObject *direct_get_pending(direct_t *d, void *unused)
{
    return PyLong_FromSize_t(pb_dsock_unwritten(&d->s));
}

static PyObject *direct_get_peer_cpu(direct_t *d, void *unused)
{
    return PyLong_FromLong(d->peer_cpu);
}

static PyObject *direct_get_ended(direct_t *d, void *unused)
{
    return PyBool_FromLong(d->s.ended || d->s.fd < 0);
}

static PyObject *direct_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fd", NULL};
    int fd;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i:DirectConn", kwlist, &fd))
        return NULL;
    direct_t *d = (direct_t *)type->tp_alloc(type, 0);
    if (!d)
        return NULL;
    d->peer_cpu = -1;
    int rc = pb_dsock_init(&d->s, fd);
    /* a wait's slice, the handlers run between: a blocking read lasts that
     * long (where the socket refuses the timeout, the waits poll instead) */
    if (rc == 0)
        (void)pb_dsock_set_rcvtimeo(&d->s, DIRECT_SLICE_MS);
    if (rc < 0) {
        d->s.fd = -1;
        d->s.out = NULL;
        Py_DECREF(d);
        errno = -rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return (PyObject *)d;
}

static void direct_dealloc(direct_t *d)
{
    PyTypeObject *tp = Py_TYPE(d);
    PyObject_GC_UnTrack(d);
    pb_dsock_destroy(&d->s);
    tp->tp_free(d);
    Py_DECREF(tp);
}

static int direct_traverse(direct_t *d, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(d));
    return 0;
}

static PyMethodDef direct_methods[] = {
    {"send", (PyCFunction)direct_send, METH_VARARGS,
     "send(op, params) -> bytes unwritten. Sends the push [2, op, params]: what the socket takes now, the rest kept."},
    {"call", (PyCFunction)(void (*)(void))direct_call, METH_FASTCALL,
     "call(obj, method, args, forgets) -> bytes unwritten. send('call', {...}) without the dict."},
    {"result", (PyCFunction)(void (*)(void))direct_result, METH_FASTCALL,
     "result(obj, status, data) -> bytes unwritten. send('result', {...}) without the dict."},
    {"flush", (PyCFunction)direct_flush, METH_NOARGS, "flush() -> bytes unwritten, after writing what the socket takes."},
    {"wait_writable", (PyCFunction)direct_wait_writable, METH_VARARGS,
     "wait_writable(timeout_ms) -> bytes unwritten, after waiting at most timeout_ms for the socket to take more."},
    {"read", (PyCFunction)direct_read, METH_VARARGS,
     "read(timeout_ms=-1) -> [(op, params), ...] the whole frames come (at least one unless [] at the timeout;\n"
     "params of call, result and forget as the tuples (obj, method, args, forgets), (obj, status, data), (objs,)),\n"
     "writing what is unwritten meanwhile; None once the socket ended or sent a bad frame."},
    {"read_results", (PyCFunction)direct_read_results, METH_VARARGS,
     "read_results(lock, pending, results, timeout_ms=-1) -> True, or None once the socket ended.\n"
     "A caller's read, lock (held) let go while it waits: each result come for an obj in the set\n"
     "pending is taken out of it and filed as results[obj] = (status, data); others are dropped."},
    {"fileno", (PyCFunction)direct_fileno, METH_NOARGS, "fileno() -> the socket's fd (-1 once closed)."},
    {"close", (PyCFunction)direct_close, METH_NOARGS, "close(). Closes the socket (at once, or when a read ends)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef direct_getset[] = {
    {"pending", (getter)direct_get_pending, NULL, "Bytes sent but not yet written to the socket.", NULL},
    {"ended", (getter)direct_get_ended, NULL, "True once the socket ended, sent a bad frame or was closed.", NULL},
    {"peer_cpu", (getter)direct_get_peer_cpu, NULL,
     "The CPU the peer last sent a result from (-1: none yet); a wait for results blocks in recv (the early "
     "wake) unless it is this thread's CPU.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot direct_slots[] = {
    {Py_tp_new, direct_new},
    {Py_tp_dealloc, direct_dealloc},
    {Py_tp_traverse, direct_traverse},
    {Py_tp_methods, direct_methods},
    {Py_tp_getset, direct_getset},
    {Py_tp_doc, "DirectConn(fd): a direct-call socket's frames (docs/DESIGN.md, \"Direct calls\"); owns fd."},
    {0, NULL},
};

PyType_Spec pb_direct_spec = {
    .name = "_beam.DirectConn",
    .basicsize = sizeof(direct_t),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = direct_slots,
};
