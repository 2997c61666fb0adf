/* shortcut.c — a member's shortcut for the calls between its own clients and
 * the actors whose workers run on it (shortcut.h; docs/DESIGN.md, "Calls that
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
#include "shortcut.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <utlist.h>

#include "localbatch.h"
#include "boards.h"
#include "fieldspec.h"
#include "localresults.h"
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

typedef struct beam_shortcut_s {
    beam_node_t *node;
    lworker_t *workers;
    lclient_t *clients;
    lpair_t *pairs;
    size_t npairs;
    int unordered; /* the pairs' cap was hit: no more local calls */
    beam_localresults_t *kept; /* the local calls' results (localresults.c) */
    beam_localbatch_t batch; /* the records held for the head (beam_shortcut_flush) */
} beam_shortcut_t;

/* The table; NULL on a head. (A send never ends the link under its caller,
 * link.h, so no hook runs into a reset of this table.) */
static beam_shortcut_t *table(const beam_node_t *node)
{
    return node->is_member ? node->local : NULL;
}

/* ---------- the tables ---------- */

static void pair_key(char *key, const char *obj, const char *actor)
{
    memcpy(key, obj, CREATOR_BYTES);
    memcpy(key + CREATOR_BYTES, actor, BEAM_ACTOR_ID_SIZE);
}

/* find_worker, find_pair: a record by its key, or NULL. */
#define FINDER(name, type, table, size)                                                                               \
    static type *name(beam_shortcut_t *lo, const char *key)                                                              \
    {                                                                                                                  \
        type *e = NULL;                                                                                                \
        HASH_FIND(hh, lo->table, key, size, e);                                                                        \
        return e;                                                                                                      \
    }
FINDER(find_worker, lworker_t, workers, BEAM_ACTOR_ID_SIZE)
FINDER(find_pair, lpair_t, pairs, PAIR_KEY)

/* The record of local client vconn; create: made if missing (NULL when
 * out of memory). */
static lclient_t *find_client(beam_shortcut_t *lo, uint32_t vconn, int create)
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
static void cut_worker(beam_shortcut_t *lo, lworker_t *w)
{
    if (w->cut)
        return;
    w->cut = 1;
    w->ready = 0;
    beam_localresults_cut(lo->kept, w->actor);
}

static void worker_forget(beam_shortcut_t *lo, lworker_t *w)
{
    cut_worker(lo, w);
    HASH_DEL(lo->workers, w);
    free(w);
}

/* ---------- a local call ---------- */

void beam_shortcut_flush(beam_node_t *node)
{
    beam_shortcut_t *lo = table(node);
    if (lo && lo->batch.n)
        beam_localbatch_flush(&lo->batch);
}

/* Holds the submit to go up (the client's own request, its args left out:
 * the head records the call as sent and never needs them), then writes the
 * call to the worker: 0, or -1 (nothing done: out of memory). */
