/* pushed.c — waiting for pushed results and their Python values (pushed.h). */
#include <errno.h>
#include <stdlib.h>

#include "convert.h"
#include "pushed.h"
#include "release.h"
#include "wire.h"

static void entry_free(pb_result_t *e)
{
    if (!e)
        return;
    pb_frame_free(e->frame);
    Py_XDECREF((PyObject *)e->value);
    free(e);
}

int pb_pushed_expect(pb_client_t *c, const char *id)
{
    pthread_mutex_lock(&c->lock);
    int rc = c->results.pending < PB_PUSH_MAX_PENDING ? pb_results_expect(&c->results, id) : 1;
    pthread_mutex_unlock(&c->lock);
    return rc == 0 ? 1 : rc == -ENOMEM ? rc : 0;
}

void pb_pushed_drop(pb_client_t *c, const char *id)
{
    pthread_mutex_lock(&c->lock);
    pb_result_t *e = c->results.count ? pb_results_take(&c->results, id) : NULL;
    pthread_mutex_unlock(&c->lock);
    entry_free(e); /* (a thread decoding it keeps its own value) */
}

void pb_pushed_clear(pb_client_t *c)
{
    pthread_mutex_lock(&c->lock);
    pb_results_t all = c->results;
    c->results = (pb_results_t){0};
    pthread_mutex_unlock(&c->lock);
    for (pb_result_t *e; (e = pb_results_pop(&all));)
        entry_free(e);
}

/* ---------- waiting ---------- */

typedef struct wait_s {
    const char *const *ids;
    size_t n, cursor;
    int scanned;
    uint64_t failed_seen; /* c->results.failed when errors were last looked for */
} wait_t;

static int came(const pb_result_t *e)
{
    return e->state == PB_RESULT_ARRIVED;
}

/* 1 when the wait is over: every id came, or one that came (or is being
 * decoded) failed, or one is not expected here (its value needs a get:
 * pushed.h). Ids before the cursor came already; errors are looked for
 * again only when one was filed since. c->lock held. */
static int wait_done(pb_client_t *c, void *arg)
{
    wait_t *w = arg;
    size_t from = w->cursor;
    if (!w->scanned || c->results.failed != w->failed_seen) {
        /* one pass: an error anywhere ends the wait; the cursor stops at
         * the first id still to come */
        w->scanned = 1;
        w->failed_seen = c->results.failed;
        size_t first = w->n;
        for (size_t i = from; i < w->n; i++) {
            const pb_result_t *e = pb_results_find(&c->results, w->ids[i]);
            if (!e)
                return 1; /* not expected: a get asks beamd */
            if (e->state != PB_RESULT_EXPECTED && e->status > 0)
                return 1;
            if (!came(e) && first == w->n)
                first = i;
        }
        w->cursor = first;
        return first == w->n;
    }
    for (; w->cursor < w->n; w->cursor++) {
        const pb_result_t *e = pb_results_find(&c->results, w->ids[w->cursor]);
        if (!e)
            return 1;
        if (!came(e))
            return 0;
    }
    return 1;
}

int pb_pushed_failed(pb_client_t *c, pb_failed_watch_t *w)
{
    if (w->scanned && c->results.failed == w->failed_seen)
        return 0;
    w->scanned = 1;
    w->failed_seen = c->results.failed;
    for (size_t i = 0; i < w->n; i++) {
        const pb_result_t *e = pb_results_find(&c->results, w->ids[i]);
        if (e && e->state != PB_RESULT_EXPECTED && e->status > 0)
            return 1;
    }
    return 0;
}

typedef struct one_s {
    const char *id;
} one_t;

/* 1 once id's entry is not being decoded by another thread. */
static int not_decoding(pb_client_t *c, void *arg)
{
    const pb_result_t *e = pb_results_find(&c->results, ((one_t *)arg)->id);
    return !e || e->state != PB_RESULT_DECODING;
}

/* The value of a push's frame (taken): (status, data), or True. data
 * lies in the frame: a long one becomes a memoryview of it (convert.h). */
static PyObject *decode(PyTypeObject *frame_type, pb_frame_t *f, int status, const char *data, uint32_t len)
{
    if (status < 0) {
        pb_frame_free(f);
        Py_RETURN_TRUE;
    }
    msgpack_object o = {.type = MSGPACK_OBJECT_BIN};
    o.via.bin.ptr = data;
    o.via.bin.size = len;
    pb_decoding_t d;
    pb_decoding_init(&d, frame_type, f);
    PyObject *v = pb_decode(&d, &o);
    pb_decoding_done(&d);
    if (!v) { /* (out of memory) fetched with a get instead */
        PyErr_Clear();
        Py_RETURN_TRUE;
    }
    return Py_BuildValue("(iN)", status, v);
}

