/* localresults.c — the results of a member's local calls kept for local gets, and
 * the gets held for them (localresults.h). */
#include "localresults.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <utlist.h>

#include "clientmsg.h"
#include "link.h"
#include "objects.h"
#include "session.h"

/* A call that took the local way: pending, then its result (in the done
 * list, oldest first). */
typedef struct lresult_s {
    char obj[BEAM_OBJECT_ID_SIZE];
    char actor[BEAM_ACTOR_ID_SIZE];
    uint32_t caller;
    int push; /* the caller wants the result pushed (localresults.h) */
    int done, status;
    char *data;
    size_t len;
    struct lresult_s *prev, *next; /* the done list */
    UT_hash_handle hh;
} lresult_t;

/* A local get waiting for local results. */
typedef struct lget_s {
    struct beam_localresults_s *lo;
    uint32_t vconn;
    uint64_t msgid;
    uint32_t n;
    uint32_t cursor; /* ids before it were done when last looked at */
    char *ids;       /* n object ids */
    int64_t timeout_ms;
    uint64_t start_ms;
    uv_timer_t timer;
    int has_timer;
    struct lget_s *prev, *next;
} lget_t;

struct beam_localresults_s {
    beam_node_t *node;
    lresult_t *results;
    size_t nresults;
    lresult_t *done; /* oldest first */
    size_t done_bytes;
    lget_t *gets;
    void (*before_up)(beam_node_t *node); /* sends what the member holds for the head first */
};

typedef struct beam_localresults_s beam_shortcut_t; /* (the functions below name it lo) */

/* Local client vconn's port, or NULL when it is gone or closing. */
static beam_port_t *client(beam_node_t *node, uint32_t vconn)
{
    beam_session_t *s = beam_session_find_local(node, vconn);
    return s && !beam_port_closing(&s->port) ? &s->port : NULL;
}

static lresult_t *find_result(beam_shortcut_t *lo, const char *obj)
{
    lresult_t *r = NULL;
    HASH_FIND(hh, lo->results, obj, BEAM_OBJECT_ID_SIZE, r);
    return r;
}

static void result_free(beam_shortcut_t *lo, lresult_t *r)
{
    HASH_DEL(lo->results, r);
    lo->nresults--;
    if (r->done) {
        DL_DELETE(lo->done, r);
        lo->done_bytes -= r->len;
    }
    free(r->data);
    free(r);
}

/* Keeps the done results within their bounds (and room for one more
 * result when slot), oldest out first (the head has them too): 1 if some
 * went. */
static int trim_done(beam_shortcut_t *lo, int slot)
{
    int trimmed = 0;
    for (; lo->done && (lo->done_bytes > BEAM_KEPT_BYTES || (slot && lo->nresults >= BEAM_KEPT_MAX));
         trimmed = 1)
        result_free(lo, lo->done);
    return trimmed;
}

void beam_localresults_pack_ids(msgpack_packer *pk, const char *key, const char *ids, uint32_t n, size_t size)
{
    beam_pack_key(pk, key);
    msgpack_pack_array(pk, n);
    for (uint32_t i = 0; i < n; i++)
        beam_pack_bin(pk, ids + (size_t)i * size, size);
}

/* ---------- answering gets ---------- */

/* Pushes r's result to its caller (status < 0: `result {obj}`, fetch it
 * with a get). */
static void push_result(beam_shortcut_t *lo, const lresult_t *r, int status)
{
    beam_port_t *c = client(lo->node, r->caller);
    if (c)
        beam_result_push(lo->node, c, r->obj, status, NULL, r->data, r->len);
}

static void get_free_cb(uv_handle_t *h)
{
    free(h->data);
}

static void get_finish(lget_t *g)
{
    DL_DELETE(g->lo->gets, g);
    free(g->ids);
    g->ids = NULL;
    if (g->has_timer) {
        uv_timer_stop(&g->timer);
        g->timer.data = g;
        uv_close((uv_handle_t *)&g->timer, get_free_cb);
    } else {
        free(g);
    }
}

char *beam_localresults_frame(beam_enc_t *req, size_t *len)
{
    char *frame = beam_enc_end(req, 0) == 0 ? beam_enc_take(req, len) : NULL;
    beam_enc_destroy(req);
    return frame;
}

/* The reply the head would give: {values: [[status, data], ...]}. 0, or -1
 * when a result is no longer kept or they do not fit one frame (the head
 * answers then). */
