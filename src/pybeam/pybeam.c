/* pybeam.c — the _beam module glue: the Client type (one connection to
 * beamd; its methods request, request_unless_failed, send, submit,
 * next_push, release, flush, close, and pushed.h's wait_result,
 * wait_results, result_stats), the module's functions and its init.
 * Requests may come from several Python threads at once; every blocking
 * wait releases the GIL. The parts: wire.h (send, read, file, wait),
 * release.h (batched releases and the background thread), convert.h
 * (values), termlog.h (terminal lines), results.h and pushed.h (the
 * results beamd pushes: the table, waiting for them), direct.h (the
 * DirectConn type: a direct-call socket), board.h (the Board type: a
 * worker's call board). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x030A0000
/* CPython 3.9 has no PyModule_AddObjectRef (3.10): the same, from AddObject,
 * which steals the reference only when it succeeds. */
static int PyModule_AddObjectRef(PyObject *m, const char *name, PyObject *v)
{
    Py_XINCREF(v);
    if (PyModule_AddObject(m, name, v) < 0) {
        Py_XDECREF(v);
        return -1;
    }
    return 0;
}
#endif

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "beam/protocol.h"
#include "client.h"
#include "convert.h"
#include "board.h"
#include "direct.h"
#include "ntcopy.h"
#include "pb_client.h"
#include "pushed.h"
#include "release.h"
#include "wire.h"

typedef pb_client_t client_t;

static pb_module_state_t *state_of(client_t *c)
{
    return PyType_GetModuleState(Py_TYPE(c));
}

/* ---------- requests ---------- */

/* Encodes [0, msgid, op, params] into out (the caller destroys it, also
 * on failure). 0, or -1 with a Python exception set when params cannot be
 * sent. */
static int encode_request(client_t *c, pb_out_t *out, uint64_t msgid, const char *op, PyObject *params)
{
    pb_out_init(out);
    msgpack_pack_array(&out->enc.pk, 4);
    msgpack_pack_uint8(&out->enc.pk, BEAM_MSG_REQUEST);
    msgpack_pack_uint64(&out->enc.pk, msgid);
    beam_pack_str(&out->enc.pk, op);
    if (pb_encode(out, params) < 0)
        return -1;
    int rc = pb_out_end(out, c->limits.max_frame);
    if (rc == -EMSGSIZE)
        PyErr_Format(PyExc_ValueError, "beam: the '%s' message is larger than the frame limit (%u bytes)", op,
                     c->limits.max_frame);
    else if (rc < 0)
        PyErr_NoMemory();
    return rc < 0 ? -1 : 0;
}

static int sendv_to(void *c, struct iovec *iov, int cnt)
{
    return pb_sendv(c, iov, cnt);
}

/* Writes out's frame (GIL released meanwhile). 0 or a negative errno. */
static int send_out(client_t *c, const pb_out_t *out)
{
    return pb_out_write(out, sendv_to, c);
}

/* The Python value of a received frame's part o; frees the frame (or hands
 * it to the memoryviews made of it). */
static PyObject *decode_frame(client_t *c, pb_frame_t *f, const msgpack_object *o)
{
    pb_decoding_t d;
    pb_decoding_init(&d, state_of(c)->FrameBytesType, f);
    PyObject *v = pb_decode(&d, o);
    pb_decoding_done(&d);
    return v;
}

/* Sends op (msgid 0: no reply wanted), then any releases due. 0, or -1
 * with an exception set (params cannot be sent, or the connection is gone). */
static int send_nowait(client_t *c, const char *op, PyObject *params)
{
    if (c->closed) {
        pb_conn_error(c);
        return -1;
    }
    pb_out_t out;
    int encoded = encode_request(c, &out, 0, op, params);
    int rc = encoded < 0 ? -EINVAL : send_out(c, &out);
    pb_out_destroy(&out);
    if (encoded < 0)
        return -1; /* (the encoder set the error) */
    if (rc < 0) {
        pb_conn_error(c);
        return -1;
    }
    pb_flush_releases(c, 0);
    return 0;
}

