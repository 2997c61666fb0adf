/* local.c — a member's shortcut for the calls between its own clients and
 * the actors whose workers run on it (local.h; docs/DESIGN.md, "Calls that
 * stay on a member").
 *
 * Why it agrees with the head. The member's frames reach the head in the
 * order the member sends them, over one link. A worker's result is kept
 * here only while its actor is not cut; the member cuts an actor (stops
 * taking its results) exactly where it sends up one of the messages after
 * which the head takes no more results of a local call: a local client's
 * `kill` of it, the worker's `worker_exit`, the worker's `client_closed`.
 * The head, for its part, keeps a local call of a dead actor open until one
 * of those arrives (src/actor/localcalls.c), so a result the member gave a local caller
 * is the result the head holds, and a call the head failed was never
 * answered here. */
#include "local.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <utlist.h>

#include "fieldspec.h"
#include "kept.h"
#include "link.h"
#include "log.h"
#include "session.h"

/* The creator's part of an object id (node index, connection number): who
 * made the call, as the head and the member both read it (ids.h). */
#define CREATOR_BYTES BEAM_ID_CREATOR_BYTES
#define PAIR_KEY (CREATOR_BYTES + BEAM_ACTOR_ID_SIZE)

typedef struct lworker_s {
    char actor[BEAM_ACTOR_ID_SIZE];
    uint32_t vconn; /* its worker's local client */
    int ready;      /* it said actor_ready ok, and is not cut */
    int cut;        /* its results are no longer taken here */
    UT_hash_handle hh;
} lworker_t;

typedef struct lclient_s {
    uint32_t vconn;
    int is_worker;
    char actor[BEAM_ACTOR_ID_SIZE]; /* the actor it is the worker of */
    /* The ids it may use, as the head checks them (ids.h): its creator
     * part, learned from the reply to its hello passing down (hello_msgid
     * while that is awaited), and the highest sequence of an object id it
     * has named in a put, submit or pg_ready so far. A submit goes the
     * local way only with an id of its own above that: one the head cannot
     * already hold, so the head takes every call run here. has_creator
     * stays 0 (no call of it taken here) when a frame of it could not be
     * read here (blind: never again). */
    uint64_t hello_msgid;
    int has_creator, blind;
    char creator[CREATOR_BYTES];
    uint32_t node_index, conn;
    int any_seq;
    uint64_t top_seq;
    UT_hash_handle hh;
} lclient_t;

/* Submits of one caller to one actor forwarded to the head whose `call`
 * has not yet passed down here: while any is, its next submit goes up too. */
typedef struct lpair_s {
    char key[PAIR_KEY];
    uint32_t pending;
    UT_hash_handle hh;
} lpair_t;

typedef struct beam_local_s {
    beam_node_t *node;
    lworker_t *workers;
    lclient_t *clients;
    lpair_t *pairs;
    size_t npairs;
    int unordered; /* the pairs' cap was hit: no more local calls */
    beam_kept_t *kept; /* the local calls' results (kept.c) */
    /* The records held for the head (beam_local_flush): the local_batch
     * being built, nheld records so far in its msgs array, whose 32-bit
     * count lies at held_count_at and is written when the batch goes. */
    beam_enc_t held;
    size_t nheld, held_count_at;
    uint64_t held_since;   /* loop time the first record was held */
    uv_prepare_t hold_age; /* before each wait: sends what is BEAM_LOCAL_HOLD_MS old */
    uv_timer_t hold_timer; /* sends what is held after BEAM_LOCAL_QUIET_MS */
} beam_local_t;

/* The table; NULL on a head. (A send never ends the link under its caller,
 * link.h, so no hook runs into a reset of this table.) */
static beam_local_t *table(const beam_node_t *node)
{
    return node->is_member ? node->local : NULL;
}

/* ---------- peeking at a frame's op without parsing it ---------- */

/* The op of a request [0, msgid, op, params] (push 0) or a push [2, op,
 * params] (push 1) as beam's encoder writes them; -1 for another shape (a
 * request is then parsed whole to find its op). */