static int reply_values(beam_shortcut_t *lo, beam_port_t *c, const lget_t *g)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_reply_ok(&enc, g->msgid);
    msgpack_pack_map(&enc.pk, 1);
    beam_pack_key(&enc.pk, "values");
    msgpack_pack_array(&enc.pk, g->n);
    for (uint32_t i = 0; i < g->n; i++) {
        lresult_t *r = find_result(lo, g->ids + (size_t)i * BEAM_OBJECT_ID_SIZE);
        if (!r || !r->done) {
            beam_enc_destroy(&enc);
            return -1;
        }
        msgpack_pack_array(&enc.pk, 2);
        msgpack_pack_int(&enc.pk, r->status);
        beam_pack_bin(&enc.pk, r->data, r->len);
    }
    if (beam_enc_end(&enc, lo->node->limits.max_frame) < 0) {
        beam_enc_destroy(&enc);
        return -1;
    }
    beam_port_send_enc(c, &enc);
    return 0;
}

/* 1 if all of g's results are done here, 0 if some are pending, -1 if one
 * is not (or no longer) kept. Looks from g's cursor on: results finish
 * mostly in order, so a get of many is not walked again at each. */
static int held_state(beam_shortcut_t *lo, lget_t *g)
{
    for (; g->cursor < g->n; g->cursor++) {
        lresult_t *r = find_result(lo, g->ids + (size_t)g->cursor * BEAM_OBJECT_ID_SIZE);
        if (!r || !r->done)
            return r ? 0 : -1;
    }
    return 1;
}

/* Answers g if it can be (1), or sends it to the head (with what is left
 * of its timeout) when a result it names is no longer kept here (1); 0 if
 * it must wait. Finished gets are freed. */
static int try_get(beam_shortcut_t *lo, lget_t *g)
{
    int st = held_state(lo, g);
    if (st == 0)
        return 0;
    beam_port_t *c = client(lo->node, g->vconn);
    if (c && !(st == 1 && reply_values(lo, c, g) == 0)) {
        int64_t left = g->timeout_ms;
        uint64_t spent = uv_now(lo->node->loop) - g->start_ms;
        if (left > 0)
            left = spent >= (uint64_t)left ? 0 : left - (int64_t)spent;
        beam_enc_t req;
        beam_enc_init(&req);
        beam_enc_request(&req, g->msgid, "get", 2);
        beam_localresults_pack_ids(&req.pk, "objs", g->ids, g->n, BEAM_OBJECT_ID_SIZE);
        beam_pack_key(&req.pk, "timeout_ms");
        msgpack_pack_int64(&req.pk, left);
        if (lo->before_up)
            lo->before_up(lo->node); /* what the member holds goes up first */
        size_t len;
        char *frame = beam_localresults_frame(&req, &len);
        if (frame && beam_link_up(lo->node))
            beam_clientmsg_forward(lo->node, g->vconn, frame + BEAM_FRAME_HEADER, len - BEAM_FRAME_HEADER);
        else
            beam_port_reply_error(c, g->msgid, "internal", frame ? "the head is lost" : "out of memory");
        free(frame);
    }
    get_finish(g);
    return 1;
}

/* Looks at every held get again; full: from its start (results went). */
static void check_gets(beam_shortcut_t *lo, int full)
{
    lget_t *g, *tmp;
    DL_FOREACH_SAFE(lo->gets, g, tmp) {
        if (full)
            g->cursor = 0;
        try_get(lo, g);
    }
}

static void on_get_timeout(uv_timer_t *t)
{
    lget_t *g = t->data;
    beam_port_t *c = client(g->lo->node, g->vconn);
    if (c)
        beam_port_reply_error(c, g->msgid, "timeout", "Get timed out: some object(s) not ready.");
    get_finish(g);
}

/* (an object that is not a local call, and the get goes to the head; its
 * fields were checked by shortcut.c's table) */
int beam_localresults_get(beam_localresults_t *lo, uint32_t vconn, uint64_t msgid, const msgpack_object_array *ids, int64_t ms)
{
    if (msgid == 0 || ids->size == 0 || !client(lo->node, vconn))
        return 0;
    for (uint32_t i = 0; i < ids->size; i++)
        if (!find_result(lo, ids->ptr[i].via.bin.ptr))
            return 0;
    lget_t *g = calloc(1, sizeof *g);
    char *copy = g ? malloc((size_t)ids->size * BEAM_OBJECT_ID_SIZE) : NULL;
    if (!copy) {
        free(g);
        return 0;
    }
    for (uint32_t i = 0; i < ids->size; i++)
        memcpy(copy + (size_t)i * BEAM_OBJECT_ID_SIZE, ids->ptr[i].via.bin.ptr, BEAM_OBJECT_ID_SIZE);
    *g = (lget_t){.lo = lo, .vconn = vconn, .msgid = msgid, .n = ids->size, .ids = copy, .timeout_ms = ms,
                  .start_ms = uv_now(lo->node->loop)};
    lo->node->gets++;
    DL_APPEND(lo->gets, g);
    if (try_get(lo, g))
        return 1;
    if (ms == 0) {
        beam_port_reply_error(client(lo->node, vconn), msgid, "timeout",
                              "Get timed out: some object(s) not ready.");
        get_finish(g);
    } else if (ms > 0) {
        uv_timer_init(lo->node->loop, &g->timer);
        g->timer.data = g;
        g->has_timer = 1;
        uv_update_time(lo->node->loop); /* never early: as objects.c's waiter timers */
        uv_timer_start(&g->timer, on_get_timeout, (uint64_t)ms + 1, 0);
    }
    return 1;
}

