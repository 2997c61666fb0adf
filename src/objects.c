/* objects.c — the object table, refs carried by values and calls, and the
 * waiters that get and wait park on pending objects. */
#include "objects.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "shm.h"

#include "ids.h"
#include "log.h"

static int parse_ids(const msgpack_object *params, const char *key, size_t idlen, uint32_t *n,
                     char **out, char *err, size_t errlen)
{
    const msgpack_object_array *a;
    int rc = beam_field_array(params, key, &a);
    *n = 0;
    *out = NULL;
    if (rc == -ENOENT || (rc == 0 && a->size == 0))
        return 0;
    if (rc < 0) {
        snprintf(err, errlen, "field '%s' must be an array of ids", key);
        return -1;
    }
    char *ids = malloc((size_t)a->size * idlen);
    if (!ids) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < a->size; i++) {
        const msgpack_object *o = &a->ptr[i];
        if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != idlen) {
            free(ids);
            snprintf(err, errlen, "field '%s' must hold %zu-byte bin ids", key, idlen);
            return -1;
        }
        memcpy(ids + (size_t)i * idlen, o->via.bin.ptr, idlen);
    }
    *n = a->size;
    *out = ids;
    return 0;
}

int beam_refs_parse(const msgpack_object *params, beam_refs_t *refs, char *err, size_t errlen)
{
    memset(refs, 0, sizeof *refs);
    if (parse_ids(params, "objects", BEAM_OBJECT_ID_SIZE, &refs->nobjs, &refs->objs, err, errlen) < 0)
        return -1;
    if (parse_ids(params, "actors", BEAM_ACTOR_ID_SIZE, &refs->nactors, &refs->actors, err, errlen) < 0) {
        beam_refs_free(refs);
        return -1;
    }
    return 0;
}

void beam_refs_free(beam_refs_t *refs)
{
    free(refs->objs);
    free(refs->actors);
    memset(refs, 0, sizeof *refs);
}

void beam_refs_pin(beam_node_t *node, const beam_refs_t *refs)
{
    for (uint32_t i = 0; i < refs->nobjs; i++) {
        beam_object_t *o = beam_object_find(node, refs->objs + (size_t)i * BEAM_OBJECT_ID_SIZE);
        if (o)
            beam_object_pin(node, o);
    }
    for (uint32_t i = 0; i < refs->nactors; i++) {
        if (node->hooks.actor_pin)
            node->hooks.actor_pin(node, refs->actors + (size_t)i * BEAM_ACTOR_ID_SIZE, 1);
    }
}

void beam_refs_unpin(beam_node_t *node, beam_refs_t *refs)
{
    for (uint32_t i = 0; i < refs->nobjs; i++) {
        beam_object_t *o = beam_object_find(node, refs->objs + (size_t)i * BEAM_OBJECT_ID_SIZE);
        if (o)
            beam_object_unpin(node, o);
    }
    for (uint32_t i = 0; i < refs->nactors; i++) {
        if (node->hooks.actor_pin)
            node->hooks.actor_pin(node, refs->actors + (size_t)i * BEAM_ACTOR_ID_SIZE, 0);
    }
    beam_refs_free(refs);
}

beam_object_t *beam_object_find(beam_node_t *node, const char *id)
{
    beam_object_t *o = NULL;
    HASH_FIND(hh, node->objects, id, BEAM_OBJECT_ID_SIZE, o);
    return o;
}

beam_object_t *beam_object_create(beam_node_t *node, const char *id)
{
    if (beam_object_find(node, id))
        return NULL;
    beam_object_t *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    memcpy(o->id, id, BEAM_OBJECT_ID_SIZE);
    HASH_ADD(hh, node->objects, id, BEAM_OBJECT_ID_SIZE, o);
    return o;
}

static void object_free(beam_node_t *node, beam_object_t *o)
{
    HASH_DEL(node->objects, o);
    node->object_bytes -= o->len;
    if (o->buf)
        beam_buf_unref(o->buf);
    else
        free(o->data);
    free(o->waiters);
    beam_refs_t refs = o->refs;
    free(o);
    /* unpinning what it carried may free further objects */
    beam_refs_unpin(node, &refs);
}

/* Frees o once nothing can ask for it. A pending object stays until its call
 * completes, so the completion finds it. */
static void maybe_free(beam_node_t *node, beam_object_t *o)
{
    if (o->holders == 0 && o->pins == 0 && o->nwaiters == 0 && (o->ready || o->abandonable))
        object_free(node, o);
}

