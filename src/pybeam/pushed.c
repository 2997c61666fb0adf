/* pushed.c — waiting for pushed results and their Python values (pushed.h). */
#include <errno.h>
#include <stdlib.h>

#include "convert.h"
#include "pushed.h"
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
    int rc = pb_results_expect(&c->results, id);
    pthread_mutex_unlock(&c->lock);
    return rc == -EEXIST ? 0 : rc;
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

/* 1 when the wait is over: every expected id came, or one that came (or
 * is being decoded) failed. Ids before the cursor came already; errors are
 * looked for again only when one was filed since. c->lock held. */
static int wait_done(pb_client_t *c, void *arg)
{
    wait_t *w = arg;
    if (!w->scanned || c->results.failed != w->failed_seen) {
        w->scanned = 1;
        w->failed_seen = c->results.failed;
        for (size_t i = 0; i < w->n; i++) {
            const pb_result_t *e = pb_results_find(&c->results, w->ids[i]);
            if (e && e->state != PB_RESULT_EXPECTED && e->status > 0)
                return 1;
        }
    }
    for (; w->cursor < w->n; w->cursor++) {
        const pb_result_t *e = pb_results_find(&c->results, w->ids[w->cursor]);
        if (e && !came(e))
            return 0;
    }
    return 1;
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

/* The value of a push's frame (taken): (status, data), or True. */
static PyObject *decode(PyTypeObject *frame_type, pb_frame_t *f, int status)
{
    const msgpack_object *data = NULL;
    const msgpack_object_map *m = &f->msg.params.via.map;
    for (uint32_t i = 0; status >= 0 && f->msg.params.type == MSGPACK_OBJECT_MAP && i < m->size; i++)
        if (m->ptr[i].key.type == MSGPACK_OBJECT_STR &&
            beam_str_eq(m->ptr[i].key.via.str.ptr, m->ptr[i].key.via.str.size, "data"))
            data = &m->ptr[i].val;
    if (!data) {
        pb_frame_free(f);
        Py_RETURN_TRUE;
    }
    pb_decoding_t d;
    pb_decoding_init(&d, frame_type, f);
    PyObject *v = pb_decode(&d, data);
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
        e->frame = NULL;
        e->state = PB_RESULT_DECODING;
        pthread_mutex_unlock(&c->lock);
        PyObject *v = decode(frame_type, f, status); /* may run Python (a collection): no lock held */
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
    for (size_t i = 0; i < n; i++) {
        if (!(out[i] = value_of(c, frame_type, ids[i]))) {
            while (i > 0) {
                Py_DECREF(out[--i]);
                out[i] = NULL;
            }
            return -ENOMEM;
        }
    }
    return 0;
}
