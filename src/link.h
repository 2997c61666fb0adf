/* link.h — a TCP link between a member node and the head ("hub"), layer 1:
 * the listener and the connect (with DNS, again after every loss), the
 * handshake caps, and writes through outq.h (conn's queue: coalesced,
 * counted by cost, capped at node->max_outq; no read backpressure). Its
 * authenticated handshake and sealing (handshake.h, over auth.h) and its
 * heartbeats and timeouts (heartbeat.h) are modules of their own, without
 * I/O, that the link drives.
 *
 * A link knows bytes and closes only: it hands each opened message, and
 * its own end, to the callbacks its owner set (beam_link_hooks_t; relay.c
 * is the owner). Every close is deferred to the loop: a failed write, a
 * queue past its cap or a bad frame marks the link closing (nothing more is
 * read or sent) and on_close runs on the loop's next turn, never under the
 * caller of a send. Functions return 0 or a negative errno. */
#ifndef BEAM_LINK_H
#define BEAM_LINK_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "auth.h"
#include "heartbeat.h"
#include "beam/codec.h"
#include "node.h"

struct beam_link_s;
typedef struct beam_link_s beam_link_t;

/* What a link tells its owner. Each is called from the loop, never from
 * inside a send. */
typedef struct beam_link_hooks_s {
    /* the handshake is through: both ways sealed. The owner's own greeting
     * (join, welcome) follows; beam_link_set_up marks the link up. */
    void (*on_up)(beam_node_t *node, beam_link_t *link);
    /* one opened message (a push; heartbeats are the link's own) */
    void (*on_frame)(beam_node_t *node, beam_link_t *link, const beam_msg_t *m);
    /* the link ended (why: borrowed for the call); it is out of the node's
     * links, and its memory goes once its handles have closed. A member's
     * link is reconnected after this returns. */
    void (*on_close)(beam_node_t *node, beam_link_t *link, const char *why);
} beam_link_hooks_t;

typedef struct beam_cluster_opts_s {
    const char *listen_ip;   /* head: where to listen */
    int port;
    const char *head_host;   /* member: the head to join */
    int head_port;
    unsigned char token[BEAM_TOKEN_BYTES];
    uint64_t timeout_ms;     /* a peer silent this long is dead */
    uint64_t heartbeat_ms;
    /* head: node connections not yet through the handshake (they get
     * BEAM_HANDSHAKE_TIMEOUT_MS) held at once, in all and from one address;
     * more are closed at accept. 0: the defaults below. */
    int max_handshakes;
    int max_handshakes_per_ip;
    beam_link_hooks_t hooks; /* the owner's (relay.c sets them) */
} beam_cluster_opts_t;

#define BEAM_MAX_HANDSHAKES 64
#define BEAM_MAX_HANDSHAKES_PER_IP 8
/* The head refuses a node connection when fewer than this many fds (or a
 * quarter of RLIMIT_NOFILE, if less) would be left: they are kept for the
 * unix socket's clients and for starting workers. */
#define BEAM_FD_RESERVE 256

/* Head: listens for member nodes on opts->listen_ip:port (port 0: any free
 * one, see beam_links_port). 0, or a negative errno with err set. */
int beam_links_listen(beam_node_t *node, const beam_cluster_opts_t *opts, char *err, size_t errlen);
/* Head: the TCP port it listens on, or a negative errno (-ENOTCONN: not
 * listening). */
int beam_links_port(beam_node_t *node);
/* Member: connects to the head (node->head_link), and again after every
 * loss. 0 or -ENOMEM (a failed connect is retried, not returned). */
int beam_link_join(beam_node_t *node, const beam_cluster_opts_t *opts);
/* Member: the link to the head once the head has welcomed this node (up,
 * not closing), else NULL. */
beam_link_t *beam_link_up(const beam_node_t *node);

/* The owner marks the link up once its greeting is done (heartbeats start,
 * the handshake's timeout and cap stop counting it), sizes its frames (it
 * then carries any frame either side accepts from its clients) and keeps
 * its own pointer there (a head: the member). */
void beam_link_set_up(beam_link_t *link, int64_t peer_max_frame, void *data);
/* The owner's pointer: NULL until beam_link_set_up. */
void *beam_link_data(const beam_link_t *link);
/* "ip:port" of the peer, for logs. */
const char *beam_link_peer(const beam_link_t *link);
/* Closes the link (deferred: on_close runs on the loop's next turn). why is
 * copied. quiet: the close is logged at debug only (a refusal already was). */
void beam_link_close(beam_link_t *link, const char *why, int quiet);

/* Sends what enc holds (one frame; sealed once the handshake is through)
 * and destroys enc. 0, -EPIPE if the link is closing, -ENOMEM. A queue past
 * node->max_outq closes the link (deferred) and returns -ENOBUFS. */
int beam_link_send_enc(beam_link_t *link, beam_enc_t *enc);

/* Closes every link and the listener now (daemon exit: on_close runs here). */
void beam_links_stop(beam_node_t *node);
void beam_links_destroy(beam_node_t *node);

#endif
