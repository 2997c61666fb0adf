/* outq.c — the write queue (outq.h). A message is copied into the tail
 * block, which has room for it or is followed by a new one sized to the
 * queue (at least BLK_MIN, at most BLK_MAX, a block of its own mapping so it
 * goes back to the system when freed); a message of BEAM_OUTQ_OWN_BLOCK bytes
 * or more keeps its own buffer, trimmed to its length; a span is a block that
 * points into the buffer holding its bytes and keeps a reference to it. So a
 * queued 40-byte log line costs about 40 bytes, not the encoder's 8 KiB
 * buffer and a write request of its own, a value sent from where it is kept
 * costs no copy, and the cost counts what each holds. Blocks are handed to
 * the stream only when it has nothing unwritten, so a peer that does not
 * read leaves its messages here, coalesced and counted; they are tried at
 * once (uv_try_write), and only what the socket did not take becomes a
 * write request, so a reply to a reading peer costs one write(2) and no
 * turn of the loop. */
#define _GNU_SOURCE
#include "outq.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#define BLK_MIN 1024u
#define BLK_MAX (1u << 20)
#define MALLOC_OVERHEAD 16u
#define WRITE_BATCH 64
#define TRIM_PEAK (4u << 20) /* beamd.c's M_TRIM_THRESHOLD */

typedef struct beam_outq_blk_s {
    struct beam_outq_blk_s *next;
    char *own;       /* the message's own buffer, or NULL */
    beam_buf_t *buf; /* a span's buffer (one reference), or NULL */
    char *data;      /* own, buf's bytes, or (neither) the bytes following this header;
                        past what a write took of them at once */
    size_t len;      /* bytes held */
    size_t cap;      /* bytes data has room for */
    size_t cost;
} blk_t;

/* One write handed to the stream: its blocks live until its callback. */
typedef struct batch_s {
    uv_write_t req;
    beam_outq_t *q;
    blk_t *blocks;
    size_t cost, spanned;
} batch_t;

static void blocks_free(blk_t *b)
{
    while (b) {
        blk_t *next = b->next;
        free(b->own);
        beam_buf_unref(b->buf);
        free(b);
        b = next;
    }
}

void beam_outq_init(beam_outq_t *q, uv_stream_t *stream, const size_t *soft, const size_t *max,
                    beam_outq_written_cb on_written, void *data)
{
    memset(q, 0, sizeof *q);
    q->stream = stream;
    q->soft = soft;
    q->max = max;
    q->on_written = on_written;
    q->data = data;
}

void beam_outq_destroy(beam_outq_t *q)
{
    blocks_free(q->head);
    q->head = q->tail = NULL;
}

static void append(beam_outq_t *q, blk_t *b)
{
    if (q->tail)
        q->tail->next = b;
    else
        q->head = b;
    q->tail = b;
    q->cost += b->cost;
}

/* A new tail block with room for at least want bytes. */
static blk_t *block_new(beam_outq_t *q, size_t want)
{
    size_t queued = q->cost - q->spanned;
    size_t cap = queued > BLK_MIN ? queued : BLK_MIN;
    if (cap > BLK_MAX)
        cap = BLK_MAX;
    if (cap < want)
        cap = want;
    blk_t *b = malloc(sizeof *b + cap);
    if (!b)
        return NULL;
    b->next = NULL;
    b->own = NULL;
    b->buf = NULL;
    b->data = (char *)(b + 1);
    b->len = 0;
    b->cap = cap;
    b->cost = sizeof *b + cap + MALLOC_OVERHEAD;
    return b;
}