static int run_local(beam_shortcut_t *lo, uint32_t vconn, beam_session_t *wc, uint64_t msgid, const beam_submit_req_t *s)
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
    beam_localresults_pack_ids(&enc.pk, "objects", s->refs.objs, s->refs.nobjs, BEAM_OBJECT_ID_SIZE);
    beam_localresults_pack_ids(&enc.pk, "actors", s->refs.actors, s->refs.nactors, BEAM_ACTOR_ID_SIZE);
    size_t len = 0;
    char *frame = beam_localresults_frame(&enc, &len);
    if (!frame)
        return -1;
    beam_pack_bin(beam_localbatch_start(&lo->batch, BEAM_LOCAL_REC_SUBMIT, vconn), frame + BEAM_FRAME_HEADER,
                  len - BEAM_FRAME_HEADER);
    free(frame);
    beam_localbatch_done(&lo->batch);
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
static int submit_way(beam_shortcut_t *lo, uint32_t vconn, uint64_t msgid, const beam_submit_req_t *sp)
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
    if (wc && beam_localresults_add(lo->kept, s.obj, s.actor, vconn, s.push) == 0) {
        if (run_local(lo, vconn, wc, msgid, &s) == 0)
            return 1;
        beam_localresults_drop(lo->kept, s.obj);
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

/* ---------- the op tables: what the member reads of the frames it passes ---------- */

/* Each op the member looks at has a row: when it is looked at (every other
 * frame passes unparsed), its field table (fieldspec.h; a submit's is the
 * head's own), and its handler. A frame whose fields the table refuses is
 * not taken here: it goes on as it is, and the head, which checks the same
 * fields or more, answers it. So nothing a client sends is lost here. */

/* One message read, on its way up (or down): who it is for, and it. */
typedef struct local_msg_s {
    beam_shortcut_t *lo;
    uint32_t vconn;
    lclient_t *cl;     /* the client's record, or NULL */
    const beam_msg_t *m;
    const char *body;  /* the frame body m was parsed from */
    size_t len;
} local_msg_t;

/* When an op is read at all. */
enum { LOCAL_ALWAYS, LOCAL_FROM_WORKER, LOCAL_IDS_KNOWN, LOCAL_ANY_KEPT, LOCAL_TO_WORKER };

typedef struct local_op_s {
    const char *name;
    int when;
    const beam_field_spec_t *fields;
    size_t nfields;
    int (*fn)(local_msg_t *x, const beam_field_val_t *v); /* up: 1 when taken here */
} local_op_t;

#define LOCAL_OP(name, when, fields, fn) {(name), (when), (fields), sizeof(fields) / sizeof((fields)[0]), (fn)}
#define LOCAL_OP_NOFIELDS(name, when, fn) {(name), (when), NULL, 0, (fn)}

/* A submit from a local client, checked by the head's own table: 1 when it
 * went the local way. */
static int up_submit(local_msg_t *x, const beam_field_val_t *v)
{
    char err[160];
    beam_submit_req_t s = {
        .actor = v[BEAM_SUBMIT_ACTOR].s, .obj = v[BEAM_SUBMIT_OBJ].s,
        .method = v[BEAM_SUBMIT_METHOD].s, .method_len = v[BEAM_SUBMIT_METHOD].len,
        .args = v[BEAM_SUBMIT_ARGS].s, .args_len = v[BEAM_SUBMIT_ARGS].len, .push = (int)v[BEAM_SUBMIT_PUSH].i,
    };
    if (beam_refs_parse(&x->m->params, &s.refs, err, sizeof err) < 0)
        return 0; /* the head refuses it as it always has; no call will come of it */
    int taken = submit_way(x->lo, x->vconn, x->m->msgid, &s);
    beam_refs_free(&s.refs);
    return taken;
}

static int up_hello(local_msg_t *x, const beam_field_val_t *v)
{
    (void)v;
    lclient_t *cl = x->cl;
    if (x->m->msgid && (cl = find_client(x->lo, x->vconn, 1)) && !cl->has_creator)
        cl->hello_msgid = x->m->msgid; /* its reply says which ids are its own */
    return 0;
}

static const beam_field_spec_t obj_fields[] = {BEAM_FIELD_OBJECT_ID("obj", BEAM_F_REQUIRED)};

/* put, pg_ready: a new object id the client named. */
static int up_new_obj(local_msg_t *x, const beam_field_val_t *v)
{
    note_obj(x->cl, v[0].s);
    return 0;
}

enum { GET_OBJS, GET_TIMEOUT };
static const beam_field_spec_t get_fields[] = {
    [GET_OBJS] = BEAM_FIELD("objs", BEAM_F_IDS, BEAM_F_REQUIRED, .size = BEAM_OBJECT_ID_SIZE),
    [GET_TIMEOUT] = BEAM_FIELD("timeout_ms", BEAM_F_INT, 0, .def = -1, .min = -1, .max = INT64_MAX,
                               .bound = "must be -1 (forever) or more"),
};

static int up_get(local_msg_t *x, const beam_field_val_t *v)
{
    return beam_localresults_get(x->lo->kept, x->vconn, x->m->msgid, v[GET_OBJS].a, v[GET_TIMEOUT].i);
}

enum { TD_OBJ, TD_STATUS, TD_DATA };
static const beam_field_spec_t task_done_fields[] = {
    [TD_OBJ] = BEAM_FIELD_OBJECT_ID("obj", BEAM_F_REQUIRED),
    [TD_STATUS] = BEAM_FIELD("status", BEAM_F_INT, BEAM_F_REQUIRED, .min = BEAM_OBJ_OK, .max = BEAM_OBJ_TASK_ERROR,
                             .bound = "must be 0 (ok) or 1 (task error)"),
    [TD_DATA] = BEAM_FIELD("data", BEAM_F_BIN, BEAM_F_REQUIRED),
};

/* A local call's result: kept for the local caller, and held to go up with
 * what follows (the head learns of it before anything else). */
static int up_task_done(local_msg_t *x, const beam_field_val_t *v)
{
    beam_shortcut_t *lo = x->lo;
    lworker_t *w = find_worker(lo, x->cl->actor);
    if (!w || w->cut ||
        !beam_localresults_done(lo->kept, x->cl->actor, v[TD_OBJ].s, (int)v[TD_STATUS].i, v[TD_DATA].s, v[TD_DATA].len))
        return 0;
    return beam_localbatch_hold_frame(&lo->batch, x->vconn, x->body, x->len) == 0;
}

static const beam_field_spec_t release_fields[] = {
    BEAM_FIELD("objects", BEAM_F_IDS, BEAM_F_REQUIRED, .size = BEAM_OBJECT_ID_SIZE)};

static int up_release(local_msg_t *x, const beam_field_val_t *v)
{
    beam_localresults_release(x->lo->kept, x->vconn, v[0].a);
    return 0;
}

static const beam_field_spec_t actor_ready_fields[] = {BEAM_FIELD("ok", BEAM_F_BOOL, BEAM_F_REQUIRED)};

static int up_actor_ready(local_msg_t *x, const beam_field_val_t *v)
{
    lworker_t *w = find_worker(x->lo, x->cl->actor);
    if (w && !w->cut && w->vconn == x->vconn && v[0].i)
        w->ready = 1;
    return 0;
}

static const beam_field_spec_t actor_fields[] = {BEAM_FIELD_ACTOR_ID("actor", BEAM_F_REQUIRED)};

/* kill: the head fails the actor's open local calls on this very message. */
static int up_kill(local_msg_t *x, const beam_field_val_t *v)
{
    lworker_t *w = find_worker(x->lo, v[0].s);
    if (w)
        cut_worker(x->lo, w);
    return 0;
}

/* A local worker's call board: adopted here (its fd opens here), read for the head (localbatch.h). */
static int up_board(local_msg_t *x, const beam_field_val_t *v)
{
    beam_session_t *s = beam_session_find_local(x->lo->node, x->vconn);
    if (!s)
        return 0;
    int rc = beam_boards_adopt(x->lo->node, &s->port, x->cl->actor, s->port.pid, v[BEAM_BOARD_F_FD].i,
                               v[BEAM_BOARD_F_SIZE].i);
    beam_boards_reply(&s->port, x->m->msgid, rc);
    if (rc == 0)
        beam_localbatch_boards_start(&x->lo->batch);
    return 1;
}

static const local_op_t up_ops[] = {
    LOCAL_OP("submit", LOCAL_ALWAYS, beam_submit_fields, up_submit),
    LOCAL_OP_NOFIELDS("hello", LOCAL_ALWAYS, up_hello),
    LOCAL_OP("put", LOCAL_IDS_KNOWN, obj_fields, up_new_obj),
    LOCAL_OP("pg_ready", LOCAL_IDS_KNOWN, obj_fields, up_new_obj),
    LOCAL_OP("get", LOCAL_ANY_KEPT, get_fields, up_get),
    LOCAL_OP("release", LOCAL_ANY_KEPT, release_fields, up_release),
    LOCAL_OP("task_done", LOCAL_FROM_WORKER, task_done_fields, up_task_done),
    LOCAL_OP("actor_ready", LOCAL_FROM_WORKER, actor_ready_fields, up_actor_ready),
    LOCAL_OP("kill", LOCAL_ALWAYS, actor_fields, up_kill),
    LOCAL_OP("board", LOCAL_FROM_WORKER, beam_board_fields, up_board),
};

/* The row of op in ops[0..n), or NULL. */
static const local_op_t *find_row(const local_op_t *ops, size_t n, const char *op, uint32_t op_len)
{
    for (size_t i = 0; i < n; i++)
        if (beam_str_eq(op, op_len, ops[i].name))
            return &ops[i];
    return NULL;
}

/* The row of op in ops[0..n) when it is read for this client now, or NULL. */
static const local_op_t *find_op(const local_op_t *ops, size_t n, const local_msg_t *x, const char *op, uint32_t op_len)
{
    const local_op_t *row = find_row(ops, n, op, op_len);
    switch (row ? row->when : LOCAL_ALWAYS) {
    case LOCAL_FROM_WORKER: return x->cl && x->cl->is_worker ? row : NULL;
    case LOCAL_IDS_KNOWN: return ids_known(x->cl) ? row : NULL;
    case LOCAL_ANY_KEPT: return beam_localresults_any(x->lo->kept) ? row : NULL;
    case LOCAL_TO_WORKER: return x->cl && x->cl->is_worker && x->lo->pairs ? row : NULL;
    default: return row;
    }
}

/* Checks m's fields against op's table and runs its handler: its result,
 * or 0 when a field is refused (the frame goes on as it is). */
static int run_op(const local_op_t *op, local_msg_t *x)
{
    beam_field_val_t v[BEAM_SUBMIT_NFIELDS > 4 ? BEAM_SUBMIT_NFIELDS : 4];
    const char *field, *what;
    char err[80];
    assert(op->nfields <= sizeof v / sizeof v[0]);
    if (op->nfields && beam_fields_check(&x->m->params, op->fields, op->nfields, v, &field, &what, err, sizeof err) < 0)
        return 0;
    return op->fn(x, v);
}

/* A frame up: 1 when taken here. Its op is peeked first, and only a frame
 * this table reads is parsed (every submit is, however it is encoded: its
 * order counts). */
static int up_frame(beam_shortcut_t *lo, uint32_t vconn, const char *body, size_t len)
{
    local_msg_t x = {.lo = lo, .vconn = vconn, .cl = find_client(lo, vconn, 0), .body = body, .len = len};
    const size_t nops = sizeof up_ops / sizeof up_ops[0];
    beam_peek_t pk;
    beam_msg_t m;
    char err[160];
    int peeked = beam_msg_peek(body, len, &pk) == 0;
    if (peeked && (pk.type != BEAM_MSG_REQUEST || !find_op(up_ops, nops, &x, pk.op, pk.op_len)))
        return 0;
    if (beam_msg_parse(body, len, &lo->node->limits, &m, err, sizeof err) < 0) {
        if (x.cl)
            x.cl->blind = 1; /* an id it named went by unseen: none of its calls is taken here now */
        return 0;
    }
    x.m = &m;
    const local_op_t *op = m.type == BEAM_MSG_REQUEST ? find_op(up_ops, nops, &x, m.op, m.op_len) : NULL;
    int taken = op ? run_op(op, &x) : 0;
    beam_msg_destroy(&m);
    return taken;
}

int beam_shortcut_up(beam_node_t *node, uint32_t vconn, const char *body, size_t len)
{
    beam_shortcut_t *lo = table(node);
    if (!lo || !beam_link_up(node))
        return 0;
    int taken = 0;
    if (body)
        taken = up_frame(lo, vconn, body, len);
    else
        beam_shortcut_client_closed(node, vconn); /* its end */
    if (!taken)
        beam_shortcut_flush(node); /* what is held goes up before what follows */
    return taken;
}

/* init {actor, ...} to a local client: it is that actor's worker. */
static int down_init(local_msg_t *x, const beam_field_val_t *v)
{
    beam_shortcut_t *lo = x->lo;
    const char *actor = v[0].s;
    lclient_t *cl = x->cl;
    if (cl && cl->is_worker) {
        lworker_t *old = find_worker(lo, cl->actor);
        if (old && old->vconn == x->vconn)
            worker_forget(lo, old); /* a worker handed a new actor */
    }
    if (!cl)
        cl = find_client(lo, x->vconn, 1);
    lworker_t *w = find_worker(lo, actor);
    if (w)
        worker_forget(lo, w);
    w = calloc(1, sizeof *w);
    if (!cl || !w) {
        free(w);
        return 0;
    }
    cl->is_worker = 1;
    memcpy(cl->actor, actor, BEAM_ACTOR_ID_SIZE);
    memcpy(w->actor, actor, BEAM_ACTOR_ID_SIZE);
    w->vconn = x->vconn;
    HASH_ADD(hh, lo->workers, actor, BEAM_ACTOR_ID_SIZE, w);
    return 0;
}

/* call {obj, ...} passed down to a worker: one submit fewer on its way. */
static int down_call(local_msg_t *x, const beam_field_val_t *v)
{
    char key[PAIR_KEY];
    pair_key(key, v[0].s, x->cl->actor);
    lpair_t *p = find_pair(x->lo, key);
    if (p && --p->pending == 0) {
        HASH_DEL(x->lo->pairs, p);
        x->lo->npairs--;
        free(p);
    }
    return 0;
}

/* The pushes from the head the member reads on their way down. */
static const local_op_t down_ops[] = {
    LOCAL_OP("init", LOCAL_ALWAYS, actor_fields, down_init),
    LOCAL_OP("call", LOCAL_TO_WORKER, obj_fields, down_call),
};

#define NDOWN (sizeof down_ops / sizeof down_ops[0])

enum { HR_NODE_INDEX, HR_CONN };
static const beam_field_spec_t hello_reply_fields[] = {
    [HR_NODE_INDEX] = BEAM_FIELD("node_index", BEAM_F_INT, BEAM_F_REQUIRED, .min = 0, .max = UINT32_MAX,
                                 .bound = "must be a uint32"),
    [HR_CONN] = BEAM_FIELD("conn", BEAM_F_INT, BEAM_F_REQUIRED, .min = 0, .max = UINT32_MAX,
                           .bound = "must be a uint32"),
};

/* The reply to cl's hello: its node index and connection number make the
 * creator part of its ids. */
static void saw_hello_reply(beam_shortcut_t *lo, lclient_t *cl, const char *body, size_t len)
{
    beam_msg_t m;
    beam_field_val_t v[2];
    const char *field, *what;
    char err[160];
    if (beam_msg_parse(body, len, &lo->node->limits, &m, err, sizeof err) < 0)
        return;
    if (m.type == BEAM_MSG_REPLY && m.msgid == cl->hello_msgid) {
        cl->hello_msgid = 0;
        if (m.error.type == MSGPACK_OBJECT_NIL &&
            beam_fields_check(&m.params, hello_reply_fields, 2, v, &field, &what, err, sizeof err) == 0) {
            cl->node_index = (uint32_t)v[HR_NODE_INDEX].i;
            cl->conn = (uint32_t)v[HR_CONN].i;
            beam_put_u32be(cl->creator, cl->node_index);
            beam_put_u32be(cl->creator + 4, cl->conn);
            cl->has_creator = 1;
        }
    }
    beam_msg_destroy(&m);
}

void beam_shortcut_down(beam_node_t *node, uint32_t vconn, const char *body, size_t len)
{
    beam_shortcut_t *lo = table(node);
    if (!lo)
        return;
    local_msg_t x = {.lo = lo, .vconn = vconn, .cl = find_client(lo, vconn, 0), .body = body, .len = len};
    beam_peek_t pk;
    if (beam_msg_peek(body, len, &pk) < 0)
        return;
    if (pk.type == BEAM_MSG_REPLY) {
        if (x.cl && x.cl->hello_msgid && pk.msgid == x.cl->hello_msgid)
            saw_hello_reply(lo, x.cl, body, len);
        return;
    }
    const local_op_t *op = pk.type == BEAM_MSG_PUSH ? find_op(down_ops, NDOWN, &x, pk.op, pk.op_len) : NULL;
    beam_msg_t m;
    char err[160];
    if (!op || beam_msg_parse(body, len, &node->limits, &m, err, sizeof err) < 0)
        return;
    x.m = &m;
    if (m.type == BEAM_MSG_PUSH)
        run_op(op, &x);
    beam_msg_destroy(&m);
}

int beam_shortcut_check(const char *body, size_t len, int up, const beam_limits_t *lim, char *err, size_t errlen)
{
    beam_msg_t m;
    beam_field_val_t v[BEAM_SUBMIT_NFIELDS > 4 ? BEAM_SUBMIT_NFIELDS : 4];
    const char *field, *what;
    char buf[80];
    int want = up ? BEAM_MSG_REQUEST : BEAM_MSG_PUSH;
    if (beam_msg_parse(body, len, lim, &m, err, errlen) < 0)
        return -EPROTO;
    const local_op_t *op = m.type != want ? NULL
                         : up             ? find_row(up_ops, sizeof up_ops / sizeof up_ops[0], m.op, m.op_len)
                                          : find_row(down_ops, NDOWN, m.op, m.op_len);
    int rc = op ? 1 : 0;
    if (op && op->nfields &&
        beam_fields_check(&m.params, op->fields, op->nfields, v, &field, &what, buf, sizeof buf) < 0) {
        snprintf(err, errlen, "field '%s' %s", field, what);
        rc = -EINVAL;
    }
    beam_msg_destroy(&m);
    return rc;
}

void beam_shortcut_client_closed(beam_node_t *node, uint32_t vconn)
{
    beam_shortcut_t *lo = table(node);
    lclient_t *cl = lo ? find_client(lo, vconn, 0) : NULL;
    if (cl && cl->is_worker)
        beam_localbatch_boards(&lo->batch); /* its board's last counts go up before its end */
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
        beam_localresults_client_gone(lo->kept, vconn);
}

void beam_shortcut_worker_gone(beam_node_t *node, const char *actor)
{
    beam_shortcut_t *lo = table(node);
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

void beam_shortcut_reset(beam_node_t *node)
{
    beam_shortcut_t *lo = node->local;
    if (!lo)
        return;
    beam_localresults_clear(lo->kept);
    beam_localbatch_reset(&lo->batch); /* (lo is freed after the loop) */
    FREE_ALL(lo->workers, lworker_t);
    FREE_ALL(lo->clients, lclient_t);
    FREE_ALL(lo->pairs, lpair_t);
    lo->npairs = 0;
    lo->unordered = 0;
}

int beam_shortcut_init(beam_node_t *node)
{
    beam_shortcut_t *lo = calloc(1, sizeof *lo);
    if (lo && !(lo->kept = beam_localresults_new(node, beam_shortcut_flush))) {
        free(lo);
        lo = NULL;
    }
    if (!lo)
        return -ENOMEM;
    lo->node = node;
    beam_localbatch_init(&lo->batch, node);
    node->local = lo;
    return 0;
}

void beam_shortcut_destroy(beam_node_t *node)
{
    beam_shortcut_reset(node);
    if (node->local)
        beam_localresults_free(node->local->kept);
    free(node->local);
    node->local = NULL;
}
