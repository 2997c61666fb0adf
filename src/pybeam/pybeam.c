/* pybeam.c — the _beam extension: a Client holding one connection to beamd.
 * Whoever reads the socket files replies under their message ids, queues
 * pushes for the worker loop and writes relayed log lines to the terminal
 * (or, once queue_logs is set, queues them as pushes for Python to print).
 * Requests may come from several Python threads at once; every blocking wait
 * releases the GIL.
 *
 * Reading is leader/follower: a thread waiting for a reply reads the socket
 * itself when no one else is (one wakeup per reply, not two), and hands the
 * socket to the next waiter when its own reply is in. A background thread
 * reads only when no request has waited for IDLE_NS, so log lines and pushes
 * still arrive while the program does other things. */
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
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "beam/codec.h"
#include "beam/protocol.h"
#include "client.h"

#define RELEASE_BATCH 256
#define RELEASE_AGE_NS (50 * 1000000LL)
#define MAX_ENCODE_DEPTH 64
#define IDLE_NS (20 * 1000000LL)

typedef struct module_state_s {
    PyObject *RemoteError;
    PyTypeObject *ClientType;
} module_state_t;

/* A frame the receiver thread copied out, for a waiting thread to parse. */
typedef struct frame_s {
    char *data;
    size_t len;
    struct frame_s *next;
} frame_t;

/* One request waiting for its reply; lives on the waiting thread's stack. */
typedef struct slot_s {
    uint64_t msgid;
    frame_t *reply;
    struct slot_s *next;
} slot_t;

typedef struct client_s {
    PyObject_HEAD
    int fd;
    int wake_fd;        /* eventfd: gets the background reader out of poll */
    int closed;         /* the connection is gone (EOF, error or close()) */
    int thread_started;
    pthread_t thread;
    pthread_mutex_t lock; /* everything below up to send_lock */
    int reading;        /* some thread owns the socket's read side and dec */
    int fg_waiters;     /* threads waiting in wait_for */
    int bg_in_poll;
    int64_t fg_last;    /* when the last waiter left */
    beam_decoder_t dec;
    pthread_cond_t cond;    /* waiters: a reply or push came, or the socket is free */
    pthread_cond_t bg_cond; /* the background reader: only close() signals it */
    pthread_mutex_t send_lock;
    uint64_t next_msgid;
    slot_t *slots;
    frame_t *push_head, *push_tail;
    int queue_logs;     /* log pushes are queued (next_push), not written */
    char close_reason[160];
    beam_limits_t limits;
    /* batched releases */
    pthread_mutex_t release_lock;
    char *rel_objs, *rel_actors;
    size_t n_objs, n_actors;
    int64_t rel_since;
} client_t;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static module_state_t *state_of_type(PyTypeObject *t)
{
    return PyType_GetModuleState(t);
}

/* ---------- Python <-> msgpack ---------- */

static int encode(msgpack_packer *pk, PyObject *o, int depth)
{
    if (depth > MAX_ENCODE_DEPTH) {
        PyErr_SetString(PyExc_ValueError, "value nested too deeply to send to beamd");
        return -1;
    }
    if (o == Py_None)
        return msgpack_pack_nil(pk), 0;
    if (PyBool_Check(o))
        return (o == Py_True ? msgpack_pack_true(pk) : msgpack_pack_false(pk)), 0;
    if (PyLong_Check(o)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(o);
            if (PyErr_Occurred())
                return -1;
            return msgpack_pack_unsigned_long_long(pk, u), 0;
        }
        if (overflow < 0 || (v == -1 && PyErr_Occurred())) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_OverflowError, "int too small to send to beamd");
            return -1;
        }
        return msgpack_pack_long_long(pk, v), 0;
    }
    if (PyFloat_Check(o))
        return msgpack_pack_double(pk, PyFloat_AS_DOUBLE(o)), 0;
    if (PyUnicode_Check(o)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        if (!s)
            return -1;
        beam_pack_strn(pk, s, (size_t)n);
        return 0;
    }
    if (PyBytes_Check(o)) {
        beam_pack_bin(pk, PyBytes_AS_STRING(o), (size_t)PyBytes_GET_SIZE(o));
        return 0;
    }
    if (PyByteArray_Check(o) || PyMemoryView_Check(o)) {
        Py_buffer view;
        if (PyObject_GetBuffer(o, &view, PyBUF_CONTIG_RO) < 0)
            return -1;
        beam_pack_bin(pk, view.buf, (size_t)view.len);
        PyBuffer_Release(&view);
        return 0;
    }
    if (PyList_Check(o) || PyTuple_Check(o)) {
        PyObject *seq = PySequence_Fast(o, "expected a sequence");
        if (!seq)
            return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        msgpack_pack_array(pk, (size_t)n);
        for (Py_ssize_t i = 0; i < n; i++)
            if (encode(pk, PySequence_Fast_GET_ITEM(seq, i), depth + 1) < 0) {
                Py_DECREF(seq);
                return -1;
            }
        Py_DECREF(seq);
        return 0;
    }
    if (PyDict_Check(o)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        msgpack_pack_map(pk, (size_t)PyDict_GET_SIZE(o));
        while (PyDict_Next(o, &pos, &k, &v)) {
            if (!PyUnicode_Check(k)) {
                PyErr_SetString(PyExc_TypeError, "map keys sent to beamd must be str");
                return -1;
            }
            if (encode(pk, k, depth + 1) < 0 || encode(pk, v, depth + 1) < 0)
                return -1;
        }
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "cannot send a %.100s to beamd", Py_TYPE(o)->tp_name);
    return -1;
}

