/* session.c — clients as the daemon sees them: the three kinds' operations,
 * opening and finding them, and the fan-out of their end into the tables. */
#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "actors.h"
#include "boards.h"
#include "clientmsg.h"
#include "cluster.h"
#include "link.h"
#include "log.h"
#include "objects.h"
#include "placement.h"

/* --- the end of a client --- */

static void release_all(beam_session_t *s)
{
    beam_node_t *node = s->port.node;
    beam_held_t *h, *tmp;
    HASH_ITER(hh, s->port.held_objects, h, tmp) {
        HASH_DEL(s->port.held_objects, h);
        beam_object_t *o = beam_object_find(node, h->id);
        free(h);
        if (o)
            beam_object_unhold(node, o);
    }
    HASH_ITER(hh, s->port.held_actors, h, tmp) {
        HASH_DEL(s->port.held_actors, h);
        beam_actor_t *a = beam_actor_find(node, h->id);
        free(h);
        if (a)
            beam_actor_unhold(node, a);
    }
}

/* Runs from the loop only (a conn's teardown, the reaper, the daemon's
 * exit): the tables let go of s, the other side is told, s is freed. */
static void session_end(beam_session_t *s, const char *why)
{
    beam_port_t *p = &s->port;
    beam_node_t *node = p->node;
    beam_log(p->role == BEAM_ROLE_CTL ? BEAM_LOG_DEBUG : BEAM_LOG_INFO, "client %u (pid %ld) closed: %s", p->id,
             p->pid, why);
    beam_waiters_cancel(node, p);
    /* what it made and was still to come fails first (its own actors' deaths
     * come after): a driver's or an actor's, not a task's worker's, whose
     * creations outlive it as Ray's pooled workers' do (beam_actors_conn_gone) */
    if (p->role == BEAM_ROLE_DRIVER || (p->role == BEAM_ROLE_WORKER && p->actor && !beam_actor_is_task(p->actor)))
        beam_objects_owner_gone(node, beam_cluster_client_node(node, p), p->id);
    /* groups first: a worker's pass to its driver, found through its actor */
    beam_pgs_conn_gone(node, p, p->role == BEAM_ROLE_WORKER ? beam_actors_job_driver(p) : NULL);
    if (p->actor) /* local: a worker gone takes no more results */
        beam_actor_close_local(node, p->actor);
    beam_actors_conn_gone(node, p);
    release_all(s);
    DL_DELETE(node->sessions, s);
    if (p->member)
        p->member->clients--;
    s->kind->ended(s);
    /* after ended: a member's worker's last counts go up first (localbatch.h) */
    beam_boards_drop(node, p); /* its direct calls' last counts kept in the totals */
    free(s);
}

/* --- local and relayed: a stream of this node --- */

static int stream_send(beam_port_t *p, char *buf, size_t len)
{
    return beam_conn_send(beam_session_of(p)->conn, buf, len);
}

static int stream_send_enc(beam_port_t *p, beam_enc_t *enc)
{
    return beam_conn_send_enc(beam_session_of(p)->conn, enc);
}

static void stream_send_log(beam_port_t *p, int stream, const char *text, size_t len)
{
    beam_conn_send_log(beam_session_of(p)->conn, stream, text, len);
}

static void stream_close(beam_port_t *p, const char *why)
{
    beam_session_t *s = beam_session_of(p);
    if (s->conn->closing)
        return;
    snprintf(s->why, sizeof s->why, "%s", why);
    beam_conn_close_soon(s->conn, s->why);
}

static int stream_closing(const beam_port_t *p)
{
    return ((const beam_session_t *)p)->conn->closing;
}

static void local_ended(beam_session_t *s)
{
    (void)s;
}

static void relayed_ended(beam_session_t *s)
{
    if (s->port.node->hooks.relay_up) /* local: the member forgets it first */
        s->port.node->hooks.relay_up(s->port.node, s->port.id, NULL, 0);
    if (!s->remote_closed)
        beam_clientmsg_closed(s->port.node, s->port.id);
}

static const beam_session_kind_t local_kind = {
    .port = {stream_send, stream_send_log, stream_close, stream_closing, stream_send_enc},
    .kind = BEAM_SESSION_LOCAL,
    .ended = local_ended,
};

static const beam_session_kind_t relayed_kind = {
    .port = {stream_send, stream_send_log, stream_close, stream_closing, stream_send_enc},
    .kind = BEAM_SESSION_RELAYED,
    .ended = relayed_ended,
};

static void on_local_frame(void *owner, const char *frame, size_t len, beam_buf_t *buf)
{
    beam_session_t *s = owner;
    if (s->port.node->hooks.dispatch)
        s->port.node->hooks.dispatch(&s->port, frame, len, buf);
}

static void on_relayed_frame(void *owner, const char *frame, size_t len, beam_buf_t *buf)
{
    (void)buf;
    beam_session_t *s = owner;
    if (s->port.node->hooks.relay_up && s->port.node->hooks.relay_up(s->port.node, s->port.id, frame, len))
        return; /* local: a call that stays on this node */
    beam_clientmsg_forward(s->port.node, s->port.id, frame, len);
}