static int peek_op(const char *body, size_t n, int push, const char **op, uint32_t *op_len)
{
    const unsigned char *b = (const unsigned char *)body;
    size_t i = 2;
    if (n < 4 || b[0] != (push ? 0x93 : 0x94) || b[1] != (push ? 0x02 : 0x00))
        return -1;
    if (!push) {
        unsigned char t = b[i];
        i += t <= 0x7f ? 1 : (t == 0xcc || t == 0xd0) ? 2 : (t == 0xcd || t == 0xd1) ? 3
           : (t == 0xce || t == 0xd2) ? 5 : (t == 0xcf || t == 0xd3) ? 9 : n;
    }
    if (i + 1 >= n || ((b[i] & 0xe0) != 0xa0 && b[i] != 0xd9)) /* a fixstr or a str8 */
        return -1;
    uint32_t len = b[i] == 0xd9 ? b[i + 1] : b[i] & 0x1fu;
    i += b[i] == 0xd9 ? 2 : 1;
    if (i + len > n)
        return -1;
    *op = body + i;
    *op_len = len;
    return 0;
}

/* ---------- the tables ---------- */

static void pair_key(char *key, const char *obj, const char *actor)
{
    memcpy(key, obj, CREATOR_BYTES);
    memcpy(key + CREATOR_BYTES, actor, BEAM_ACTOR_ID_SIZE);
}

/* find_worker, find_pair: a record by its key, or NULL. */
#define FINDER(name, type, table, size)                                                                               \
    static type *name(beam_local_t *lo, const char *key)                                                              \
    {                                                                                                                  \
        type *e = NULL;                                                                                                \
        HASH_FIND(hh, lo->table, key, size, e);                                                                        \
        return e;                                                                                                      \
    }
FINDER(find_worker, lworker_t, workers, BEAM_ACTOR_ID_SIZE)
FINDER(find_pair, lpair_t, pairs, PAIR_KEY)

/* The record of local client vconn; create: made if missing (NULL when
 * out of memory). */
static lclient_t *find_client(beam_local_t *lo, uint32_t vconn, int create)
{
    lclient_t *c = NULL;
    HASH_FIND(hh, lo->clients, &vconn, sizeof vconn, c);
    if (!c && create && (c = calloc(1, sizeof *c))) {
        c->vconn = vconn;
        HASH_ADD(hh, lo->clients, vconn, sizeof c->vconn, c);
    }
    return c;
}

/* ---------- cutting an actor ---------- */

/* From here on the actor's results are not taken here (see the top): its
 * pending local calls are the head's to answer, and so are gets of them. */
static void cut_worker(beam_local_t *lo, lworker_t *w)
{
    if (w->cut)
        return;
    w->cut = 1;
    w->ready = 0;
    beam_kept_cut(lo->kept, w->actor);
}

static void worker_forget(beam_local_t *lo, lworker_t *w)
{
    cut_worker(lo, w);
    HASH_DEL(lo->workers, w);
    free(w);
}

/* ---------- a local call ---------- */

/* Sends the local_batch of what is held (one frame for the head to open,
 * one write). A batch that ran out of memory while it was built has lost
 * records of calls the member already ran: the link is closed then (the
 * head loses this node, which joins again), never a record dropped. */
static void flush_held(beam_local_t *lo)
{
    size_t n = lo->nheld;
    beam_link_t *l = beam_link_up(lo->node);
    uv_timer_stop(&lo->hold_timer);
    uv_prepare_stop(&lo->hold_age);
    if (n == 0)
        return;
    lo->nheld = 0;
    if (l && !lo->held.failed) {
        beam_put_u32be(lo->held.sbuf.data + lo->held_count_at, (uint32_t)n);
        if (beam_enc_end(&lo->held, 0) == 0) {
            beam_link_send_enc(l, &lo->held); /* (which destroys it) */
            return;
        }
    }
    beam_enc_destroy(&lo->held);
    if (l)
        beam_link_close(l, "out of memory holding local calls for the head", 0);
}

static void on_hold_timer(uv_timer_t *t)
{
    flush_held(t->data);
}

/* The loop is about to wait: what has been held BEAM_LOCAL_HOLD_MS goes. */
static void on_hold_age(uv_prepare_t *p)
{
    beam_local_t *lo = p->data;
    if (uv_now(lo->node->loop) - lo->held_since >= BEAM_LOCAL_HOLD_MS)
        flush_held(lo);
}

