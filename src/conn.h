/* conn.h — one client stream on the unix socket: its uv pipe, bounded input
 * decoding, the write queue with backpressure, and closing as a state. A
 * transport: it knows bytes, frames and its own end, and reports frames and
 * its end upward through the callbacks its owner set (the session). */
#ifndef BEAM_CONN_H
#define BEAM_CONN_H

#include <stdint.h>
#include <sys/types.h>
#include <uthash.h>
#include <uv.h>

#include "beam/codec.h"
#include "node.h"
#include "outq.h"

typedef struct beam_conn_s {
    uv_pipe_t pipe; /* first: the handle's data points back here */
    beam_node_t *node;
    uint32_t id;  /* its connection number on this node */
    long pid;     /* the peer's, from its credentials */
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
    /* set by the owner (node->hooks.conn_open): each frame read, and the
     * stream's end, once, as its teardown begins (sends are refused by
     * then; the memory goes later, with the last handle) */
    void *owner;
    /* buf: the frame's own buffer when it came in one (frame lies in it),
     * else NULL; the owner takes a reference to keep it */
    void (*on_frame)(void *owner, const char *frame, size_t len, beam_buf_t *buf);
    void (*on_close)(void *owner, const char *why);
} beam_conn_t;

/* Accepts a pending connection on server; refuses peers of another uid,
 * and those node->hooks.conn_open does not take. */
void beam_conn_accept(beam_node_t *node, uv_stream_t *server);
/* Queues buf (malloc'd; ownership passes here; NULL: out of memory) for
 * writing. Whatever a loop turn queues goes out in one write once the turn
 * is over. Past max_outq (or on a failed write, or out of memory) the
 * connection stops at once and is torn down on the loop's next turn, never
 * under the caller. Returns 0; -EPIPE if the connection is closing,
 * -ENOBUFS past max_outq, -ENOMEM. */
int beam_conn_send(beam_conn_t *conn, char *buf, size_t len);
/* Sends one line an actor printed as a `log` push (text is borrowed). While
 * the queue is past soft_outq the line is dropped and counted instead, and
 * once it is back under half of that the client gets one line saying how
 * many were dropped: a driver that does not read cannot grow beamd. */
void beam_conn_send_log(beam_conn_t *conn, int stream, const char *text, size_t len);
/* Encodes that `log` push into enc (initialised here; text is borrowed):
 * for a client the daemon reaches another way (session.c's remote kind). */
void beam_conn_enc_log(beam_enc_t *enc, int stream, const char *text, size_t len);
/* Sends what enc holds and leaves enc destroyed. Its spans (beam_pack_bin_buf)
 * are written from their buffers, not copied. Returns as beam_conn_send. */
int beam_conn_send_enc(beam_conn_t *conn, beam_enc_t *enc);
/* Stops reading and sending at once; the teardown (beam_conn_close) runs on
 * the loop's next turn, never under the caller. why must outlive the call. */
void beam_conn_close_soon(beam_conn_t *conn, const char *why);
/* Tears the stream down now: on_close, then what is queued gets its chance
 * and the handles close. Idempotent. Only from the loop's own callbacks (or
 * at exit): anyone else closes with beam_conn_close_soon. */
void beam_conn_close(beam_conn_t *conn, const char *why);

#endif