static void on_stream_close(void *owner, const char *why)
{
    session_end(owner, why);
}

static beam_session_t *session_new(beam_node_t *node, const beam_session_kind_t *kind, beam_member_t *m)
{
    beam_session_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->kind = kind;
    s->port.ops = &kind->port;
    s->port.node = node;
    s->port.member = m;
    if (m)
        m->clients++;
    DL_APPEND(node->sessions, s);
    return s;
}

int beam_session_open_local(beam_node_t *node, beam_conn_t *conn)
{
    int relayed = node->is_member;
    if (relayed && !beam_link_up(node))
        return -EAGAIN;
    beam_session_t *s = session_new(node, relayed ? &relayed_kind : &local_kind, node->self);
    if (!s)
        return -ENOMEM;
    s->conn = conn;
    s->port.id = conn->id;
    s->port.pid = conn->pid;
    s->port.uid = conn->uid;
    conn->owner = s;
    conn->on_frame = relayed ? on_relayed_frame : on_local_frame;
    conn->on_close = on_stream_close;
    if (relayed)
        beam_clientmsg_open(node, s->port.id, s->port.pid, (unsigned)s->port.uid);
    return 0;
}

beam_session_t *beam_session_find_local(beam_node_t *node, uint32_t id)
{
    for (beam_session_t *s = node->sessions; s; s = s->next)
        if (s->conn && s->port.id == id)
            return s;
    return NULL;
}

/* --- remote: the head's record of a member's client --- */

static int remote_send(beam_port_t *p, char *buf, size_t len)
{
    beam_session_t *s = beam_session_of(p);
    return beam_clientmsg_frame(s->link, s->vconn, buf, len);
}

static void remote_send_log(beam_port_t *p, int stream, const char *text, size_t len)
{
    /* the link has its own queue and caps (link.c) */
    beam_enc_t enc;
    beam_conn_enc_log(&enc, stream, text, len);
    beam_port_send_enc(p, &enc);
}

static void on_reap(uv_timer_t *t)
{
    beam_sessions_reap(t->data);
}

void beam_sessions_init(uv_loop_t *loop, beam_node_t *node)
{
    uv_timer_init(loop, &node->reaper);
    node->reaper.data = node;
}

static void remote_close(beam_port_t *p, const char *why)
{
    beam_session_t *s = beam_session_of(p);
    if (s->closing)
        return;
    s->closing = 1;
    snprintf(s->why, sizeof s->why, "%s", why);
    beam_node_t *node = p->node;
    s->closing_next = node->closing_sessions;
    node->closing_sessions = s;
    if (!uv_is_active((uv_handle_t *)&node->reaper))
        uv_timer_start(&node->reaper, on_reap, 0, 0);
}

static int remote_closing(const beam_port_t *p)
{
    return ((const beam_session_t *)p)->closing;
}

static void remote_ended(beam_session_t *s)
{
    if (!s->remote_closed && s->link)
        beam_clientmsg_close(s->link, s->vconn);
}

static const beam_session_kind_t remote_kind = {
    .port = {remote_send, remote_send_log, remote_close, remote_closing, NULL},
    .kind = BEAM_SESSION_REMOTE,
    .ended = remote_ended,
};

beam_session_t *beam_session_open_remote(beam_node_t *node, struct beam_link_s *link, beam_member_t *m,
                                         uint32_t vconn, long pid, unsigned uid)
{
    if (beam_session_find_remote(node, link, vconn))
        return NULL;
    beam_session_t *s = session_new(node, &remote_kind, m);
    if (!s)
        return NULL;
    s->port.id = ++node->next_conn;
    s->port.pid = pid;
    s->port.uid = uid;
    s->link = link;
    s->vconn = vconn;
    return s;
}

beam_session_t *beam_session_find_remote(beam_node_t *node, struct beam_link_s *link, uint32_t vconn)
{
    for (beam_session_t *s = node->sessions; s; s = s->next)
        if (s->kind == &remote_kind && s->link == link && s->vconn == vconn)
            return s;
    return NULL;
}

void beam_sessions_reap(beam_node_t *node)
{
    while (node->closing_sessions) {
        beam_session_t *s = node->closing_sessions;
        node->closing_sessions = s->closing_next;
        session_end(s, s->why);
    }
}

/* --- every kind --- */

void beam_session_close(beam_session_t *s, const char *why)
{
    beam_port_close(&s->port, why);
}

void beam_sessions_member_lost(beam_node_t *node, beam_member_t *m)
{
    for (beam_session_t *s = node->sessions; s; s = s->next)
        if (s->port.member == m && !beam_port_closing(&s->port)) {
            s->remote_closed = 1;
            beam_session_close(s, "its node died");
        }
}

void beam_sessions_close_all(beam_node_t *node, const char *why)
{
    beam_sessions_reap(node);
    while (node->sessions) {
        beam_session_t *s = node->sessions;
        if (s->conn)
            beam_conn_close(s->conn, why); /* ends s through on_close */
        else
            session_end(s, why);
    }
}