void beam_object_pin(beam_node_t *node, beam_object_t *o)
{
    o->pins++;
}

void beam_object_unpin(beam_node_t *node, beam_object_t *o)
{
    if (o->pins > 0)
        o->pins--;
    maybe_free(node, o);
}

void beam_object_hold(beam_node_t *node, beam_object_t *o)
{
    o->holders++;
}

void beam_object_unhold(beam_node_t *node, beam_object_t *o)
{
    if (o->holders > 0)
        o->holders--;
    maybe_free(node, o);
}

size_t beam_object_count(const beam_node_t *node)
{
    return HASH_COUNT(node->objects);
}

/* --- waiters --- */

static int waiter_attach(beam_object_t *o, beam_waiter_t *w)
{
    if (o->nwaiters == o->capwaiters) {
        size_t cap = o->capwaiters ? o->capwaiters * 2 : 2;
        beam_waiter_t **nw = realloc(o->waiters, cap * sizeof *nw);
        if (!nw)
            return -ENOMEM;
        o->waiters = nw;
        o->capwaiters = cap;
    }
    o->waiters[o->nwaiters++] = w;
    return 0;
}

static void waiter_detach(beam_object_t *o, beam_waiter_t *w)
{
    for (size_t i = 0; i < o->nwaiters; i++)
        if (o->waiters[i] == w) {
            o->waiters[i] = o->waiters[--o->nwaiters];
            return;
        }
}

static void waiter_free(beam_waiter_t *w)
{
    if (w->objs != &w->one)
        free(w->objs);
    free(w);
}

static void on_waiter_timer_close(uv_handle_t *h)
{
    waiter_free(h->data);
}

/* Unlinks w from its objects and its connection and frees it (after the
 * timer's close callback when it has one). Objects it kept may be freed. */
static void waiter_finish(beam_waiter_t *w)
{
    beam_node_t *node = w->node;
    if (w->port)
        DL_DELETE(w->port->waiters, w);
    for (uint32_t i = 0; i < w->n; i++) {
        beam_object_t *o = w->objs[i];
        if (!o)
            continue;
        /* the same object may appear twice in a get: detach once per entry */
        waiter_detach(o, w);
    }
    for (uint32_t i = 0; i < w->n; i++) {
        beam_object_t *o = w->objs[i];
        if (!o)
            continue;
        for (uint32_t j = i + 1; j < w->n; j++)
            if (w->objs[j] == o)
                w->objs[j] = NULL;
        maybe_free(node, o);
    }
    if (w->has_timer) {
        uv_timer_stop(&w->timer);
        uv_close((uv_handle_t *)&w->timer, on_waiter_timer_close);
    } else {
        waiter_free(w);
    }
}

static int obj_ready(const beam_object_t *o)
{
    return o == NULL || o->ready;
}

/* A get can be answered when every object is ready, or when a ready one
 * failed (Ray raises the first error without waiting for the rest). */
static int get_done(const beam_waiter_t *w)
{
    int all = 1;
    for (uint32_t i = 0; i < w->n; i++) {
        const beam_object_t *o = w->objs[i];
        if (!obj_ready(o))
            all = 0;
        else if (!o || o->status != BEAM_OBJ_OK)
            return 1;
    }
    return all;
}

static uint32_t count_ready(const beam_waiter_t *w)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < w->n; i++)
        k += obj_ready(w->objs[i]);
    return k;
}

static void reply_get(beam_waiter_t *w)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_reply_ok(&enc, w->msgid);
    msgpack_pack_map(&enc.pk, 1);
    beam_pack_key(&enc.pk, "values");
    msgpack_pack_array(&enc.pk, w->n);
    for (uint32_t i = 0; i < w->n; i++) {
        const beam_object_t *o = w->objs[i];
        if (o && !o->ready) {
            msgpack_pack_nil(&enc.pk);
            continue;
        }
        msgpack_pack_array(&enc.pk, 2);
        if (!o) {
            static const char lost[] = "The object was freed or never created: its ObjectRef has no value here.";
            msgpack_pack_int(&enc.pk, BEAM_OBJ_LOST);
            beam_pack_bin(&enc.pk, lost, sizeof lost - 1);
        } else {
            msgpack_pack_int(&enc.pk, o->status);
            if (w->port->shm && beam_shm_is(o->buf))
                beam_shm_pack(&enc.pk, o->buf); /* the reader maps it (shm.h) */
            else
                beam_pack_bin_buf(&enc, o->buf, o->data, o->len);
        }
    }
    if (beam_enc_end(&enc, w->port->node->limits.max_frame) < 0) {
        beam_enc_destroy(&enc);
        beam_port_reply_error(w->port, w->msgid, "too_large",
                              "the values asked for do not fit in one reply; get them in smaller batches");
        return;
    }
    beam_port_send_enc(w->port, &enc);
}