/* Starts a record [kind, vconn, frame] in the batch being built (the batch
 * first when none is); the caller packs the frame bin, then record_done. */
static void record_start(beam_local_t *lo, int kind, uint32_t vconn)
{
    static const char array32[5] = {(char)0xdd, 0, 0, 0, 0}; /* msgs: its count written at the end */
    if (lo->nheld == 0) {
        beam_enc_init(&lo->held);
        beam_enc_push(&lo->held, "local_batch", 1);
        beam_pack_key(&lo->held.pk, "msgs");
        msgpack_pack_bin_body(&lo->held.pk, array32, sizeof array32);
        lo->held_count_at = lo->held.sbuf.size - 4;
    }
    msgpack_pack_array(&lo->held.pk, 3);
    msgpack_pack_uint8(&lo->held.pk, (uint8_t)kind);
    msgpack_pack_uint32(&lo->held.pk, vconn);
}

/* The record is held, to go up with the next message for the head, or once
 * it is BEAM_LOCAL_HOLD_MS old (BEAM_LOCAL_QUIET_MS if the loop falls
 * quiet), or once BEAM_LOCAL_HOLD_MAX records or BEAM_LOCAL_HOLD_BYTES are
 * held. */
static void record_done(beam_local_t *lo)
{
    if (++lo->nheld >= BEAM_LOCAL_HOLD_MAX || lo->held.sbuf.size >= BEAM_LOCAL_HOLD_BYTES || lo->held.failed) {
        flush_held(lo);
    } else if (lo->nheld == 1) {
        lo->held_since = uv_now(lo->node->loop);
        uv_prepare_start(&lo->hold_age, on_hold_age);
        uv_timer_start(&lo->hold_timer, on_hold_timer, BEAM_LOCAL_QUIET_MS, 0);
    }
}

/* A local call's task_done (body, from worker vconn) held: 0, or -1 (too
 * large to hold: it is to be forwarded now, after what is held). */
static int hold_frame(beam_local_t *lo, uint32_t vconn, const char *body, size_t len)
{
    if (len > BEAM_LOCAL_HOLD_BYTES / 4)
        return -1;
    record_start(lo, BEAM_LOCAL_REC_FRAME, vconn);
    beam_pack_bin(&lo->held.pk, body, len);
    record_done(lo);
    return 0;
}

void beam_local_flush(beam_node_t *node)
{
    beam_local_t *lo = table(node);
    if (lo && lo->nheld)
        flush_held(lo);
}

/* Holds the submit to go up (the client's own request, its args left out:
 * the head records the call as sent and never needs them), then writes the
 * call to the worker: 0, or -1 (nothing done: out of memory). */
static int run_local(beam_local_t *lo, uint32_t vconn, beam_session_t *wc, uint64_t msgid, const beam_submit_req_t *s)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_request(&enc, msgid, "submit", 6);
    beam_pack_key(&enc.pk, "actor");
    beam_pack_bin(&enc.pk, s->actor, BEAM_ACTOR_ID_SIZE);
    beam_pack_key(&enc.pk, "obj");
    beam_pack_bin(&enc.pk, s->obj, BEAM_OBJECT_ID_SIZE);
    beam_pack_key(&enc.pk, "method");
    beam_pack_strn(&enc.pk, s->method, s->method_len);
    beam_pack_key(&enc.pk, "args");
    beam_pack_bin(&enc.pk, "", 0);
    beam_kept_pack_ids(&enc.pk, "objects", s->refs.objs, s->refs.nobjs, BEAM_OBJECT_ID_SIZE);
    beam_kept_pack_ids(&enc.pk, "actors", s->refs.actors, s->refs.nactors, BEAM_ACTOR_ID_SIZE);
    size_t len = 0;
    char *frame = beam_kept_frame(&enc, &len);
    if (!frame)
        return -1;
    record_start(lo, BEAM_LOCAL_REC_SUBMIT, vconn);
    beam_pack_bin(&lo->held.pk, frame + BEAM_FRAME_HEADER, len - BEAM_FRAME_HEADER);
    free(frame);
    record_done(lo);
    beam_enc_init(&enc);
    beam_enc_push(&enc, "call", 3);
    beam_pack_key(&enc.pk, "obj");
    beam_pack_bin(&enc.pk, s->obj, BEAM_OBJECT_ID_SIZE);
    beam_pack_key(&enc.pk, "method");
    beam_pack_strn(&enc.pk, s->method, s->method_len);
    beam_pack_key(&enc.pk, "args");
    beam_pack_bin(&enc.pk, s->args, s->args_len);
    beam_enc_end(&enc, 0);
    beam_port_send_enc(&wc->port, &enc);
    return 0;
}