static PyObject *decode(const msgpack_object *o)
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
    case MSGPACK_OBJECT_BIN: return PyBytes_FromStringAndSize(o->via.bin.ptr, (Py_ssize_t)o->via.bin.size);
    case MSGPACK_OBJECT_ARRAY: {
        PyObject *l = PyList_New((Py_ssize_t)o->via.array.size);
        for (uint32_t i = 0; l && i < o->via.array.size; i++) {
            PyObject *v = decode(&o->via.array.ptr[i]);
            if (!v) {
                Py_CLEAR(l);
                break;
            }
            PyList_SET_ITEM(l, i, v);
        }
        return l;
    }
    case MSGPACK_OBJECT_MAP: {
        PyObject *d = PyDict_New();
        for (uint32_t i = 0; d && i < o->via.map.size; i++) {
            PyObject *k = decode(&o->via.map.ptr[i].key);
            PyObject *v = k ? decode(&o->via.map.ptr[i].val) : NULL;
            if (!v || PyDict_SetItem(d, k, v) < 0)
                Py_CLEAR(d);
            Py_XDECREF(k);
            Py_XDECREF(v);
        }
        return d;
    }
    default:
        PyErr_SetString(PyExc_ValueError, "beamd sent a value of a kind beam does not use");
        return NULL;
    }
}

/* ---------- the receiver thread ---------- */