/* A new reference to id's value now (pushed.h), or NULL with an exception. */
static PyObject *value_of(pb_client_t *c, PyTypeObject *frame_type, const char *id)
{
    for (;;) {
        pthread_mutex_lock(&c->lock);
        pb_result_t *e = pb_results_find(&c->results, id);
        if (!e || e->state == PB_RESULT_EXPECTED) {
            pthread_mutex_unlock(&c->lock);
            if (e)
                Py_RETURN_NONE;
            Py_RETURN_FALSE;
        }
        if (e->state == PB_RESULT_DECODING) { /* another thread decodes it: wait for its value */
            pthread_mutex_unlock(&c->lock);
            one_t one = {id};
            if (pb_wait_for(c, not_decoding, &one, 0) < 0)
                return NULL;
            pthread_mutex_lock(&c->lock);
            int stuck = !not_decoding(c, &one) && c->closed;
            pthread_mutex_unlock(&c->lock);
            if (stuck) /* (only when the connection went meanwhile) */
                Py_RETURN_NONE;
            continue;
        }
        if (e->value) {
            PyObject *v = e->value;
            Py_INCREF(v);
            pthread_mutex_unlock(&c->lock);
            return v;
        }
        pb_frame_t *f = e->frame;
        int status = e->status;
        const char *data = e->data;
        uint32_t len = e->len;
        e->frame = NULL;
        e->state = PB_RESULT_DECODING;
        pthread_mutex_unlock(&c->lock);
        PyObject *v = decode(frame_type, f, status, data, len); /* may run Python (a collection): no lock held */
        pthread_mutex_lock(&c->lock);
        e = pb_results_find(&c->results, id);
        if (e && e->state == PB_RESULT_DECODING) {
            e->state = PB_RESULT_ARRIVED;
            e->value = v;
            Py_XINCREF(v);
        }
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        return v;
    }
}

int pb_pushed_wait(pb_client_t *c, PyTypeObject *frame_type, const char *const *ids, size_t n, int64_t deadline,
                   PyObject **out)
{
    wait_t w = {.ids = ids, .n = n};
    pthread_mutex_lock(&c->lock);
    int done = wait_done(c, &w);
    int closed = c->closed;
    pthread_mutex_unlock(&c->lock);
    if (!done && !closed) {
        int rc = pb_wait_for(c, wait_done, &w, deadline);
        if (rc == -EINTR)
            return rc;
        pthread_mutex_lock(&c->lock);
        done = wait_done(c, &w);
        closed = c->closed;
        pthread_mutex_unlock(&c->lock);
    }
    if (!done && closed)
        return -EPIPE;
    /* one pass under the lock for what needs no decoding (most of a long
     * list: values got before, ids to come or not expected), then the rest */
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        const pb_result_t *e = pb_results_find(&c->results, ids[i]);
        out[i] = !e ? Py_False : e->state == PB_RESULT_EXPECTED ? Py_None : (PyObject *)e->value;
        Py_XINCREF(out[i]);
    }
    pthread_mutex_unlock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        if (!out[i] && !(out[i] = value_of(c, frame_type, ids[i]))) {
            for (size_t j = 0; j < n; j++)
                Py_CLEAR(out[j]);
            return -ENOMEM;
        }
    }
    return 0;
}

/* ---------- the Client's methods ---------- */

const char **pb_ids_of(PyObject *seq, Py_ssize_t *n)
{
    *n = PySequence_Fast_GET_SIZE(seq);
    const char **ids = PyMem_Malloc((size_t)(*n ? *n : 1) * sizeof *ids);
    if (!ids) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(o) || PyBytes_GET_SIZE(o) != BEAM_OBJECT_ID_SIZE) {
            PyMem_Free(ids);
            PyErr_Format(PyExc_ValueError, "object ids must be %d bytes", BEAM_OBJECT_ID_SIZE);
            return NULL;
        }
        ids[i] = PyBytes_AS_STRING(o);
    }
    return ids;
}

/* Waits for the pushed results of ids; out gets n new references. 0, or
 * -1 with an exception set. */
static int wait_pushed(pb_client_t *c, const char **ids, size_t n, PyObject *timeout_obj, PyObject **out)
{
    int64_t deadline;
    if (pb_deadline_from(timeout_obj, &deadline) < 0)
        return -1;
    pb_flush_releases(c, 0);
    pb_module_state_t *st = PyType_GetModuleState(Py_TYPE(c));
    int rc = pb_pushed_wait(c, st->FrameBytesType, ids, n, deadline, out);
    if (rc == -EPIPE)
        pb_conn_error(c);
    return rc < 0 ? -1 : 0;
}

PyObject *pb_client_wait_result(pb_client_t *c, PyObject *args)
{
    const char *id;
    Py_ssize_t len;
    PyObject *timeout_obj = Py_None, *v;
    if (!PyArg_ParseTuple(args, "y#|O:wait_result", &id, &len, &timeout_obj))
        return NULL;
    if (len != BEAM_OBJECT_ID_SIZE) {
        PyErr_Format(PyExc_ValueError, "object ids must be %d bytes", BEAM_OBJECT_ID_SIZE);
        return NULL;
    }
    return wait_pushed(c, &id, 1, timeout_obj, &v) < 0 ? NULL : v;
}

PyObject *pb_client_wait_results(pb_client_t *c, PyObject *args)
{
    PyObject *list, *timeout_obj = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:wait_results", &list, &timeout_obj))
        return NULL;
    PyObject *seq = PySequence_Fast(list, "wait_results: ids must be a list");
    if (!seq)
        return NULL;
    Py_ssize_t n;
    const char **ids = pb_ids_of(seq, &n);
    PyObject *out = ids ? PyList_New(n) : NULL;
    if (out && n && wait_pushed(c, ids, (size_t)n, timeout_obj, ((PyListObject *)out)->ob_item) < 0)
        Py_CLEAR(out); /* (its items are NULL: nothing was filled) */
    PyMem_Free(ids);
    Py_DECREF(seq);
    return out;
}

PyObject *pb_client_result_stats(pb_client_t *c, PyObject *unused)
{
    pthread_mutex_lock(&c->lock);
    size_t count = c->results.count;
    unsigned long long filed = c->results.filed;
    pthread_mutex_unlock(&c->lock);
    return Py_BuildValue("(nK)", (Py_ssize_t)count, filed);
}