/* 1 when cl's calls may be taken here: its ids are known (see lclient_t). */
static int ids_known(const lclient_t *cl)
{
    return cl && cl->has_creator && !cl->blind;
}

/* A new object id named by client cl (put, submit, pg_ready): 1 when it
 * is cl's own and above every one cl named before (the head cannot hold
 * it yet), 0 when not; -1 when it is not cl's own (the head refuses it).
 * Either way the highest sequence named so far is kept. */
static int note_obj(lclient_t *cl, const char *obj)
{
    if (!ids_known(cl))
        return 0;
    if (!beam_id_made_by(obj, cl->node_index, cl->conn))
        return -1;
    uint64_t seq = beam_object_seq(obj);
    int fresh = !cl->any_seq || seq > cl->top_seq;
    if (fresh) {
        cl->top_seq = seq;
        cl->any_seq = 1;
    }
    return fresh;
}

/* A checked submit from a local client: 1 when it went the local way. */
static int submit_way(beam_local_t *lo, uint32_t vconn, uint64_t msgid, const beam_submit_req_t *sp)
{
    const beam_submit_req_t s = *sp;
    char key[PAIR_KEY];
    lclient_t *cl = find_client(lo, vconn, 0);
    int fresh = note_obj(cl, s.obj);
    if (fresh < 0 || !ids_known(cl))
        return 0; /* the head refuses it, or none of this client's calls is taken here: no order to keep */
    pair_key(key, s.obj, s.actor);
    lpair_t *p = find_pair(lo, key);
    lworker_t *w = find_worker(lo, s.actor);
    beam_session_t *wc = fresh && w && w->ready && !p && !lo->unordered ? beam_session_find_local(lo->node, w->vconn)
                                                                        : NULL;
    if (wc && beam_port_closing(&wc->port)) {
        cut_worker(lo, w);
        wc = NULL;
    }
    if (wc && beam_kept_add(lo->kept, s.obj, s.actor, vconn, s.push) == 0) {
        if (run_local(lo, vconn, wc, msgid, &s) == 0)
            return 1;
        beam_kept_drop(lo->kept, s.obj);
    }
    /* through the head: counted until its call passes down here (an id
     * the head refuses as in use stays counted: that pair's calls then
     * all go through the head, in order) */
    if (lo->unordered)
        return 0;
    if (!p) {
        p = lo->npairs < BEAM_LOCAL_MAX_PAIRS ? calloc(1, sizeof *p) : NULL;
        if (!p) {
            beam_log(BEAM_LOG_WARN, "local calls: %zu (caller, actor) pairs counted; calls go through the head "
                                    "until this node joins again", lo->npairs);
            lo->unordered = 1;
            return 0;
        }
        memcpy(p->key, key, PAIR_KEY);
        HASH_ADD(hh, lo->pairs, key, PAIR_KEY, p);
        lo->npairs++;
    }
    p->pending++;
    return 0;
}

/* A submit's fields by the head's own table (fieldspec.h: op_submit checks
 * the same): 0, or -EINVAL when one is wrong (the submit then goes to the
 * head, which answers it), so a call taken here is one the head takes. */
static int check_submit(const msgpack_object *params, beam_submit_req_t *s, char *err, size_t errlen)
{
    beam_field_val_t v[BEAM_SUBMIT_NFIELDS];
    const char *field, *what;
    memset(s, 0, sizeof *s);
    if (beam_fields_check(params, beam_submit_fields, BEAM_SUBMIT_NFIELDS, v, &field, &what, err, errlen) < 0)
        return -EINVAL;
    s->actor = v[BEAM_SUBMIT_ACTOR].s;
    s->obj = v[BEAM_SUBMIT_OBJ].s;
    s->method = v[BEAM_SUBMIT_METHOD].s;
    s->method_len = v[BEAM_SUBMIT_METHOD].len;
    s->args = v[BEAM_SUBMIT_ARGS].s;
    s->args_len = v[BEAM_SUBMIT_ARGS].len;
    s->push = (int)v[BEAM_SUBMIT_PUSH].i;
    return beam_refs_parse(params, &s->refs, err, errlen);
}

