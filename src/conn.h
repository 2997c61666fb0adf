/* conn.h — one client connection: its uv pipe, bounded input decoding, the
 * write queue with backpressure, what it holds, and closing as a state. */
#ifndef BEAM_CONN_H
#define BEAM_CONN_H

#include <stdint.h>
#include <sys/types.h>
#include <uthash.h>
#include <uv.h>

#include "beam/codec.h"
#include "node.h"
#include "outq.h"

enum { BEAM_ROLE_NONE = 0, BEAM_ROLE_DRIVER, BEAM_ROLE_WORKER, BEAM_ROLE_CTL };

/* One id a connection holds (an object or an actor handle). */
typedef struct beam_held_s {
    char id[BEAM_OBJECT_ID_SIZE];
    UT_hash_handle hh;
} beam_held_t;

typedef struct beam_conn_s {
    uv_pipe_t pipe; /* first: the handle's data points back here */
    beam_node_t *node;
    uint32_t id;
    uint32_t job;
    int role;
    long pid;
    uid_t uid;
    beam_decoder_t dec;
    beam_outq_t outq; /* what is not yet written, and what it costs (outq.h) */
    uint64_t logs_dropped;          /* worker lines not sent since the queue passed soft_outq */
    int closing;  /* no more reads or sends: being torn down, now or on the next turn */
    int closed;   /* torn down: out of every table, its handles closing */
    int handles;  /* open uv handles (pipe, closer, flusher); the memory goes with the last */
    int has_closer;
    uv_idle_t closer; /* runs a close that a send asked for (close_soon in conn.c) */
    int has_flusher;
    uv_idle_t flusher; /* writes what the loop turn queued, in one write (flush_soon) */
    const char *close_why;
    int reading;
    int no_logs; /* log_to_driver=False */
    beam_held_t *held_objects;
    beam_held_t *held_actors;
    struct beam_waiter_s *waiters;
    struct beam_actor_s *actor; /* the actor a worker connection serves */
    struct beam_member_s *member; /* the node the client is on */
    struct beam_link_s *link;     /* head: a client on a member node, reached over this link */
    uint32_t vconn;               /* its connection number on that node */
    int relay;                    /* member node: frames go to the head, not to dispatch */
    int remote_closed;            /* the other side already knows it is closed */
    struct beam_conn_s *prev, *next;
    struct beam_conn_s *reap_next;
} beam_conn_t;

/* Accepts a pending connection on server; refuses peers of another uid. */
void beam_conn_accept(beam_node_t *node, uv_stream_t *server);
/* Queues buf (malloc'd; ownership passes here) for writing. Whatever a loop
 * turn queues goes out in one write once the turn is over. Past max_outq
 * (or on a failed write) the connection stops at once and is torn down on
 * the loop's next turn, never under the caller. Returns 0, or -1 if the
 * connection is closing. */
int beam_conn_send(beam_conn_t *conn, char *buf, size_t len);
/* Sends one line an actor printed as a `log` push (text is borrowed). While
 * the queue is past soft_outq the line is dropped and counted instead, and
 * once it is back under half of that the client gets one line saying how
 * many were dropped: a driver that does not read cannot grow beamd. */
void beam_conn_send_log(beam_conn_t *conn, int stream, const char *text, size_t len);
/* Sends what enc holds and leaves enc destroyed. Its spans (beam_pack_bin_buf)
 * are written from their buffers, not copied, to a local client. */
int beam_conn_send_enc(beam_conn_t *conn, beam_enc_t *enc);
/* Replies with an error; for msgid 0, sends an `error` push instead. */
void beam_conn_reply_error(beam_conn_t *conn, uint64_t msgid, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Replies {} to msgid (nothing for msgid 0). */
void beam_conn_reply_empty(beam_conn_t *conn, uint64_t msgid);
/* Releases everything the connection holds, then closes it. Idempotent. */
void beam_conn_close(beam_conn_t *conn, const char *why);

/* Head: a client that said hello on member m's node, as vconn there. */
beam_conn_t *beam_conn_open_remote(beam_node_t *node, struct beam_link_s *link, struct beam_member_s *m,
                                   uint32_t vconn, long pid, unsigned uid);
beam_conn_t *beam_conn_find_remote(beam_node_t *node, struct beam_link_s *link, uint32_t vconn);
/* Frees closed remote connections now (the reaper does it each loop turn). */
void beam_conn_reap_all(beam_node_t *node);
/* Member: a local client by its number. */
beam_conn_t *beam_conn_find_local(beam_node_t *node, uint32_t id);

/* Hold sets: 1 when newly added, 0 if already held, -ENOMEM. */
int beam_conn_hold(beam_held_t **set, const char *id, size_t len);
/* 1 when it was held and is now dropped, else 0. */
int beam_conn_unhold(beam_held_t **set, const char *id, size_t len);

#endif