static PyObject *client_send(client_t *c, PyObject *args)
{
    const char *op;
    PyObject *params;
    if (!PyArg_ParseTuple(args, "sO!:send", &op, &PyDict_Type, &params))
        return NULL;
    if (send_nowait(c, op, params) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* submit(params): sends a `submit` (msgid 0), with params["push"] set
 * true when the result of params["obj"] is expected in the table
 * (pushed.h: unless too many are pending already). */
static PyObject *client_submit(client_t *c, PyObject *args)
{
    PyObject *params;
    if (!PyArg_ParseTuple(args, "O!:submit", &PyDict_Type, &params))
        return NULL;
    PyObject *obj = PyDict_GetItemString(params, "obj"); /* borrowed */
    if (!obj || !PyBytes_Check(obj) || PyBytes_GET_SIZE(obj) != BEAM_OBJECT_ID_SIZE) {
        PyErr_Format(PyExc_ValueError, "submit: params['obj'] must be %d bytes", BEAM_OBJECT_ID_SIZE);
        return NULL;
    }
    int push = pb_pushed_expect(c, PyBytes_AS_STRING(obj));
    if (push < 0)
        return PyErr_NoMemory();
    if ((push && PyDict_SetItemString(params, "push", Py_True) < 0) || send_nowait(c, "submit", params) < 0) {
        if (push)
            pb_pushed_drop(c, PyBytes_AS_STRING(obj)); /* never sent: no result will come */
        return NULL;
    }
    Py_RETURN_NONE;
}

static void slot_unlink(client_t *c, pb_slot_t *slot)
{
    for (pb_slot_t **p = &c->slots; *p; p = &(*p)->next)
        if (*p == slot) {
            *p = slot->next;
            return;
        }
}

static PyObject *raise_remote(client_t *c, const msgpack_object *error)
{
    pb_module_state_t *st = state_of(c);
    const char *code = "internal", *message = "";
    uint32_t clen = 8, mlen = 0;
    beam_field_str(error, "code", &code, &clen);
    beam_field_str(error, "message", &message, &mlen);
    PyObject *exc = PyObject_CallFunction(st->RemoteError, "s#s#", code, (Py_ssize_t)clen, message, (Py_ssize_t)mlen);
    if (exc) {
        PyErr_SetObject(st->RemoteError, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* What a request waits for: its reply, or (watch) an error among pushed
 * results. */
typedef struct req_wait_s {
    pb_slot_t *slot;
    pb_failed_watch_t *watch;
} req_wait_t;

static int req_done(client_t *c, void *arg)
{
    req_wait_t *w = arg;
    return w->slot->reply != NULL || (w->watch && pb_pushed_failed(c, w->watch));
}

/* Sends op and waits for its reply, or until one of watch's pushed results
 * is an error (then None is returned: the reply, when it comes, is
 * dropped). The reply's result, or NULL with an exception. */
static PyObject *do_request(client_t *c, const char *op, PyObject *params, int64_t deadline,
                            pb_failed_watch_t *watch)
{
    pb_flush_releases(c, 0);
    pb_slot_t slot = {0};
    pthread_mutex_lock(&c->lock);
    if (c->closed) {
        pthread_mutex_unlock(&c->lock);
        return pb_conn_error(c);
    }
    slot.msgid = ++c->next_msgid;
    slot.next = c->slots;
    c->slots = &slot;
    pthread_mutex_unlock(&c->lock);

    PyObject *result = NULL;
    pb_out_t out;
    int encoded = encode_request(c, &out, slot.msgid, op, params);
    int rc = encoded < 0 ? -EINVAL : send_out(c, &out);
    pb_out_destroy(&out);
    int waited = 0;
    req_wait_t w = {&slot, watch};
    if (encoded == 0 && rc == 0)
        waited = pb_wait_for(c, req_done, &w, deadline);
    pthread_mutex_lock(&c->lock);
    slot_unlink(c, &slot);
    int failed = 0;
    if (!slot.reply && watch) {
        watch->scanned = 0; /* look again, whatever was seen */
        failed = pb_pushed_failed(c, watch);
    }
    pthread_mutex_unlock(&c->lock);
    if (encoded < 0) {
        /* the encoder set the error */
    } else if (failed && rc == 0) {
        Py_INCREF(Py_None);
        result = Py_None;
    } else if (rc < 0 || (waited == 0 && !slot.reply)) {
        pb_conn_error(c);
    } else if (waited == -ETIMEDOUT) {
        PyErr_Format(PyExc_TimeoutError, "beam: no reply to '%s' in time", op);
    } else if (waited == 0) {
        pb_frame_t *f = slot.reply;
        slot.reply = NULL;
        if (f->msg.error.type == MSGPACK_OBJECT_MAP) {
            raise_remote(c, &f->msg.error);
            pb_frame_free(f);
        } else {
            result = decode_frame(c, f, &f->msg.params);
        }
    }
    pb_frame_free(slot.reply); /* a reply that came as the wait was given up */
    return result;
}

static PyObject *client_request(client_t *c, PyObject *args)
{
    const char *op;
    PyObject *params, *timeout_obj = Py_None;
    if (!PyArg_ParseTuple(args, "sO!|O:request", &op, &PyDict_Type, &params, &timeout_obj))
        return NULL;
    int64_t deadline;
    if (pb_deadline_from(timeout_obj, &deadline) < 0)
        return NULL;
    return do_request(c, op, params, deadline, NULL);
}

/* request_unless_failed(op, params, watch): request's reply, or None as
 * soon as one of the pushed results of the ids in watch is an error. */
static PyObject *client_request_unless_failed(client_t *c, PyObject *args)
{
    const char *op;
    PyObject *params, *list;
    if (!PyArg_ParseTuple(args, "sO!O:request_unless_failed", &op, &PyDict_Type, &params, &list))
        return NULL;
    PyObject *seq = PySequence_Fast(list, "request_unless_failed: watch must be a list of ids");
    if (!seq)
        return NULL;
    Py_ssize_t n;
    const char **ids = pb_ids_of(seq, &n);
    PyObject *result = NULL;
    if (ids) {
        pb_failed_watch_t watch = {.ids = ids, .n = (size_t)n};
        result = do_request(c, op, params, 0, &watch);
        PyMem_Free(ids);
    }
    Py_DECREF(seq);
    return result;
}

static int push_ready(client_t *c, void *arg)
{
    return c->push_head != NULL;
}

static PyObject *client_next_push(client_t *c, PyObject *args)
{
    PyObject *timeout_obj = Py_None;
    if (!PyArg_ParseTuple(args, "|O:next_push", &timeout_obj))
        return NULL;
    int64_t deadline;
    if (pb_deadline_from(timeout_obj, &deadline) < 0)
        return NULL;
    pb_flush_releases(c, 0);
    int rc = pb_wait_for(c, push_ready, NULL, deadline);
    if (rc == -EINTR)
        return NULL;
    pthread_mutex_lock(&c->lock);
    pb_frame_t *f = c->push_head;
    if (f) {
        c->push_head = f->next;
        if (!c->push_head)
            c->push_tail = NULL;
        f->next = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    if (!f) {
        if (rc == -ETIMEDOUT)
            Py_RETURN_NONE;
        return pb_conn_error(c);
    }
    PyObject *op = PyUnicode_DecodeUTF8(f->msg.op, (Py_ssize_t)f->msg.op_len, "surrogateescape");
    if (!op) {
        pb_frame_free(f);
        return NULL;
    }
    PyObject *params = decode_frame(c, f, &f->msg.params);
    if (!params) {
        Py_DECREF(op);
        return NULL;
    }
    return Py_BuildValue("(NN)", op, params);
}

static PyObject *client_release(client_t *c, PyObject *args)
{
    int kind;
    Py_buffer id;
    if (!PyArg_ParseTuple(args, "iy*:release", &kind, &id))
        return NULL;
    size_t want = kind == 0 ? BEAM_OBJECT_ID_SIZE : BEAM_ACTOR_ID_SIZE;
    int rc = -EINVAL;
    if ((size_t)id.len != want)
        PyErr_Format(PyExc_ValueError, "release: id must be %zu bytes", want);
    else if ((rc = pb_release(c, kind, id.buf)) < 0)
        PyErr_NoMemory();
    else if (kind == 0)
        pb_pushed_drop(c, id.buf); /* its pushed result, if any, goes with it */
    PyBuffer_Release(&id);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *client_flush(client_t *c, PyObject *unused)
{
    pb_flush_releases(c, 1);
    Py_RETURN_NONE;
}

/* ---------- lifetime ---------- */

static void client_shutdown(client_t *c)
{
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR);
    pb_background_stop(c);
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    if (c->wake_fd >= 0) {
        close(c->wake_fd);
        c->wake_fd = -1;
    }
    pthread_mutex_lock(&c->lock);
    c->closed = 1;
    if (!c->close_reason[0])
        snprintf(c->close_reason, sizeof c->close_reason, "the client was closed");
    pthread_mutex_unlock(&c->lock);
}

static PyObject *client_close(client_t *c, PyObject *unused)
{
    if (!c->closed)
        pb_flush_releases(c, 1);
    client_shutdown(c);
    Py_RETURN_NONE;
}

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"path", NULL};
    const char *path;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s:Client", kwlist, &path))
        return NULL;
    client_t *c = (client_t *)type->tp_alloc(type, 0);
    if (!c)
        return NULL;
    c->fd = -1;
    c->wake_fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->send_lock, NULL);
    pthread_mutex_init(&c->release_lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &attr);
    pthread_cond_init(&c->bg_cond, &attr);
    pthread_condattr_destroy(&attr);
    beam_limits_default(&c->limits);
    if (pb_wire_init(c) < 0) {
        Py_DECREF(c);
        return PyErr_NoMemory();
    }
    c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->wake_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(c);
        return NULL;
    }
    int fd;
    unsigned peer = 0;
    Py_BEGIN_ALLOW_THREADS
    fd = beam_client_connect(path, &peer);
    Py_END_ALLOW_THREADS
    if (fd == -EPERM) {
        PyErr_Format(PyExc_PermissionError,
                     "the process serving %s runs as uid %u, not as you (uid %u) or root: "
                     "beam talks only to a daemon of its own user or root", path, peer, (unsigned)getuid());
        Py_DECREF(c);
        return NULL;
    }
    if (fd < 0) {
        errno = -fd;
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        Py_DECREF(c);
        return NULL;
    }
    c->fd = fd;
    struct timeval tv = {.tv_sec = PB_RCVTIMEO_MS / 1000, .tv_usec = PB_RCVTIMEO_MS % 1000 * 1000};
    c->rcvtimeo = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0;
    int rc = pb_background_start(c);
    if (rc < 0) {
        errno = -rc;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

static void client_dealloc(client_t *c)
{
    PyTypeObject *tp = Py_TYPE(c);
    PyObject_GC_UnTrack(c);
    client_shutdown(c);
    for (pb_frame_t *f = c->push_head, *n; f; f = n) {
        n = f->next;
        pb_frame_free(f);
    }
    pb_pushed_clear(c);
    free(c->rel_objs);
    free(c->rel_actors);
    pb_wire_destroy(c);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->send_lock);
    pthread_mutex_destroy(&c->release_lock);
    pthread_cond_destroy(&c->cond);
    pthread_cond_destroy(&c->bg_cond);
    tp->tp_free(c);
    Py_DECREF(tp);
}

static int client_traverse(client_t *c, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(c));
    return 0;
}

static PyObject *client_get_closed(client_t *c, void *unused)
{
    return PyBool_FromLong(c->closed);
}

static PyObject *client_get_queue_logs(client_t *c, void *unused)
{
    pthread_mutex_lock(&c->lock);
    int on = c->queue_logs;
    pthread_mutex_unlock(&c->lock);
    return PyBool_FromLong(on);
}

static int client_set_queue_logs(client_t *c, PyObject *value, void *unused)
{
    int on = value ? PyObject_IsTrue(value) : 0;
    if (on < 0)
        return -1;
    pthread_mutex_lock(&c->lock);
    c->queue_logs = on;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

static PyMethodDef client_methods[] = {
    {"request", (PyCFunction)client_request, METH_VARARGS,
     "request(op, params, timeout=None) -> result. Sends a request and waits for its reply (GIL released).\n"
     "Raises RemoteError(code, message) for an error reply, ConnectionError when the connection is gone.\n"
     "In the result, a bin of 1 KiB or more is a read-only memoryview of the received frame; shorter ones are bytes."},
    {"send", (PyCFunction)client_send, METH_VARARGS, "send(op, params). Sends a request that wants no reply."},
    {"request_unless_failed", (PyCFunction)client_request_unless_failed, METH_VARARGS,
     "request_unless_failed(op, params, watch) -> as request, or None as soon as the pushed result of one of\n"
     "the ids in watch has come with an error (a get of a list's other refs ends at the first error)."},
    {"submit", (PyCFunction)client_submit, METH_VARARGS,
     "submit(params). Sends a `submit` (no reply wanted), setting params['push'] = True when the result of\n"
     "params['obj'] is to be pushed here (unless 16 pushed results are pending already); wait_result then\n"
     "answers for it until the id is released."},
    {"wait_result", (PyCFunction)pb_client_wait_result, METH_VARARGS,
     "wait_result(obj, timeout=None) -> (status, data) as a get reply's entry; None on timeout; True when the\n"
     "result came without its value (fetch it with a get); False when obj is not expected here (never\n"
     "submitted with submit(), or released: use a get). ConnectionError when the connection is gone first."},
    {"wait_results", (PyCFunction)pb_client_wait_results, METH_VARARGS,
     "wait_results(objs, timeout=None) -> a list of wait_result's values, one per id. Returns once every\n"
     "expected id's result came or one that came is an error (a get ends at the first), or at the timeout."},
    {"result_stats", (PyCFunction)pb_client_result_stats, METH_NOARGS,
     "result_stats() -> (entries, filed): ids in the pushed-results table now, result pushes filed ever."},
    {"next_push", (PyCFunction)client_next_push, METH_VARARGS,
     "next_push(timeout=None) -> (op, params) or None on timeout. Takes the next push from beamd\n"
     "(bins as in request)."},
    {"release", (PyCFunction)client_release, METH_VARARGS,
     "release(kind, id). Queues a release (kind 0 object, 1 actor); sent in batches."},
    {"flush", (PyCFunction)client_flush, METH_NOARGS, "flush(). Sends queued releases now."},
    {"close", (PyCFunction)client_close, METH_NOARGS, "close(). Closes the connection; idempotent."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef client_getset[] = {
    {"closed", (getter)client_get_closed, NULL, "True once the connection is gone.", NULL},
    {"queue_logs", (getter)client_get_queue_logs, (setter)client_set_queue_logs,
     "False (default): log pushes are written to fd 1/2 as they come. True: they are queued as ('log', "
     "{'stream', 'text'}) pushes for next_push, for the driver to print through sys.stdout/sys.stderr.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot client_slots[] = {
    {Py_tp_new, client_new},
    {Py_tp_dealloc, client_dealloc},
    {Py_tp_traverse, client_traverse},
    {Py_tp_methods, client_methods},
    {Py_tp_getset, client_getset},
    {Py_tp_doc, "Client(path): one connection to beamd at the unix socket path."},
    {0, NULL},
};

static PyType_Spec client_spec = {
    .name = "_beam.Client",
    .basicsize = sizeof(client_t),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = client_slots,
};

/* ---------- module ---------- */

static PyObject *set_parent_death_signal(PyObject *m, PyObject *args)
{
    int sig;
    if (!PyArg_ParseTuple(args, "i:set_parent_death_signal", &sig))
        return NULL;
    if (prctl(PR_SET_PDEATHSIG, sig) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong((long)getppid());
}

static PyObject *default_socket_path(PyObject *m, PyObject *unused)
{
    char path[108];
    beam_client_socket_path(path, sizeof path);
    return PyUnicode_FromString(path);
}

static PyObject *copy_nt(PyObject *m, PyObject *args)
{
    Py_buffer dst, src;
    if (!PyArg_ParseTuple(args, "w*y*:copy_nt", &dst, &src))
        return NULL;
    if (dst.len != src.len) {
        PyErr_Format(PyExc_ValueError, "copy_nt: %zd bytes into %zd", src.len, dst.len);
        PyBuffer_Release(&dst);
        PyBuffer_Release(&src);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    pb_ntcopy(dst.buf, src.buf, (size_t)src.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"set_parent_death_signal", set_parent_death_signal, METH_VARARGS,
     "set_parent_death_signal(sig) -> parent pid. This process gets sig when its parent dies."},
    {"default_socket_path", default_socket_path, METH_NOARGS,
     "default_socket_path() -> str. $BEAM_SOCKET, else the per-user default."},
    {"copy_nt", copy_nt, METH_VARARGS,
     "copy_nt(dst, src). dst[:] = src (contiguous buffers of one length) with non-temporal stores, "
     "the GIL released (ntcopy.h)."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *m)
{
    pb_module_state_t *st = PyModule_GetState(m);
    st->RemoteError = PyErr_NewExceptionWithDoc(
        "_beam.RemoteError", "An error reply from beamd: args are (code, message).", PyExc_RuntimeError, NULL);
    if (!st->RemoteError || PyModule_AddObjectRef(m, "RemoteError", st->RemoteError) < 0)
        return -1;
    st->ClientType = (PyTypeObject *)PyType_FromModuleAndSpec(m, &client_spec, NULL);
    if (!st->ClientType || PyModule_AddObjectRef(m, "Client", (PyObject *)st->ClientType) < 0)
        return -1;
    st->FrameBytesType = (PyTypeObject *)PyType_FromModuleAndSpec(m, &pb_frame_bytes_spec, NULL);
    if (!st->FrameBytesType)
        return -1;
    st->DirectType = (PyTypeObject *)PyType_FromModuleAndSpec(m, &pb_direct_spec, NULL);
    if (!st->DirectType || PyModule_AddObjectRef(m, "DirectConn", (PyObject *)st->DirectType) < 0)
        return -1;
    /* kept by the module's dict alone: nothing in C looks it up */
    PyObject *board_type = PyType_FromModuleAndSpec(m, &pb_board_spec, NULL);
    if (!board_type || PyModule_AddObjectRef(m, "Board", board_type) < 0) {
        Py_XDECREF(board_type);
        return -1;
    }
    Py_DECREF(board_type);
    return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    pb_module_state_t *st = PyModule_GetState(m);
    Py_VISIT(st->RemoteError);
    Py_VISIT(st->ClientType);
    Py_VISIT(st->FrameBytesType);
    Py_VISIT(st->DirectType);
    return 0;
}

static int module_clear(PyObject *m)
{
    pb_module_state_t *st = PyModule_GetState(m);
    Py_CLEAR(st->RemoteError);
    Py_CLEAR(st->ClientType);
    Py_CLEAR(st->FrameBytesType);
    Py_CLEAR(st->DirectType);
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_beam",
    .m_doc = "The client side of beamd's unix-socket msgpack protocol (docs/PROTOCOL.md).",
    .m_size = sizeof(pb_module_state_t),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
};

PyMODINIT_FUNC PyInit__beam(void)
{
    return PyModuleDef_Init(&module_def);
}
