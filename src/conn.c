/* conn.c — client streams: accept with a peer-credential check, the
 * bounded read path, the write queue, and closing (reported to the owner). */
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

/* The write queue. A message is copied into the tail block, which has room
 * for it or is followed by a new one sized to the queue (at least BLK_MIN,
 * at most BLK_MAX, a block of its own mapping so it goes back to the system
 * when freed); a message of BEAM_CONN_OWN_BLOCK bytes or more keeps its own
 * buffer, trimmed to its length. So a queued 40-byte log line costs about
 * 40 bytes, not the encoder's 8 KiB buffer and a write request of its own,
 * and outq counts what the blocks cost. What a loop turn queues is written
 * when the turn is over (flush_soon), all blocks in one write; blocks are
 * handed to the pipe only when it has nothing unwritten, so a client that
 * does not read leaves its replies here, coalesced and counted. */
#define BLK_MIN 1024u
#define BLK_MAX (1u << 20)
#define MALLOC_OVERHEAD 16u
#define WRITE_BATCH 64
#define TRIM_PEAK (4u << 20) /* beamd.c's M_TRIM_THRESHOLD */

typedef struct beam_outblk_s {
    struct beam_outblk_s *next;
    char *own;  /* the message's own buffer, or NULL: the bytes follow this header */
    char *data;
    size_t len; /* bytes held */
    size_t cap; /* bytes data has room for */
    size_t cost;
} outblk_t;

/* One write handed to the pipe: its blocks live until its callback. */
typedef struct batch_s {
    uv_write_t req;
    beam_conn_t *conn;
    outblk_t *blocks;
    size_t cost;
} batch_t;

static void blocks_free(outblk_t *b)
{
    while (b) {
        outblk_t *next = b->next;
        free(b->own);
        free(b);
        b = next;
    }
}

static void on_close(uv_handle_t *h)
{
    beam_conn_t *c = h->data;
    if (--c->handles > 0)
        return;
    blocks_free(c->wq_head);
    beam_decoder_destroy(&c->dec);
    free(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    buf->base = malloc(suggested);
    buf->len = buf->base ? suggested : 0;
}

static void send_error_push(beam_conn_t *c, const char *message)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "error", 1);
    beam_pack_key(&enc.pk, "message");
    beam_pack_str(&enc.pk, message);
    beam_enc_end(&enc, 0);
    beam_conn_send_enc(c, &enc);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    beam_conn_t *c = s->data;
    if (nread < 0) {
        free(buf->base);
        beam_conn_close(c, nread == UV_EOF ? "disconnected" : uv_strerror((int)nread));
        return;
    }
    if (nread == 0 || c->closing) {
        free(buf->base);
        return;
    }
    int rc = beam_decoder_feed(&c->dec, buf->base, (size_t)nread);
    free(buf->base);
    const char *frame;
    size_t len;
    while (rc == 0 && !c->closing && (rc = beam_decoder_next(&c->dec, &frame, &len)) == 1) {
        c->on_frame(c->owner, frame, len);
        rc = 0;
    }
    if (rc < 0 && !c->closing) {
        char msg[256];
        snprintf(msg, sizeof msg, "protocol error: %s", c->dec.err);
        send_error_push(c, msg);
        beam_conn_close(c, msg);
    }
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
    c->handles = 1;
    if (uv_accept(server, (uv_stream_t *)&c->pipe) != 0) {
        uv_close((uv_handle_t *)&c->pipe, on_close);
        return;
    }
    if (!peer_allowed(c)) {
        beam_log(BEAM_LOG_WARN, "refused a connection from uid %u (pid %ld): not this daemon's owner",
                 (unsigned)c->uid, c->pid);
        uv_close((uv_handle_t *)&c->pipe, on_close);
        return;
    }
    if (!node->hooks.conn_open || node->hooks.conn_open(node, c) < 0) {
        /* (a member that has not joined its head has nothing to serve yet) */
        uv_close((uv_handle_t *)&c->pipe, on_close);
        return;
    }
    c->reading = 1;
    uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
}

static void flush(beam_conn_t *c);
static void send_drop_marker(beam_conn_t *c);