/* submit from a local client: 1 when it went the local way. */
static int local_submit(beam_local_t *lo, uint32_t vconn, const beam_msg_t *m)
{
    beam_submit_req_t s;
    char err[200];
    if (check_submit(&m->params, &s, err, sizeof err) < 0)
        return 0; /* the head refuses it as it always has; no call will come of it */
    int taken = submit_way(lo, vconn, m->msgid, &s);
    beam_refs_free(&s.refs);
    return taken;
}

/* ---------- the hooks ---------- */

/* A frame up, from a parsed message: 1 when taken here. */
static int up_msg(beam_local_t *lo, uint32_t vconn, lclient_t *cl, const char *op, uint32_t op_len,
                  const beam_msg_t *m, const char *body, size_t len)
{
    const char *actor, *obj;
    int ok;
    lworker_t *w;
    if (beam_str_eq(op, op_len, "submit"))
        return local_submit(lo, vconn, m);
    if (beam_str_eq(op, op_len, "hello")) {
        if (m->msgid && (cl = find_client(lo, vconn, 1)) && !cl->has_creator)
            cl->hello_msgid = m->msgid; /* its reply says which ids are its own */
        return 0;
    }
    if (beam_str_eq(op, op_len, "put") || beam_str_eq(op, op_len, "pg_ready")) {
        if (beam_field_id(&m->params, "obj", BEAM_OBJECT_ID_SIZE, &obj) == 0)
            note_obj(cl, obj);
        return 0;
    }
    if (beam_str_eq(op, op_len, "get"))
        return beam_kept_get(lo->kept, vconn, m);
    if (beam_str_eq(op, op_len, "task_done")) {
        /* a local call's result: kept for the local caller, and held to go up
         * with what follows (the head learns of it before anything else) */
        if ((w = find_worker(lo, cl->actor)) && !w->cut && beam_kept_done(lo->kept, cl->actor, m))
            return hold_frame(lo, vconn, body, len) == 0;
    } else if (beam_str_eq(op, op_len, "release")) {
        beam_kept_release(lo->kept, vconn, m);
    } else if (beam_str_eq(op, op_len, "actor_ready")) {
        if ((w = find_worker(lo, cl->actor)) && !w->cut && w->vconn == vconn &&
            beam_field_bool(&m->params, "ok", &ok) == 0 && ok)
            w->ready = 1;
    } else if (beam_field_id(&m->params, "actor", BEAM_ACTOR_ID_SIZE, &actor) == 0 &&
               (w = find_worker(lo, actor))) {
        cut_worker(lo, w); /* kill: the head fails its open local calls on this very message */
    }
    return 0;
}

/* 1 if op from that client is one this table looks at. */
static int wanted_up(beam_local_t *lo, const lclient_t *cl, const char *op, uint32_t op_len)
{
    if (beam_str_eq(op, op_len, "task_done") || beam_str_eq(op, op_len, "actor_ready"))
        return cl && cl->is_worker;
    if (beam_str_eq(op, op_len, "put") || beam_str_eq(op, op_len, "pg_ready"))
        return ids_known(cl);
    return beam_str_eq(op, op_len, "submit") || beam_str_eq(op, op_len, "hello") || beam_str_eq(op, op_len, "kill") ||
           ((beam_str_eq(op, op_len, "get") || beam_str_eq(op, op_len, "release")) && beam_kept_any(lo->kept));
}

