/* conn.c — client streams: accept with a peer-credential check, the
 * bounded read path, the write queue (outq), and closing (reported to the
 * owner). Errors are 0 or a negative errno (a libuv UV_E* is one on Linux). */
#define _GNU_SOURCE
#include "conn.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"

static void on_written(beam_outq_t *q, int status);

static void on_close(uv_handle_t *h)
{
    beam_conn_t *c = h->data;
    if (--c->handles > 0)
        return;
    beam_outq_destroy(&c->outq);
    beam_decoder_destroy(&c->dec);
    free(c);
}

/* A read lands in the decoder's free space: the shared buffer, or the rest
 * of a large frame's own buffer (so its body is never copied again). */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    beam_conn_t *c = h->data;
    if (beam_decoder_space(&c->dec, &buf->base, &buf->len) < 0) {
        buf->base = NULL;
        buf->len = 0; /* libuv reports UV_ENOBUFS: on_read closes with the decoder's error */
    }
}

static void send_error_push(beam_conn_t *c, const char *message)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_error_push(&enc, message);
    beam_enc_end(&enc, 0);
    beam_conn_send_enc(c, &enc);
}

/* Hands the decoder's whole frames to the owner while the client is read.
 * A reply queue past soft_outq pauses the client between two frames, not
 * only between two reads: the frames not yet handed on stay in the decoder
 * until the queue drains (on_written), so one read of many small requests
 * cannot queue replies past max_outq. */
static void deliver(beam_conn_t *c)
{
    const char *frame;
    size_t len;
    while (!c->closing && c->reading && beam_decoder_next(&c->dec, &frame, &len) == 1) {
        /* a frame that came in its own buffer is handed on with it: what
         * the owner keeps of it (a value, a call's args) is not copied */
        char *own = beam_decoder_take(&c->dec);
        beam_buf_t *fb = own ? beam_buf_wrap(own, len) : NULL;
        c->on_frame(c->owner, frame, len, fb);
        beam_buf_unref(fb);
    }
    if (c->dec.failed && !c->closing) {
        char msg[256];
        snprintf(msg, sizeof msg, "protocol error: %s", c->dec.err);
        send_error_push(c, msg);
        beam_conn_close(c, msg);
        return;
    }
    if (!c->closing)
        beam_decoder_trim(&c->dec); /* an idle client holds no read buffer */
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    beam_conn_t *c = s->data;
    if (nread < 0 && !c->dec.failed) {
        beam_conn_close(c, nread == UV_EOF ? "disconnected" : uv_strerror((int)nread));
        return;
    }
    if (nread == 0 || c->closing)
        return;
    if (nread > 0)
        beam_decoder_commit(&c->dec, (size_t)nread);
    deliver(c);
}

static int peer_allowed(beam_conn_t *c)
{
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return 0;
    c->uid = cred.uid;
    c->pid = cred.pid;
    return cred.uid == getuid() || cred.uid == 0;
}

void beam_conn_accept(beam_node_t *node, uv_stream_t *server)
{
    beam_conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        beam_log(BEAM_LOG_ERROR, "out of memory accepting a connection");
        return;
    }
    c->node = node;
    c->id = ++node->next_conn;
    beam_decoder_init(&c->dec, &node->limits);
    uv_pipe_init(node->loop, &c->pipe, 0);
    c->pipe.data = c;
    beam_outq_init(&c->outq, (uv_stream_t *)&c->pipe, &node->soft_outq, &node->max_outq, on_written, c);
    c->handles = 1;
    if (uv_accept(server, (uv_stream_t *)&c->pipe) != 0)
        goto cleanup;
    if (!peer_allowed(c)) {
        beam_log(BEAM_LOG_WARN, "refused a connection from uid %u (pid %ld): not this daemon's owner",
                 (unsigned)c->uid, c->pid);
        goto cleanup;
    }
    /* (a member that has not joined its head has nothing to serve yet) */
    if (!node->hooks.conn_open || node->hooks.conn_open(node, c) < 0)
        goto cleanup;
    c->reading = 1;
    uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
    return;
cleanup: /* refused: the pipe's close frees c */
    uv_close((uv_handle_t *)&c->pipe, on_close);
}

static void send_drop_marker(beam_conn_t *c);
static void close_soon(beam_conn_t *c, const char *why);

static void flush(beam_conn_t *c)
{
    int rc = beam_outq_flush(&c->outq);
    if (rc < 0)
        close_soon(c, rc == -ENOMEM ? "out of memory writing a reply" : uv_strerror(rc));
}

static void on_written(beam_outq_t *q, int status)
{
    beam_conn_t *c = q->data;
    if (status < 0) {
        if (status != UV_ECANCELED)
            beam_conn_close(c, uv_strerror(status));
        return;
    }
    if (c->closing)
        return;
    if (c->outq.head)
        flush(c); /* what waited while the pipe was full */
    if (c->logs_dropped && beam_outq_drained(&c->outq))
        send_drop_marker(c);
    if (!c->closing && !c->reading && beam_outq_drained(&c->outq)) {
        c->reading = 1;
        deliver(c); /* the frames the pause left in the decoder first */
        if (!c->closing && c->reading)
            uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
    }
}

static void on_closer(uv_idle_t *h)
{
    beam_conn_t *c = h->data;
    uv_idle_stop(h);
    beam_conn_close(c, c->close_why);
}