static void on_write(uv_write_t *req, int status)
{
    batch_t *w = (batch_t *)req;
    beam_conn_t *c = w->conn;
    c->outq -= w->cost;
    blocks_free(w->blocks);
    free(w);
    if (status < 0) {
        if (status != UV_ECANCELED)
            beam_conn_close(c, uv_strerror(status));
        return;
    }
    if (c->closing)
        return;
    if (c->wq_head)
        flush(c); /* what waited while the pipe was full */
    if (c->outq == 0 && c->outq_peak >= TRIM_PEAK) {
        /* a burst is over: give its memory back (small blocks live in the heap) */
        c->outq_peak = 0;
        malloc_trim(0);
    }
    if (c->logs_dropped && c->outq <= c->node->soft_outq / 2)
        send_drop_marker(c);
    if (!c->closing && !c->reading && c->outq <= c->node->soft_outq / 2) {
        c->reading = 1;
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

/* A new tail block with room for at least want bytes. */
static outblk_t *block_new(beam_conn_t *c, size_t want)
{
    size_t cap = c->outq > BLK_MIN ? c->outq : BLK_MIN;
    if (cap > BLK_MAX)
        cap = BLK_MAX;
    if (cap < want)
        cap = want;
    outblk_t *b = malloc(sizeof *b + cap);
    if (!b)
        return NULL;
    b->next = NULL;
    b->own = NULL;
    b->data = (char *)(b + 1);
    b->len = 0;
    b->cap = cap;
    b->cost = sizeof *b + cap + MALLOC_OVERHEAD;
    return b;
}

static void block_append(beam_conn_t *c, outblk_t *b)
{
    if (c->wq_tail)
        c->wq_tail->next = b;
    else
        c->wq_head = b;
    c->wq_tail = b;
    c->outq += b->cost;
}

/* Copies p[0..n) into the queue. Returns 0 or -ENOMEM. */
static int queue_copy(beam_conn_t *c, const char *p, size_t n)
{
    while (n > 0) {
        outblk_t *t = c->wq_tail;
        if (!t || t->own || t->len == t->cap) {
            t = block_new(c, n);
            if (!t)
                return -ENOMEM;
            block_append(c, t);
        }
        size_t k = t->cap - t->len < n ? t->cap - t->len : n;
        memcpy(t->data + t->len, p, k);
        t->len += k;
        p += k;
        n -= k;
    }
    return 0;
}

/* Queues buf (ownership passes here) as a block of its own. */
static int queue_own(beam_conn_t *c, char *buf, size_t len)
{
    outblk_t *b = malloc(sizeof *b);
    if (!b) {
        free(buf);
        return -ENOMEM;
    }
    /* the encoder's buffer doubles as it grows: keep only what the message needs */
    char *trimmed = realloc(buf, len);
    if (trimmed)
        buf = trimmed;
    b->next = NULL;
    b->own = b->data = buf;
    b->len = b->cap = len;
    b->cost = sizeof *b + len + 2 * MALLOC_OVERHEAD;
    block_append(c, b);
    return 0;
}

/* Hands the queue to the pipe, WRITE_BATCH blocks a write, while the pipe
 * has nothing unwritten (libuv then writes at once); otherwise the blocks
 * wait for the write before them to finish (on_write). */
static void flush(beam_conn_t *c)
{
    uv_stream_t *s = (uv_stream_t *)&c->pipe;
    while (c->wq_head && !uv_is_closing((uv_handle_t *)s) && uv_stream_get_write_queue_size(s) == 0) {
        batch_t *w = malloc(sizeof *w);
        if (!w) {
            close_soon(c, "out of memory writing a reply");
            return;
        }
        uv_buf_t bufs[WRITE_BATCH];
        unsigned n = 0;
        size_t cost = sizeof *w + MALLOC_OVERHEAD;
        outblk_t *b = c->wq_head, *last = NULL;
        for (; b && n < WRITE_BATCH; b = b->next) {
            bufs[n++] = uv_buf_init(b->data, (unsigned)b->len);
            cost += b->cost;
            last = b;
        }
        w->conn = c;
        w->blocks = c->wq_head;
        w->cost = cost;
        last->next = NULL;
        c->wq_head = b;
        if (!b)
            c->wq_tail = NULL;
        c->outq += sizeof *w + MALLOC_OVERHEAD;
        int rc = uv_write(&w->req, s, bufs, n, on_write);
        if (rc < 0) {
            c->outq -= w->cost;
            blocks_free(w->blocks);
            free(w);
            close_soon(c, uv_strerror(rc));
            return;
        }
    }
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

int beam_conn_send(beam_conn_t *c, char *buf, size_t len)
{
    if (c->closing || !buf) {
        free(buf);
        return -1;
    }
    int rc;
    if (len >= BEAM_CONN_OWN_BLOCK) {
        rc = queue_own(c, buf, len);
    } else {
        rc = queue_copy(c, buf, len);
        free(buf);
    }
    if (rc < 0) {
        close_soon(c, "out of memory queueing a reply");
        return -1;
    }
    if (c->outq > c->outq_peak)
        c->outq_peak = c->outq;
    flush_soon(c);
    if (c->outq > c->node->max_outq) {
        beam_log(BEAM_LOG_WARN, "client %u (pid %ld) is not reading: %zu bytes queued", c->id, c->pid, c->outq);
        close_soon(c, "too many unread bytes queued");
        return -1;
    }
    if (c->reading && c->outq > c->node->soft_outq) {
        /* backpressure: read nothing more from a client that does not read */
        c->reading = 0;
        uv_read_stop((uv_stream_t *)&c->pipe);
    }
    return 0;
}

static void send_log_push(beam_conn_t *c, int stream, const char *text, size_t len)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "log", 2);
    beam_pack_key(&enc.pk, "stream");
    msgpack_pack_int(&enc.pk, stream);
    beam_pack_key(&enc.pk, "text");
    beam_pack_strn(&enc.pk, text, len);
    beam_enc_end(&enc, 0);
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
    if (c->logs_dropped && c->outq <= c->node->soft_outq / 2)
        send_drop_marker(c);
    if (c->logs_dropped || c->outq >= c->node->soft_outq) {
        c->logs_dropped++;
        return;
    }
    send_log_push(c, stream, text, len);
}

int beam_conn_send_enc(beam_conn_t *c, beam_enc_t *enc)
{
    size_t len;
    if (enc->failed) {
        beam_enc_destroy(enc);
        close_soon(c, "out of memory encoding a message");
        return -1;
    }
    char *buf = beam_enc_take(enc, &len);
    beam_enc_destroy(enc);
    return beam_conn_send(c, buf, len);
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
