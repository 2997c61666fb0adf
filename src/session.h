/* session.h — one client as the daemon sees it: its port (who it is, what
 * it holds, its waiters), its kind as an operations table, and the fan-out
 * of its end into the tables (waiters cancelled, groups and actors it owns,
 * the objects and handles it held released). Kinds:
 *   local   a unix-socket client of this node (a conn); frames go to the op
 *           table (node->hooks.dispatch);
 *   relayed a member's unix-socket client: frames go to the head over the
 *           link, replies come back from it;
 *   remote  the head's record of a member's client (reached over that
 *           member's link as vconn there); link.c hands it frames.
 * Every close is deferred to the loop's next turn (beam_session_close). */
#ifndef BEAM_SESSION_H
#define BEAM_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "node.h"
#include "port.h"

enum { BEAM_SESSION_LOCAL = 0, BEAM_SESSION_RELAYED, BEAM_SESSION_REMOTE };

struct beam_session_s;

typedef struct beam_session_kind_s {
    beam_port_ops_t port; /* send, send_log, close, closing */
    int kind;
    /* after the tables let go: tell the other side (unless remote_closed) */
    void (*ended)(struct beam_session_s *s);
} beam_session_kind_t;

typedef struct beam_session_s {
    beam_port_t port; /* first: a port is its session */
    const beam_session_kind_t *kind;
    beam_conn_t *conn;        /* local, relayed: the stream (NULL once it ended) */
    struct beam_link_s *link; /* remote: the member's link */
    uint32_t vconn;           /* remote: its connection number on that member */
    int remote_closed;        /* the other side already knows it is closed */
    int closing;              /* remote: its end is queued for the next turn */
    char why[256]; /* why it closes (beam_session_close copies it here) */
    struct beam_session_s *prev, *next; /* node->sessions */
    struct beam_session_s *closing_next; /* node->closing_sessions */
} beam_session_t;

/* node->hooks.conn_open: a local (or, on a member, relayed) client on a new
 * stream. 0, -EAGAIN when it cannot be served yet (a member not joined to
 * its head), or -ENOMEM. */
int beam_session_open_local(beam_node_t *node, beam_conn_t *conn);
/* Head: a client that said hello on member m's node, as vconn there. NULL
 * if that vconn is open already or memory ran out. */
beam_session_t *beam_session_open_remote(beam_node_t *node, struct beam_link_s *link, struct beam_member_s *m,
                                         uint32_t vconn, long pid, unsigned uid);
beam_session_t *beam_session_find_remote(beam_node_t *node, struct beam_link_s *link, uint32_t vconn);
/* Member: a local client by its number. */
beam_session_t *beam_session_find_local(beam_node_t *node, uint32_t id);
static inline beam_session_t *beam_session_of(beam_port_t *p)
{
    return (beam_session_t *)p;
}
/* Closes s on the loop's next turn: it is closing from now on (no more
 * sends, no more frames), and its end runs later, never under the caller.
 * why is copied. */
void beam_session_close(beam_session_t *s, const char *why);
/* Member m died: every client on it closes without a word back. */
void beam_sessions_member_lost(beam_node_t *node, struct beam_member_s *m);
/* Ends every client now (daemon exit). */
void beam_sessions_close_all(beam_node_t *node, const char *why);
/* Ends the remote clients whose close is queued (the reaper's turn). */
void beam_sessions_reap(beam_node_t *node);
/* Readies node's reaper (node->reaper, on loop): once, before any session
 * closes. */
void beam_sessions_init(uv_loop_t *loop, beam_node_t *node);

#endif