static void reply_wait(beam_waiter_t *w)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_reply_ok(&enc, w->msgid);
    msgpack_pack_map(&enc.pk, 1);
    beam_pack_key(&enc.pk, "ready");
    uint32_t k = count_ready(w);
    if (k > w->num_returns)
        k = w->num_returns;
    msgpack_pack_array(&enc.pk, k);
    for (uint32_t i = 0, put = 0; i < w->n && put < k; i++)
        if (obj_ready(w->objs[i])) {
            msgpack_pack_uint32(&enc.pk, i);
            put++;
        }
    beam_enc_end(&enc, 0);
    beam_port_send_enc(w->port, &enc);
}

void beam_result_push(beam_node_t *node, beam_port_t *port, const char *id, int status, beam_buf_t *buf,
                      const char *data, size_t len)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_result_push(&enc, id, status, buf, data, len);
    beam_enc_end(&enc, 0);
    if (beam_port_send_enc(port, &enc) == 0)
        node->results_pushed++;
}

void beam_result_push_refused(beam_node_t *node, beam_port_t *port, const char *id, const char *why)
{
    char msg[256];
    int n = snprintf(msg, sizeof msg, "The call was refused: %s.", why);
    beam_result_push(node, port, id, BEAM_OBJ_LOST, NULL, msg, n < 0 ? 0 : (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
}

/* result {obj, status, data} (a value over the bound: result {obj}). */
static void push_result(beam_waiter_t *w)
{
    const beam_object_t *o = w->one;
    beam_result_push(w->node, w->port, o->id, o->status, o->buf, o->data, o->len);
}

static int waiter_done(const beam_waiter_t *w)
{
    if (w->mode == BEAM_WAIT_PUSH)
        return w->one->ready;
    return w->mode == BEAM_WAIT_GET ? get_done(w) : count_ready(w) >= w->num_returns;
}

static void waiter_answer(beam_waiter_t *w)
{
    if (w->mode == BEAM_WAIT_GET)
        reply_get(w);
    else if (w->mode == BEAM_WAIT_WAIT)
        reply_wait(w);
    else
        push_result(w);
    waiter_finish(w);
}

/* The deadline passed: a get fails with `timeout`, a wait answers with what
 * is ready. */
static void waiter_expire(beam_waiter_t *w)
{
    if (w->mode == BEAM_WAIT_GET)
        beam_port_reply_error(w->port, w->msgid, "timeout", "Get timed out: some object(s) not ready.");
    else
        reply_wait(w);
    waiter_finish(w);
}

static void on_waiter_timeout(uv_timer_t *t)
{
    waiter_expire(t->data);
}

int beam_waiter_start(beam_node_t *node, beam_port_t *port, uint64_t msgid, int mode,
                      const msgpack_object_array *ids, uint32_t num_returns, int64_t timeout_ms)
{
    beam_waiter_t *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    w->objs = calloc(ids->size ? ids->size : 1, sizeof *w->objs);
    if (!w->objs) {
        free(w);
        return -ENOMEM;
    }
    w->node = node;
    w->port = port;
    w->msgid = msgid;
    w->mode = mode;
    w->n = ids->size;
    w->num_returns = num_returns;
    for (uint32_t i = 0; i < ids->size; i++)
        w->objs[i] = beam_object_find(node, ids->ptr[i].via.bin.ptr);
    DL_APPEND(port->waiters, w);
    if (waiter_done(w) || timeout_ms == 0) {
        if (waiter_done(w))
            waiter_answer(w);
        else
            waiter_expire(w);
        return 0;
    }
    for (uint32_t i = 0; i < w->n; i++)
        if (w->objs[i] && waiter_attach(w->objs[i], w) < 0) {
            /* out of memory: give the objects back and report it */
            w->n = i;
            waiter_finish(w);
            return -ENOMEM;
        }
    if (timeout_ms > 0) {
        uv_timer_init(node->loop, &w->timer);
        w->timer.data = w;
        w->has_timer = 1;
        /* never early, as Ray: the loop's clock is cached and cut to whole
         * ms, so it is read now and the timer given 1 ms more */
        uv_update_time(node->loop);
        uv_timer_start(&w->timer, on_waiter_timeout, (uint64_t)timeout_ms + 1, 0);
    }
    return 0;
}

int beam_waiter_push(beam_node_t *node, beam_port_t *port, beam_object_t *obj)
{
    beam_waiter_t *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    w->node = node;
    w->port = port;
    w->mode = BEAM_WAIT_PUSH;
    w->n = 1;
    w->one = obj;
    w->objs = &w->one;
    DL_APPEND(port->waiters, w);
    if (obj->ready) {
        waiter_answer(w);
        return 0;
    }
    if (waiter_attach(obj, w) < 0) {
        w->n = 0;
        waiter_finish(w);
        return -ENOMEM;
    }
    return 0;
}

void beam_waiters_cancel(beam_node_t *node, beam_port_t *port)
{
    while (port->waiters) {
        beam_waiter_t *w = port->waiters;
        waiter_finish(w); /* unlinks itself from port->waiters */
    }
}

static void drop_self(beam_refs_t *refs, const char *id)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < refs->nobjs; i++) {
        const char *r = refs->objs + (size_t)i * BEAM_OBJECT_ID_SIZE;
        if (memcmp(r, id, BEAM_OBJECT_ID_SIZE) != 0)
            memmove(refs->objs + (size_t)k++ * BEAM_OBJECT_ID_SIZE, r, BEAM_OBJECT_ID_SIZE);
    }
    refs->nobjs = k;
}