static void write_all_fd(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* Log lines go straight to the terminal: stdout or stderr as the worker wrote. */
static void handle_log(const beam_msg_t *msg)
{
    int64_t stream = 2;
    const char *text;
    uint32_t len;
    beam_field_int(&msg->params, "stream", &stream);
    if (beam_field_str(&msg->params, "text", &text, &len) != 0)
        return;
    char *line = malloc((size_t)len + 1);
    if (!line)
        return;
    memcpy(line, text, len);
    line[len] = '\n';
    write_all_fd(stream == 1 ? 1 : 2, line, (size_t)len + 1);
    free(line);
}

static void handle_error_push(const beam_msg_t *msg)
{
    const char *text;
    uint32_t len;
    if (beam_field_str(&msg->params, "message", &text, &len) != 0)
        return;
    char line[1200];
    int n = snprintf(line, sizeof line, "beam: beamd reported: %.*s\n", (int)(len < 1100 ? len : 1100), text);
    write_all_fd(2, line, (size_t)n);
}

static frame_t *frame_copy(const char *data, size_t len)
{
    frame_t *f = malloc(sizeof *f);
    if (!f)
        return NULL;
    f->data = malloc(len ? len : 1);
    if (!f->data) {
        free(f);
        return NULL;
    }
    memcpy(f->data, data, len);
    f->len = len;
    f->next = NULL;
    return f;
}

static void frame_free(frame_t *f)
{
    if (f) {
        free(f->data);
        free(f);
    }
}

/* Files one frame: a reply into its slot, a push onto the queue. Called
 * with c->lock held. Returns -1 on a frame that is not a valid message. */
static int file_frame(client_t *c, const char *data, size_t len)
{
    beam_msg_t msg;
    char err[120];
    if (beam_msg_parse(data, len, &c->limits, &msg, err, sizeof err) < 0) {
        snprintf(c->close_reason, sizeof c->close_reason, "bad frame from beamd: %s", err);
        return -1;
    }
    if (msg.type == BEAM_MSG_REPLY) {
        for (slot_t *s = c->slots; s; s = s->next)
            if (s->msgid == msg.msgid && !s->reply) {
                s->reply = frame_copy(data, len);
                break;
            }
    } else if (msg.type == BEAM_MSG_PUSH) {
        if (beam_str_eq(msg.op, msg.op_len, "log") && !c->queue_logs)
            handle_log(&msg);
        else if (beam_str_eq(msg.op, msg.op_len, "error"))
            handle_error_push(&msg);
        else {
            frame_t *f = frame_copy(data, len);
            if (f) {
                if (c->push_tail)
                    c->push_tail->next = f;
                else
                    c->push_head = f;
                c->push_tail = f;
            }
        }
    }
    beam_msg_destroy(&msg);
    return 0;
}

static void mark_closed(client_t *c, const char *reason)
{
    if (reason && !c->close_reason[0])
        snprintf(c->close_reason, sizeof c->close_reason, "%s", reason);
    c->closed = 1;
}

/* One read from the socket by the thread that owns it, then every whole
 * frame in it filed. Called with c->lock NOT held and c->reading set by
 * the caller. Returns 0, or -1 when the connection is gone. */
static int read_once(client_t *c)
{
    char buf[65536];
    ssize_t n;
    do
        n = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    pthread_mutex_lock(&c->lock);
    int rc = 0;
    if (n <= 0) {
        mark_closed(c, n == 0 ? "beamd closed the connection" : "the connection to beamd failed");
        rc = -1;
    } else if (beam_decoder_feed(&c->dec, buf, (size_t)n) < 0) {
        mark_closed(c, "out of memory reading from beamd");
        rc = -1;
    } else {
        const char *frame;
        size_t len;
        int got;
        while ((got = beam_decoder_next(&c->dec, &frame, &len)) == 1)
            if (file_frame(c, frame, len) < 0) {
                mark_closed(c, NULL);
                rc = -1;
                break;
            }
        if (got < 0) {
            mark_closed(c, "bad frame header from beamd");
            rc = -1;
        }
    }
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static int64_t release_due(client_t *c);
static void flush_releases_nogil(client_t *c);

/* The background reader: reads only while no request is waiting and none
 * has for IDLE_NS, so a busy request loop keeps the socket to itself. */
static void *receiver(void *arg)
{
    client_t *c = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals belong to Python's main thread */
    pthread_mutex_lock(&c->lock);
    while (!c->closed) {
        int64_t now = now_ns();
        int64_t due = release_due(c);
        if (due && now >= due) {
            /* releases a quiet process queued: send them (a busy one's go
             * out with its next request) */
            pthread_mutex_unlock(&c->lock);
            flush_releases_nogil(c);
            pthread_mutex_lock(&c->lock);
            continue;
        }
        if (c->reading || c->fg_waiters > 0 || now - c->fg_last < IDLE_NS) {
            /* busy: look again in IDLE_NS (no one signals this thread but close) */
            int64_t until = (c->reading || c->fg_waiters > 0 ? now : c->fg_last) + IDLE_NS;
            if (due && due < until)
                until = due;
            struct timespec ts = {.tv_sec = until / 1000000000LL, .tv_nsec = until % 1000000000LL};
            pthread_cond_timedwait(&c->bg_cond, &c->lock, &ts);
            continue;
        }
        c->reading = 1;
        c->bg_in_poll = 1;
        pthread_mutex_unlock(&c->lock);
        struct pollfd fds[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = c->wake_fd, .events = POLLIN}};
        int ms = due ? (int)((due - now + 999999) / 1000000) : -1;
        int n = poll(fds, 2, ms);
        if (n > 0 && (fds[1].revents & POLLIN)) {
            uint64_t v;
            ssize_t r = read(c->wake_fd, &v, sizeof v);
            (void)r;
        }
        if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)))
            read_once(c);
        pthread_mutex_lock(&c->lock);
        c->bg_in_poll = 0;
        c->reading = 0;
        pthread_cond_broadcast(&c->cond);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