int beam_localresults_done(beam_localresults_t *lo, const char *actor, const char *obj, int status, const char *data, uint32_t len)
{
    lresult_t *r = find_result(lo, obj);
    if (!r || r->done || memcmp(r->actor, actor, BEAM_ACTOR_ID_SIZE) != 0)
        return 0;
    char *copy = len <= BEAM_KEPT_BYTES / 4 ? malloc(len ? len : 1) : NULL;
    int full = 0;
    if (!copy) {
        if (r->push) /* not kept: fetched from the head, which has it next */
            push_result(lo, r, -1);
        result_free(lo, r); /* not kept: a get of it goes to the head */
        full = 1;
    } else {
        memcpy(copy, data, len);
        r->data = copy;
        r->len = len;
        r->status = (int)status;
        r->done = 1;
        DL_APPEND(lo->done, r);
        lo->done_bytes += len;
        if (r->push)
            push_result(lo, r, r->status);
        full = trim_done(lo, 0);
    }
    if (lo->gets)
        check_gets(lo, full);
    return 1;
}

void beam_localresults_release(beam_localresults_t *lo, uint32_t vconn, const msgpack_object_array *ids)
{
    int dropped = 0;
    for (uint32_t i = 0; i < ids->size; i++) {
        lresult_t *r = find_result(lo, ids->ptr[i].via.bin.ptr);
        if (r && r->caller == vconn) { /* (a pending one too: its result will not be kept) */
            result_free(lo, r);
            dropped = 1;
        }
    }
    if (dropped && lo->gets)
        check_gets(lo, 1); /* another client's get of one goes to the head */
}


int beam_localresults_any(const beam_localresults_t *k)
{
    return k->results != NULL;
}

int beam_localresults_state(beam_localresults_t *lo, const char *obj, int *status, const char **data, size_t *len)
{
    lresult_t *r = find_result(lo, obj);
    if (r && r->done && status && data && len) {
        *status = r->status;
        *data = r->data;
        *len = r->len;
    }
    return r ? r->done : -1;
}

int beam_localresults_add(beam_localresults_t *lo, const char *obj, const char *actor, uint32_t caller, int push)
{
    if (find_result(lo, obj))
        return -EEXIST;
    if (trim_done(lo, 1) && lo->gets)
        check_gets(lo, 1);
    if (lo->nresults >= BEAM_KEPT_MAX)
        return -ENOSPC;
    lresult_t *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    memcpy(r->obj, obj, BEAM_OBJECT_ID_SIZE);
    memcpy(r->actor, actor, BEAM_ACTOR_ID_SIZE);
    r->caller = caller;
    r->push = push;
    HASH_ADD(hh, lo->results, obj, BEAM_OBJECT_ID_SIZE, r);
    lo->nresults++;
    return 0;
}

void beam_localresults_drop(beam_localresults_t *lo, const char *obj)
{
    lresult_t *r = find_result(lo, obj);
    if (r)
        result_free(lo, r);
}

void beam_localresults_cut(beam_localresults_t *lo, const char *actor)
{
    lresult_t *r, *tmp;
    HASH_ITER(hh, lo->results, r, tmp)
        if (!r->done && memcmp(r->actor, actor, BEAM_ACTOR_ID_SIZE) == 0) {
            if (r->push) /* the head answers it now: its caller fetches it there */
                push_result(lo, r, -1);
            result_free(lo, r);
        }
    check_gets(lo, 1);
}

void beam_localresults_client_gone(beam_localresults_t *lo, uint32_t vconn)
{
    lresult_t *r, *rt;
    lget_t *g, *gt;
    HASH_ITER(hh, lo->results, r, rt)
        if (r->caller == vconn)
            result_free(lo, r);
    DL_FOREACH_SAFE(lo->gets, g, gt)
        if (g->vconn == vconn)
            get_finish(g);
}

beam_localresults_t *beam_localresults_new(beam_node_t *node, void (*before_up)(beam_node_t *node))
{
    beam_localresults_t *k = calloc(1, sizeof *k);
    if (k) {
        k->node = node;
        k->before_up = before_up;
    }
    return k;
}

void beam_localresults_clear(beam_localresults_t *lo)
{
    while (lo->gets)
        get_finish(lo->gets);
    while (lo->results)
        result_free(lo, lo->results);
}

void beam_localresults_free(beam_localresults_t *k)
{
    if (k)
        beam_localresults_clear(k);
    free(k);
}