/* A send that cannot go on (its queue past max_outq, no memory, a failed
 * write) must not tear the connection down under its caller: that caller
 * may be walking this connection's waiters, an object's waiter list or an
 * actor's queue, all of which the teardown edits (a get answered into a full
 * queue freed its own waiter twice). So the connection stops reading and
 * sending at once and is torn down on the loop's next turn. why must be a
 * string that outlives the call (a literal or uv_strerror's). */
static void close_soon(beam_conn_t *c, const char *why)
{
    if (c->closing)
        return;
    c->closing = 1;
    c->close_why = why;
    if (c->reading) {
        c->reading = 0;
        uv_read_stop((uv_stream_t *)&c->pipe);
    }
    uv_idle_init(c->node->loop, &c->closer);
    c->closer.data = c;
    c->has_closer = 1;
    c->handles++;
    uv_idle_start(&c->closer, on_closer);
}

static void on_flush(uv_idle_t *h)
{
    beam_conn_t *c = h->data;
    uv_idle_stop(h);
    flush(c);
}

/* Writes the queue once this loop turn is over, so that everything the turn
 * sends this client goes out in one write. An idle handle, not a check
 * handle: it runs whatever phase queued the message (a check handle started
 * in a close callback would wait out the next poll), and while it is active
 * the loop does not block. */
static void flush_soon(beam_conn_t *c)
{
    if (!c->has_flusher) {
        uv_idle_init(c->node->loop, &c->flusher);
        c->flusher.data = c;
        c->has_flusher = 1;
        c->handles++;
    }
    if (!uv_is_active((uv_handle_t *)&c->flusher))
        uv_idle_start(&c->flusher, on_flush);
}

/* What a push left to do: stop at once past max_outq, stop reading past
 * soft_outq; the queue is written once this loop turn is over. */
static int after_push(beam_conn_t *c, int rc)
{
    if (rc < 0) {
        close_soon(c, "out of memory queueing a reply");
        return rc;
    }
    flush_soon(c);
    if (rc == BEAM_OUTQ_OVER) {
        beam_log(BEAM_LOG_WARN, "client %u (pid %ld) is not reading: %zu bytes queued", c->id, c->pid,
                 c->outq.cost);
        close_soon(c, "too many unread bytes queued");
        return -ENOBUFS;
    }
    if (rc == BEAM_OUTQ_SOFT && c->reading) {
        /* backpressure: read nothing more from a client that does not read */
        c->reading = 0;
        uv_read_stop((uv_stream_t *)&c->pipe);
    }
    return 0;
}

int beam_conn_send(beam_conn_t *c, char *buf, size_t len)
{
    if (c->closing || !buf) {
        free(buf);
        return c->closing ? -EPIPE : -ENOMEM;
    }
    return after_push(c, beam_outq_push(&c->outq, buf, len));
}

void beam_conn_enc_log(beam_enc_t *enc, int stream, const char *text, size_t len)
{
    beam_enc_init(enc);
    beam_enc_push(enc, "log", 2);
    beam_pack_key(&enc->pk, "stream");
    msgpack_pack_int(&enc->pk, stream);
    beam_pack_key(&enc->pk, "text");
    beam_pack_strn(&enc->pk, text, len);
    beam_enc_end(enc, 0);
}

static void send_log_push(beam_conn_t *c, int stream, const char *text, size_t len)
{
    beam_enc_t enc;
    beam_conn_enc_log(&enc, stream, text, len);
    beam_conn_send_enc(c, &enc);
}

static void send_drop_marker(beam_conn_t *c)
{
    char text[200];
    int n = snprintf(text, sizeof text,
                     "[beam] %" PRIu64 " lines dropped: this driver did not read its actors' output in time",
                     c->logs_dropped);
    beam_log(BEAM_LOG_WARN, "client %u (pid %ld): %" PRIu64 " lines of actor output dropped", c->id, c->pid,
             c->logs_dropped);
    c->logs_dropped = 0;
    send_log_push(c, 2, text, (size_t)n);
}

void beam_conn_send_log(beam_conn_t *c, int stream, const char *text, size_t len)
{
    if (c->closing)
        return;
    if (c->logs_dropped && beam_outq_drained(&c->outq))
        send_drop_marker(c);
    if (c->logs_dropped || c->outq.cost >= c->node->soft_outq) {
        c->logs_dropped++;
        return;
    }
    send_log_push(c, stream, text, len);
}

int beam_conn_send_enc(beam_conn_t *c, beam_enc_t *enc)
{
    if (enc->failed) {
        beam_enc_destroy(enc);
        close_soon(c, "out of memory encoding a message");
        return -ENOMEM;
    }
    if (c->closing) {
        beam_enc_destroy(enc);
        return -EPIPE;
    }
    return after_push(c, beam_outq_push_enc(&c->outq, enc));
}

void beam_conn_close_soon(beam_conn_t *c, const char *why)
{
    close_soon(c, why);
}

void beam_conn_close(beam_conn_t *c, const char *why)
{
    if (c->closed)
        return;
    c->closed = 1;
    c->closing = 1;
    if (c->on_close)
        c->on_close(c->owner, why);
    c->on_close = NULL;
    /* what is queued gets its chance (an error push before a close) */
    flush(c);
    if (c->has_closer)
        uv_close((uv_handle_t *)&c->closer, on_close);
    if (c->has_flusher)
        uv_close((uv_handle_t *)&c->flusher, on_close);
    uv_close((uv_handle_t *)&c->pipe, on_close);
}