static void kick_background(client_t *c)
{
    uint64_t one = 1;
    ssize_t r = write(c->wake_fd, &one, sizeof one);
    (void)r;
}

/* ---------- sending ---------- */

/* Writes a whole buffer under the send lock, without the GIL. */
static int send_buffer(client_t *c, const char *buf, size_t len)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->send_lock);
    rc = beam_client_write_all(c->fd, buf, len);
    pthread_mutex_unlock(&c->send_lock);
    Py_END_ALLOW_THREADS
    return rc;
}

static int set_conn_error(client_t *c)
{
    pthread_mutex_lock(&c->lock);
    PyErr_Format(PyExc_ConnectionError, "beam: not connected to beamd (%s)",
                 c->close_reason[0] ? c->close_reason : "connection closed");
    pthread_mutex_unlock(&c->lock);
    return -1;
}

/* Encodes [0, msgid, op, params] into a new buffer. */
static char *encode_request(client_t *c, uint64_t msgid, const char *op, PyObject *params, size_t *len)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_begin(&enc);
    msgpack_pack_array(&enc.pk, 4);
    msgpack_pack_uint8(&enc.pk, BEAM_MSG_REQUEST);
    msgpack_pack_uint64(&enc.pk, msgid);
    beam_pack_str(&enc.pk, op);
    if (encode(&enc.pk, params, 0) < 0) {
        beam_enc_destroy(&enc);
        return NULL;
    }
    if (beam_enc_end(&enc, c->limits.max_frame) < 0) {
        beam_enc_destroy(&enc);
        PyErr_Format(PyExc_ValueError, "beam: the '%s' message is larger than the frame limit (%u bytes)", op,
                     c->limits.max_frame);
        return NULL;
    }
    char *buf = beam_enc_take(&enc, len);
    beam_enc_destroy(&enc);
    if (!buf)
        PyErr_NoMemory();
    return buf;
}

static int flush_releases(client_t *c, int force);

/* A Python timeout (None or seconds) as a monotonic deadline; 0 is none. */
static int deadline_from(PyObject *timeout, int64_t *deadline)
{
    *deadline = 0;
    if (timeout == Py_None)
        return 0;
    double t = PyFloat_AsDouble(timeout);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    *deadline = now_ns() + (int64_t)(t * 1e9);
    return 0;
}