static int up_frame(beam_local_t *lo, uint32_t vconn, const char *body, size_t len)
{
    const char *op;
    uint32_t op_len;
    beam_node_t *node = lo->node;
    lclient_t *cl = find_client(lo, vconn, 0);
    int peeked = peek_op(body, len, 0, &op, &op_len) == 0;
    beam_msg_t m;
    char err[160];
    if (peeked && !wanted_up(lo, cl, op, op_len))
        return 0;
    if (beam_msg_parse(body, len, &node->limits, &m, err, sizeof err) < 0) {
        if (cl)
            cl->blind = 1; /* an id it named went by unseen: none of its calls is taken here now */
        return 0;
    }
    int taken = 0;
    if (!peeked) { /* every submit is seen here, however it is encoded: its order counts */
        op = m.op;
        op_len = m.op_len;
    }
    if (m.type == BEAM_MSG_REQUEST && (peeked || wanted_up(lo, cl, op, op_len))) {
        taken = up_msg(lo, vconn, cl, op, op_len, &m, body, len);
    }
    beam_msg_destroy(&m);
    return taken;
}

int beam_local_up(beam_node_t *node, uint32_t vconn, const char *body, size_t len)
{
    beam_local_t *lo = table(node);
    if (!lo || !beam_link_up(node))
        return 0;
    int taken = 0;
    if (body)
        taken = up_frame(lo, vconn, body, len);
    else
        beam_local_client_closed(node, vconn); /* its end */
    if (!taken)
        beam_local_flush(node); /* what is held goes up before what follows */
    return taken;
}

/* init {actor, ...} to a local client: it is that actor's worker. */
static void saw_init(beam_local_t *lo, uint32_t vconn, const beam_msg_t *m)
{
    const char *actor;
    if (beam_field_id(&m->params, "actor", BEAM_ACTOR_ID_SIZE, &actor) != 0)
        return;
    lclient_t *cl = find_client(lo, vconn, 0);
    if (cl && cl->is_worker) {
        lworker_t *old = find_worker(lo, cl->actor);
        if (old && old->vconn == vconn)
            worker_forget(lo, old); /* a worker handed a new actor */
    }
    if (!cl)
        cl = find_client(lo, vconn, 1);
    lworker_t *w = find_worker(lo, actor);
    if (w)
        worker_forget(lo, w);
    w = calloc(1, sizeof *w);
    if (!cl || !w) {
        free(w);
        return;
    }
    cl->is_worker = 1;
    memcpy(cl->actor, actor, BEAM_ACTOR_ID_SIZE);
    memcpy(w->actor, actor, BEAM_ACTOR_ID_SIZE);
    w->vconn = vconn;
    HASH_ADD(hh, lo->workers, actor, BEAM_ACTOR_ID_SIZE, w);
}

/* call {obj, ...} passed down to a worker: one submit fewer on its way. */
static void saw_call(beam_local_t *lo, lclient_t *cl, const beam_msg_t *m)
{
    const char *obj;
    char key[PAIR_KEY];
    if (beam_field_id(&m->params, "obj", BEAM_OBJECT_ID_SIZE, &obj) != 0)
        return;
    pair_key(key, obj, cl->actor);
    lpair_t *p = find_pair(lo, key);
    if (p && --p->pending == 0) {
        HASH_DEL(lo->pairs, p);
        lo->npairs--;
        free(p);
    }
}

/* The reply to cl's hello (a reply [1, msgid, error, result] as the head's
 * encoder writes it, body): its node index and connection number make the
 * creator part of its ids. */
static void saw_reply(beam_local_t *lo, lclient_t *cl, const char *body, size_t len)
{
    beam_msg_t m;
    char err[160];
    int64_t node_index, conn;
    if (beam_msg_parse(body, len, &lo->node->limits, &m, err, sizeof err) < 0)
        return;
    if (m.type == BEAM_MSG_REPLY && m.msgid == cl->hello_msgid) {
        cl->hello_msgid = 0;
        if (m.error.type == MSGPACK_OBJECT_NIL && beam_field_int(&m.params, "node_index", &node_index) == 0 &&
            beam_field_int(&m.params, "conn", &conn) == 0 && node_index >= 0 && node_index <= UINT32_MAX &&
            conn >= 0 && conn <= UINT32_MAX) {
            cl->node_index = (uint32_t)node_index;
            cl->conn = (uint32_t)conn;
            beam_put_u32be(cl->creator, cl->node_index);
            beam_put_u32be(cl->creator + 4, cl->conn);
            cl->has_creator = 1;
        }
    }
    beam_msg_destroy(&m);
}

