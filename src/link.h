/* link.h — the TCP link between a member node and the head ("hub"): the
 * authenticated handshake (HMAC-SHA256 challenge and response both ways,
 * libsodium), the join, heartbeats, and the messages that carry client
 * frames, worker starts, output and exits. The head routes; a member relays
 * its local clients to the head and runs the workers the head places on it. */
#ifndef BEAM_LINK_H
#define BEAM_LINK_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "beam/codec.h"
#include "node.h"

#define BEAM_TOKEN_BYTES 32

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
} beam_cluster_opts_t;

#define BEAM_MAX_HANDSHAKES 64
#define BEAM_MAX_HANDSHAKES_PER_IP 8
#define BEAM_HANDSHAKE_TIMEOUT_MS 5000
/* The head refuses a node connection when fewer than this many fds (or a
 * quarter of RLIMIT_NOFILE, if less) would be left: they are kept for the
 * unix socket's clients and for starting workers. */
#define BEAM_FD_RESERVE 256

struct beam_link_s;
typedef struct beam_link_s beam_link_t;

/* Reads a token file (64 hex digits) into token. 0 or -1 with err set. */
int beam_token_read(const char *path, unsigned char *token, char *err, size_t errlen);
/* Makes a new random token and writes it to path (mode 0600). */
int beam_token_create(const char *path, unsigned char *token, char *err, size_t errlen);

/* Head: listens for member nodes on opts->listen_ip:port (port 0: any free
 * one, see beam_links_port). */
int beam_links_listen(beam_node_t *node, const beam_cluster_opts_t *opts, char *err, size_t errlen);
/* Head: the TCP port it listens on, or -1. */
int beam_links_port(beam_node_t *node);
/* Member: connects to the head, and again after every loss. */
int beam_link_join(beam_node_t *node, const beam_cluster_opts_t *opts);
/* Member: 1 once the head has welcomed this node. */
int beam_link_up(const beam_node_t *node);

/* Sends what enc holds (one frame) and destroys enc. 0 or -1. */
int beam_link_send_enc(beam_link_t *link, beam_enc_t *enc);
/* Head: a frame (header and body, malloc'd, taken) for remote client vconn. */
int beam_link_send_client(beam_link_t *link, uint32_t vconn, char *frame, size_t len);
/* Head: tell the member to close its client vconn. */
void beam_link_close_client(beam_link_t *link, uint32_t vconn);
/* Member: a frame body from local client vconn, for the head. */
void beam_link_forward(beam_node_t *node, uint32_t vconn, const char *body, size_t len);
/* Member: a local client came or went. */
void beam_link_client_open(beam_node_t *node, uint32_t vconn, long pid, unsigned uid);
void beam_link_client_closed(beam_node_t *node, uint32_t vconn);
/* Closes every link and the listener (daemon exit). */
void beam_links_stop(beam_node_t *node);
void beam_links_destroy(beam_node_t *node);

#endif