void beam_object_complete(beam_node_t *node, beam_object_t *o, int status, char *data,
                          size_t len, beam_refs_t *refs)
{
    beam_object_complete_buf(node, o, status, NULL, data, len, refs);
}

void beam_object_complete_buf(beam_node_t *node, beam_object_t *o, int status, beam_buf_t *buf,
                              const char *data, size_t len, beam_refs_t *refs)
{
    if (o->ready) { /* a late or duplicate completion: keep the first */
        if (buf)
            beam_buf_unref(buf);
        else
            free((char *)data);
        if (refs)
            beam_refs_free(refs);
        return;
    }
    o->ready = 1;
    o->status = status;
    o->data = (char *)data;
    o->len = len;
    o->buf = buf;
    node->object_bytes += len;
    if (refs) {
        o->refs = *refs;
        memset(refs, 0, sizeof *refs);
        drop_self(&o->refs, o->id); /* a value naming itself would pin itself forever */
        beam_refs_pin(node, &o->refs);
    }
    /* answering a waiter detaches it from o, so walk a snapshot */
    size_t n = o->nwaiters;
    if (n) {
        beam_waiter_t **snap = malloc(n * sizeof *snap);
        if (snap) {
            memcpy(snap, o->waiters, n * sizeof *snap);
            o->pins++; /* o must outlive the walk */
            for (size_t i = 0; i < n; i++) {
                int still = 0;
                for (size_t j = 0; j < o->nwaiters; j++)
                    still |= o->waiters[j] == snap[i];
                if (still && waiter_done(snap[i]))
                    waiter_answer(snap[i]);
            }
            free(snap);
            o->pins--;
        }
    }
    maybe_free(node, o);
}

void beam_object_fail(beam_node_t *node, beam_object_t *o, int status, const char *message)
{
    size_t n = strlen(message);
    char *data = malloc(n ? n : 1);
    if (data)
        memcpy(data, message, n);
    beam_object_complete(node, o, status, data, data ? n : 0, NULL);
}

void beam_objects_owner_gone(beam_node_t *node, uint32_t node_index, uint32_t conn)
{
    beam_object_t *o, *tmp;
    HASH_ITER(hh, node->objects, o, tmp) { /* a fail frees only o, when no one wants it */
        if (!o->ready && beam_id_made_by(o->id, node_index, conn))
            beam_object_fail(node, o, BEAM_OBJ_OWNER_DIED,
                             "The object's owner has exited: the driver or worker that made its ObjectRef "
                             "(with .remote() or ray.put()) ended before its value came.");
    }
}

void beam_objects_destroy(beam_node_t *node)
{
    beam_object_t *o, *tmp;
    HASH_ITER(hh, node->objects, o, tmp) {
        HASH_DEL(node->objects, o);
        if (o->buf)
            beam_buf_unref(o->buf);
        else
            free(o->data);
        free(o->waiters);
        beam_refs_free(&o->refs);
        free(o);
    }
    node->object_bytes = 0;
}