void beam_local_down(beam_node_t *node, uint32_t vconn, const char *body, size_t len)
{
    const char *op;
    uint32_t op_len;
    beam_local_t *lo = table(node);
    lclient_t *cl = lo ? find_client(lo, vconn, 0) : NULL;
    if (cl && cl->hello_msgid && len > 2 && (unsigned char)body[0] == 0x94 && body[1] == 0x01) {
        saw_reply(lo, cl, body, len);
        return;
    }
    if (!lo || peek_op(body, len, 1, &op, &op_len) < 0)
        return;
    int init = beam_str_eq(op, op_len, "init");
    beam_msg_t m;
    char err[160];
    if ((!init && !(beam_str_eq(op, op_len, "call") && cl && cl->is_worker && lo->pairs)) ||
        beam_msg_parse(body, len, &node->limits, &m, err, sizeof err) < 0)
        return;
    if (init)
        saw_init(lo, vconn, &m);
    else
        saw_call(lo, cl, &m);
    beam_msg_destroy(&m);
}

void beam_local_client_closed(beam_node_t *node, uint32_t vconn)
{
    beam_local_t *lo = table(node);
    lclient_t *cl = lo ? find_client(lo, vconn, 0) : NULL;
    if (cl) {
        lworker_t *w = cl->is_worker ? find_worker(lo, cl->actor) : NULL;
        if (w && w->vconn == vconn)
            worker_forget(lo, w);
        lpair_t *p, *pt; /* its counted submits: calls of a caller that is gone order nothing */
        HASH_ITER(hh, lo->pairs, p, pt)
            if (cl->has_creator && memcmp(p->key, cl->creator, CREATOR_BYTES) == 0) {
                HASH_DEL(lo->pairs, p);
                lo->npairs--;
                free(p);
            }
        HASH_DEL(lo->clients, cl);
        free(cl);
    }
    if (lo)
        beam_kept_client_gone(lo->kept, vconn);
}

void beam_local_worker_gone(beam_node_t *node, const char *actor)
{
    beam_local_t *lo = table(node);
    lworker_t *w = lo ? find_worker(lo, actor) : NULL;
    if (w)
        cut_worker(lo, w);
}

#define FREE_ALL(head, type)                                                                                           \
    do {                                                                                                               \
        type *e_, *t_;                                                                                                 \
        HASH_ITER(hh, head, e_, t_) {                                                                                  \
            HASH_DEL(head, e_);                                                                                        \
            free(e_);                                                                                                  \
        }                                                                                                              \
    } while (0)

void beam_local_reset(beam_node_t *node)
{
    beam_local_t *lo = node->local;
    if (!lo)
        return;
    beam_kept_clear(lo->kept);
    if (lo->nheld)
        beam_enc_destroy(&lo->held);
    lo->nheld = 0;
    uv_timer_stop(&lo->hold_timer);
    uv_prepare_stop(&lo->hold_age);
    if (lo->node->stopping && !uv_is_closing((uv_handle_t *)&lo->hold_timer)) {
        uv_close((uv_handle_t *)&lo->hold_timer, NULL); /* (lo is freed after the loop) */
        uv_close((uv_handle_t *)&lo->hold_age, NULL);
    }
    FREE_ALL(lo->workers, lworker_t);
    FREE_ALL(lo->clients, lclient_t);
    FREE_ALL(lo->pairs, lpair_t);
    lo->npairs = 0;
    lo->unordered = 0;
}

int beam_local_init(beam_node_t *node)
{
    beam_local_t *lo = calloc(1, sizeof *lo);
    if (lo && !(lo->kept = beam_kept_new(node, beam_local_flush))) {
        free(lo);
        lo = NULL;
    }
    if (!lo)
        return -ENOMEM;
    lo->node = node;
    uv_timer_init(node->loop, &lo->hold_timer);
    lo->hold_timer.data = lo;
    uv_prepare_init(node->loop, &lo->hold_age);
    lo->hold_age.data = lo;
    node->local = lo;
    return 0;
}

void beam_local_destroy(beam_node_t *node)
{
    beam_local_reset(node);
    if (node->local)
        beam_kept_free(node->local->kept);
    free(node->local);
    node->local = NULL;
}