static PyObject *client_send(client_t *c, PyObject *args)
{
    const char *op;
    PyObject *params;
    if (!PyArg_ParseTuple(args, "sO!:send", &op, &PyDict_Type, &params))
        return NULL;
    if (c->closed)
        return set_conn_error(c), NULL;
    size_t len;
    char *buf = encode_request(c, 0, op, params, &len);
    if (!buf)
        return NULL;
    int rc = send_buffer(c, buf, len);
    free(buf);
    if (rc < 0)
        return set_conn_error(c), NULL;
    if (flush_releases(c, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---------- waiting ---------- */

/* Waits until pred(c, arg) or the deadline (0 = none), reading the socket
 * itself whenever no other thread is. Returns 1 when pred held (or the
 * connection closed), 0 on timeout, -1 when a signal handler raised. Called
 * and returns with the GIL held and c->lock not held. The main thread wakes
 * every 200 ms to run Python's signal handlers (Ctrl-C in ray.get). */
static int wait_for(client_t *c, int (*pred)(client_t *, void *), void *arg, int64_t deadline)
{
    int is_main = PyGILState_Check() && _PyOS_IsMainThread();
    for (;;) {
        int done = 0, timed_out = 0;
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&c->lock);
        c->fg_waiters++;
        for (;;) {
            if (pred(c, arg) || c->closed) {
                done = 1;
                break;
            }
            int64_t now = now_ns(), until = deadline;
            if (deadline && now >= deadline) {
                timed_out = 1;
                break;
            }
            if (is_main && (!until || until > now + 200000000LL))
                until = now + 200000000LL;
            if (!c->reading) {
                /* lead: read the socket ourselves */
                c->reading = 1;
                pthread_mutex_unlock(&c->lock);
                struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
                int ms = until ? (int)((until - now + 999999) / 1000000) : -1;
                int n = poll(&pfd, 1, ms);
                if (n > 0)
                    read_once(c);
                pthread_mutex_lock(&c->lock);
                c->reading = 0;
                pthread_cond_broadcast(&c->cond); /* the next waiter may lead */
                if (n == 0 && is_main && (!deadline || now_ns() < deadline))
                    break; /* a periodic wake: check signals */
                continue;
            }
            if (c->bg_in_poll)
                kick_background(c);
            if (!until) {
                pthread_cond_wait(&c->cond, &c->lock);
                continue;
            }
            struct timespec ts = {.tv_sec = until / 1000000000LL, .tv_nsec = until % 1000000000LL};
            if (pthread_cond_timedwait(&c->cond, &c->lock, &ts) == ETIMEDOUT && is_main &&
                (!deadline || now_ns() < deadline))
                break;
        }
        if (--c->fg_waiters == 0)
            c->fg_last = now_ns();
        pthread_mutex_unlock(&c->lock);
        Py_END_ALLOW_THREADS
        if (done)
            return 1;
        if (timed_out)
            return 0;
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
}

static int slot_filled(client_t *c, void *arg)
{
    return ((slot_t *)arg)->reply != NULL;
}

static void slot_unlink(client_t *c, slot_t *slot)
{
    for (slot_t **p = &c->slots; *p; p = &(*p)->next)
        if (*p == slot) {
            *p = slot->next;
            return;
        }
}

static PyObject *raise_remote(client_t *c, const msgpack_object *error)
{
    module_state_t *st = state_of_type(Py_TYPE(c));
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

static PyObject *client_request(client_t *c, PyObject *args)
{
    const char *op;
    PyObject *params, *timeout_obj = Py_None;
    if (!PyArg_ParseTuple(args, "sO!|O:request", &op, &PyDict_Type, &params, &timeout_obj))
        return NULL;
    int64_t deadline;
    if (deadline_from(timeout_obj, &deadline) < 0)
        return NULL;
    if (flush_releases(c, 0) < 0)
        return NULL;
    slot_t slot = {0};
    pthread_mutex_lock(&c->lock);
    if (c->closed) {
        pthread_mutex_unlock(&c->lock);
        return set_conn_error(c), NULL;
    }
    slot.msgid = ++c->next_msgid;
    slot.next = c->slots;
    c->slots = &slot;
    pthread_mutex_unlock(&c->lock);

    size_t len;
    PyObject *result = NULL;
    char *buf = encode_request(c, slot.msgid, op, params, &len);
    int rc = buf ? send_buffer(c, buf, len) : -1;
    free(buf);
    int waited = 0;
    if (buf && rc == 0)
        waited = wait_for(c, slot_filled, &slot, deadline);
    pthread_mutex_lock(&c->lock);
    slot_unlink(c, &slot);
    pthread_mutex_unlock(&c->lock);
    if (!buf) {
        /* the encoder set the error */
    } else if (rc < 0 || (waited == 1 && !slot.reply)) {
        set_conn_error(c);
    } else if (waited == 0) {
        PyErr_Format(PyExc_TimeoutError, "beam: no reply to '%s' in time", op);
    } else if (waited == 1) {
        beam_msg_t msg;
        char err[160];
        if (beam_msg_parse(slot.reply->data, slot.reply->len, &c->limits, &msg, err, sizeof err) < 0)
            PyErr_Format(PyExc_ConnectionError, "beam: bad reply from beamd: %s", err);
        else {
            if (msg.error.type == MSGPACK_OBJECT_MAP)
                raise_remote(c, &msg.error);
            else
                result = decode(&msg.params);
            beam_msg_destroy(&msg);
        }
    }
    frame_free(slot.reply);
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
    if (deadline_from(timeout_obj, &deadline) < 0)
        return NULL;
    if (flush_releases(c, 0) < 0)
        return NULL;
    int rc = wait_for(c, push_ready, NULL, deadline);
    if (rc < 0)
        return NULL;
    pthread_mutex_lock(&c->lock);
    frame_t *f = c->push_head;
    if (f) {
        c->push_head = f->next;
        if (!c->push_head)
            c->push_tail = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    if (!f) {
        if (rc == 0)
            Py_RETURN_NONE;
        return set_conn_error(c), NULL;
    }
    beam_msg_t msg;
    char err[160];
    PyObject *result = NULL;
    if (beam_msg_parse(f->data, f->len, &c->limits, &msg, err, sizeof err) == 0) {
        PyObject *params = decode(&msg.params);
        if (params)
            result = Py_BuildValue("(s#N)", msg.op, (Py_ssize_t)msg.op_len, params);
        beam_msg_destroy(&msg);
    } else {
        PyErr_Format(PyExc_ConnectionError, "beam: bad push from beamd: %s", err);
    }
    frame_free(f);
    return result;
}

/* ---------- batched releases ---------- */

static int append_id(char **buf, size_t *n, const char *id, size_t idlen)
{
    char *nb = realloc(*buf, (*n + 1) * idlen);
    if (!nb)
        return -1;
    memcpy(nb + *n * idlen, id, idlen);
    *buf = nb;
    (*n)++;
    return 0;
}

/* Sends the batch when it is full, old, or force is set. GIL held. */
/* Takes the queued releases as one encoded request when they are due (full,
 * older than RELEASE_AGE_NS, or force). Returns the buffer or NULL. Needs no
 * GIL: the background thread calls it too. */
static char *take_release_batch(client_t *c, int force, size_t *len)
{
    pthread_mutex_lock(&c->release_lock);
    size_t total = c->n_objs + c->n_actors;
    int due = total > 0 && (force || total >= RELEASE_BATCH || now_ns() - c->rel_since >= RELEASE_AGE_NS);
    if (!due || c->closed) {
        pthread_mutex_unlock(&c->release_lock);
        return NULL;
    }
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_request(&enc, 0, "release", 2);
    beam_pack_key(&enc.pk, "objects");
    msgpack_pack_array(&enc.pk, c->n_objs);
    for (size_t i = 0; i < c->n_objs; i++)
        beam_pack_bin(&enc.pk, c->rel_objs + i * BEAM_OBJECT_ID_SIZE, BEAM_OBJECT_ID_SIZE);
    beam_pack_key(&enc.pk, "actors");
    msgpack_pack_array(&enc.pk, c->n_actors);
    for (size_t i = 0; i < c->n_actors; i++)
        beam_pack_bin(&enc.pk, c->rel_actors + i * BEAM_ACTOR_ID_SIZE, BEAM_ACTOR_ID_SIZE);
    c->n_objs = c->n_actors = 0;
    pthread_mutex_unlock(&c->release_lock);
    int rc = beam_enc_end(&enc, 0);
    char *buf = beam_enc_take(&enc, len);
    beam_enc_destroy(&enc);
    if (rc < 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* When the oldest queued release falls due (0: none queued). */
static int64_t release_due(client_t *c)
{
    pthread_mutex_lock(&c->release_lock);
    int64_t due = c->n_objs + c->n_actors ? c->rel_since + RELEASE_AGE_NS : 0;
    pthread_mutex_unlock(&c->release_lock);
    return due;
}

/* Sends due releases from a Python thread (GIL held). */
static int flush_releases(client_t *c, int force)
{
    size_t len;
    char *buf = take_release_batch(c, force, &len);
    if (buf)
        send_buffer(c, buf, len); /* a closed connection releases everything anyway */
    free(buf);
    return 0;
}

/* Sends due releases from the background thread (no GIL). */
static void flush_releases_nogil(client_t *c)
{
    size_t len;
    char *buf = take_release_batch(c, 0, &len);
    if (!buf)
        return;
    pthread_mutex_lock(&c->send_lock);
    beam_client_write_all(c->fd, buf, len);
    pthread_mutex_unlock(&c->send_lock);
    free(buf);
}

static PyObject *client_release(client_t *c, PyObject *args)
{
    int kind;
    Py_buffer id;
    if (!PyArg_ParseTuple(args, "iy*:release", &kind, &id))
        return NULL;
    size_t want = kind == 0 ? BEAM_OBJECT_ID_SIZE : BEAM_ACTOR_ID_SIZE;
    if ((size_t)id.len != want) {
        PyBuffer_Release(&id);
        PyErr_Format(PyExc_ValueError, "release: id must be %zu bytes", want);
        return NULL;
    }
    pthread_mutex_lock(&c->release_lock);
    int first = c->n_objs + c->n_actors == 0;
    if (first)
        c->rel_since = now_ns();
    int rc = kind == 0 ? append_id(&c->rel_objs, &c->n_objs, id.buf, BEAM_OBJECT_ID_SIZE)
                       : append_id(&c->rel_actors, &c->n_actors, id.buf, BEAM_ACTOR_ID_SIZE);
    int full = c->n_objs + c->n_actors >= RELEASE_BATCH;
    pthread_mutex_unlock(&c->release_lock);
    PyBuffer_Release(&id);
    if (rc < 0)
        return PyErr_NoMemory();
    if (full && flush_releases(c, 1) < 0)
        return NULL;
    if (first && !full)
        kick_background(c); /* so it sends the batch if nothing else does */
    Py_RETURN_NONE;
}

static PyObject *client_flush(client_t *c, PyObject *unused)
{
    if (flush_releases(c, 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---------- lifetime ---------- */

static void client_shutdown(client_t *c)
{
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_lock(&c->lock);
    c->closed = 1;
    pthread_cond_broadcast(&c->cond);
    pthread_cond_broadcast(&c->bg_cond);
    pthread_mutex_unlock(&c->lock);
    if (c->wake_fd >= 0)
        kick_background(c);
    if (c->thread_started) {
        Py_BEGIN_ALLOW_THREADS
        pthread_join(c->thread, NULL);
        Py_END_ALLOW_THREADS
        c->thread_started = 0;
    }
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
        flush_releases(c, 1);
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
    beam_decoder_init(&c->dec, &c->limits);
    c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->wake_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(c);
        return NULL;
    }
    int fd;
    Py_BEGIN_ALLOW_THREADS
    fd = beam_client_connect(path);
    Py_END_ALLOW_THREADS
    if (fd < 0) {
        errno = -fd;
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        Py_DECREF(c);
        return NULL;
    }
    c->fd = fd;
    int rc = pthread_create(&c->thread, NULL, receiver, c);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(c);
        return NULL;
    }
    c->thread_started = 1;
    return (PyObject *)c;
}

static void client_dealloc(client_t *c)
{
    PyTypeObject *tp = Py_TYPE(c);
    PyObject_GC_UnTrack(c);
    client_shutdown(c);
    for (frame_t *f = c->push_head, *n; f; f = n) {
        n = f->next;
        frame_free(f);
    }
    free(c->rel_objs);
    free(c->rel_actors);
    beam_decoder_destroy(&c->dec);
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
     "Raises RemoteError(code, message) for an error reply, ConnectionError when the connection is gone."},
    {"send", (PyCFunction)client_send, METH_VARARGS, "send(op, params). Sends a request that wants no reply."},
    {"next_push", (PyCFunction)client_next_push, METH_VARARGS,
     "next_push(timeout=None) -> (op, params) or None on timeout. Takes the next push from beamd."},
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

static PyMethodDef module_methods[] = {
    {"set_parent_death_signal", set_parent_death_signal, METH_VARARGS,
     "set_parent_death_signal(sig) -> parent pid. This process gets sig when its parent dies."},
    {"default_socket_path", default_socket_path, METH_NOARGS,
     "default_socket_path() -> str. $BEAM_SOCKET, else the per-user default."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *m)
{
    module_state_t *st = PyModule_GetState(m);
    st->RemoteError = PyErr_NewExceptionWithDoc(
        "_beam.RemoteError", "An error reply from beamd: args are (code, message).", PyExc_RuntimeError, NULL);
    if (!st->RemoteError || PyModule_AddObjectRef(m, "RemoteError", st->RemoteError) < 0)
        return -1;
    st->ClientType = (PyTypeObject *)PyType_FromModuleAndSpec(m, &client_spec, NULL);
    if (!st->ClientType || PyModule_AddObjectRef(m, "Client", (PyObject *)st->ClientType) < 0)
        return -1;
    return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    module_state_t *st = PyModule_GetState(m);
    Py_VISIT(st->RemoteError);
    Py_VISIT(st->ClientType);
    return 0;
}

static int module_clear(PyObject *m)
{
    module_state_t *st = PyModule_GetState(m);
    Py_CLEAR(st->RemoteError);
    Py_CLEAR(st->ClientType);
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
    .m_size = sizeof(module_state_t),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
};

PyMODINIT_FUNC PyInit__beam(void)
{
    return PyModuleDef_Init(&module_def);
}