/* Copies p[0..n) into the queue. Returns 0 or -ENOMEM. */
static int queue_copy(beam_outq_t *q, const char *p, size_t n)
{
    while (n > 0) {
        blk_t *t = q->tail;
        if (!t || t->own || t->buf || t->len == t->cap) {
            t = block_new(q, n);
            if (!t)
                return -ENOMEM;
            append(q, t);
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
static int queue_own(beam_outq_t *q, char *buf, size_t len)
{
    blk_t *b = malloc(sizeof *b);
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
    b->buf = NULL;
    b->len = b->cap = len;
    b->cost = sizeof *b + len + 2 * MALLOC_OVERHEAD;
    append(q, b);
    return 0;
}

/* Queues a span; its reference passes here (dropped on failure). It costs
 * its bytes: they stay in memory for as long as it is queued. */
static int queue_span(beam_outq_t *q, const beam_enc_span_t *sp)
{
    blk_t *b = malloc(sizeof *b);
    if (!b) {
        beam_buf_unref(sp->buf);
        return -ENOMEM;
    }
    b->next = NULL;
    b->own = NULL;
    b->buf = sp->buf;
    b->data = (char *)sp->p;
    b->len = b->cap = sp->n;
    b->cost = sizeof *b + MALLOC_OVERHEAD + sp->n;
    append(q, b);
    q->spanned += sp->n;
    return 0;
}

static int settle(beam_outq_t *q)
{
    if (q->cost > q->peak)
        q->peak = q->cost;
    if (q->cost > *q->max)
        return BEAM_OUTQ_OVER;
    return q->cost > *q->soft ? BEAM_OUTQ_SOFT : BEAM_OUTQ_OK;
}

int beam_outq_push(beam_outq_t *q, char *buf, size_t len)
{
    int rc;
    if (len >= BEAM_OUTQ_OWN_BLOCK) {
        rc = queue_own(q, buf, len);
    } else {
        rc = queue_copy(q, buf, len);
        free(buf);
    }
    return rc < 0 ? rc : settle(q);
}

int beam_outq_push_own(beam_outq_t *q, char *buf, size_t len)
{
    int rc = queue_own(q, buf, len);
    return rc < 0 ? rc : settle(q);
}

int beam_outq_push_enc(beam_outq_t *q, beam_enc_t *enc)
{
    if (enc->failed) {
        beam_enc_destroy(enc);
        return -ENOMEM;
    }
    beam_enc_span_t *spans;
    size_t len, nspans;
    char *bytes = beam_enc_take_spans(enc, &len, &spans, &nspans);
    beam_enc_destroy(enc);
    if (!spans)
        return beam_outq_push(q, bytes, len);
    /* the bytes between spans are the envelope and small values: copied */
    int rc = 0;
    size_t from = 0;
    for (size_t i = 0; i < nspans; i++) {
        if (rc == 0)
            rc = queue_copy(q, bytes + from, spans[i].at - from);
        if (rc == 0)
            rc = queue_span(q, &spans[i]);
        else
            beam_buf_unref(spans[i].buf);
        from = spans[i].at;
    }
    if (rc == 0)
        rc = queue_copy(q, bytes + from, len - from);
    free(bytes);
    free(spans);
    return rc < 0 ? rc : settle(q);
}

/* Cost released (a write done): a burst that is over gives its memory back
 * (small blocks live in the heap). */
static void released(beam_outq_t *q)
{
    if (q->cost == 0 && q->peak >= TRIM_PEAK) {
        q->peak = 0;
        malloc_trim(0);
    }
}

static void on_write(uv_write_t *req, int status)
{
    batch_t *w = (batch_t *)req;
    beam_outq_t *q = w->q;
    q->cost -= w->cost;
    q->spanned -= w->spanned;
    blocks_free(w->blocks);
    free(w);
    if (status == 0)
        released(q);
    q->on_written(q, status);
}

/* The stream took wrote bytes of bufs[0..*n) at once: the blocks they
 * covered, from the queue's head, are freed as a finished write's are, a
 * block written in part is advanced past what went, and bufs is left
 * holding what is still to write (*n of them). */
static void take_written(beam_outq_t *q, size_t wrote, uv_buf_t *bufs, unsigned *n)
{
    unsigned i = 0;
    while (i < *n && wrote >= bufs[i].len) {
        blk_t *b = q->head;
        wrote -= bufs[i].len;
        q->head = b->next;
        if (!q->head)
            q->tail = NULL;
        q->cost -= b->cost;
        if (b->buf)
            q->spanned -= b->len;
        b->next = NULL;
        blocks_free(b);
        i++;
    }
    if (i < *n && wrote > 0) {
        /* a block cut in two: it keeps only the rest (so the queue stays
         * true whatever becomes of this flush), which goes next */
        blk_t *b = q->head;
        b->data += wrote;
        b->len -= wrote;
        b->cap -= wrote;
        if (b->buf)
            q->spanned -= wrote;
        bufs[i] = uv_buf_init(b->data, (unsigned)b->len);
    }
    memmove(bufs, bufs + i, (*n - i) * sizeof *bufs);
    *n -= i;
    released(q);
}

int beam_outq_flush(beam_outq_t *q)
{
    uv_stream_t *s = q->stream;
    int done = 0; /* a batch went out whole at once: the owner hears of it below */
    while (q->head && !uv_is_closing((uv_handle_t *)s) && uv_stream_get_write_queue_size(s) == 0) {
        uv_buf_t bufs[WRITE_BATCH];
        unsigned n = 0;
        blk_t *b = q->head;
        for (; b && n < WRITE_BATCH; b = b->next)
            bufs[n++] = uv_buf_init(b->data, (unsigned)b->len);
        /* the stream has nothing unwritten, so these bytes may go now, in
         * order, without a request and a turn of the loop for its callback.
         * UV_EAGAIN (the socket is full) writes nothing; any other error
         * also leaves it all to uv_write, which meets the error again and
         * reports it through on_write on a later turn, as before: never
         * under the caller of this flush. */
        int wrote = uv_try_write(s, bufs, n);
        if (wrote > 0)
            take_written(q, (size_t)wrote, bufs, &n);
        if (n == 0) {
            done = 1;
            continue;
        }
        batch_t *w = malloc(sizeof *w);
        if (!w)
            return -ENOMEM;
        size_t cost = sizeof *w + MALLOC_OVERHEAD, spanned = 0;
        blk_t *last = q->head; /* the n blocks left start at q->head (n >= 1) */
        for (unsigned i = 0; i < n; i++) {
            if (i > 0)
                last = last->next;
            cost += last->cost;
            if (last->buf)
                spanned += last->len;
        }
        w->q = q;
        w->blocks = q->head;
        w->cost = cost;
        w->spanned = spanned;
        q->head = last->next;
        last->next = NULL;
        if (!q->head)
            q->tail = NULL;
        q->cost += sizeof *w + MALLOC_OVERHEAD;
        int rc = uv_write(&w->req, s, bufs, n, on_write);
        if (rc < 0) {
            q->cost -= w->cost;
            q->spanned -= w->spanned;
            blocks_free(w->blocks);
            free(w);
            return rc;
        }
    }
    if (done)
        q->on_written(q, 0);
    return 0;
}

int beam_outq_drained(const beam_outq_t *q)
{
    return q->cost <= *q->soft / 2;
}
