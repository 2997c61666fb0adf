/* outq.h — a stream's write queue, shared by the transports: small messages
 * coalesced into blocks, large ones kept in their own buffers, payload spans
 * written in place from the reference-counted buffers that hold them, all of
 * it counted by what it costs in memory and handed to the stream in batches,
 * each block freed (each span's reference dropped) in its write callback. */
#ifndef BEAM_OUTQ_H
#define BEAM_OUTQ_H

#include <stddef.h>
#include <uv.h>

#include "beam/codec.h"

/* A message at least this large is queued in its own buffer, not copied. */
#define BEAM_OUTQ_OWN_BLOCK (64u << 10)

struct beam_outq_s;
/* A write handed to the stream finished (status 0) or failed (a negative
 * libuv error; UV_ECANCELED when the stream was closed with it pending). Its
 * cost is already off the queue. The queue does not start another write by
 * itself: the owner calls beam_outq_flush when it still wants to send.
 * Status 0 may come from inside beam_outq_flush (the stream took a batch at
 * once), once per flush, after the flush is done with the queue, so the
 * owner may flush again from it; a failure always comes from libuv's write
 * callback, on a later turn of the loop, never under a flush's caller. */
typedef void (*beam_outq_written_cb)(struct beam_outq_s *q, int status);

typedef struct beam_outq_s {
    uv_stream_t *stream;
    /* the caps, read at each push (they may change while the daemon runs):
     * past *soft the owner should stop reading its peer, past *max drop it */
    const size_t *soft, *max;
    /* what the queue costs in memory: blocks, own buffers, the bytes of the
     * spans it references, headers and write requests (not its payload) */
    size_t cost;
    size_t peak; /* the most cost has been since it was last empty */
    size_t spanned; /* the part of cost that is spans' bytes (new blocks are sized without it) */
    struct beam_outq_blk_s *head, *tail; /* not yet handed to the stream */
    beam_outq_written_cb on_written;
    void *data; /* the owner's */
} beam_outq_t;

/* What a push leaves the owner to do. */
enum {
    BEAM_OUTQ_OK = 0,
    BEAM_OUTQ_SOFT = 1, /* past *soft: stop reading the peer until it drains */
    BEAM_OUTQ_OVER = 2, /* past *max: drop the peer (on the loop's next turn) */
};

void beam_outq_init(beam_outq_t *q, uv_stream_t *stream, const size_t *soft, const size_t *max,
                    beam_outq_written_cb on_written, void *data);
/* Queues buf (malloc'd, len bytes; ownership passes here). Returns
 * BEAM_OUTQ_OK/SOFT/OVER, or -ENOMEM (buf is freed, nothing queued). */
int beam_outq_push(beam_outq_t *q, char *buf, size_t len);
/* Queues buf (malloc'd, len bytes; ownership passes here) as a block of its
 * own whatever its length: for a buffer made for this one message (a link's
 * sealed frame), which a copy would only duplicate. Returns as
 * beam_outq_push. */
int beam_outq_push_own(beam_outq_t *q, char *buf, size_t len);
/* Queues what enc holds: its bytes, with its spans written from their
 * buffers (references kept until written). enc is left destroyed. Returns as
 * beam_outq_push; on -ENOMEM a part of the message may have been queued, so
 * the owner must not send on the stream again. */
int beam_outq_push_enc(beam_outq_t *q, beam_enc_t *enc);
/* Hands the queue to the stream, a batch of blocks a write, while the stream
 * has nothing unwritten: each batch is written at once as far as the socket
 * takes it (those blocks freed, their cost off the queue, on_written(q, 0)
 * before returning), the rest of it goes to uv_write; what is left waits for
 * the write before it. Returns 0, -ENOMEM, or a libuv error from uv_write. */
int beam_outq_flush(beam_outq_t *q);
/* Whether the queue is back under half of *soft (the owner reads again). */
int beam_outq_drained(const beam_outq_t *q);
/* Frees what was not handed to the stream. Writes in flight free their own
 * blocks in their callbacks (UV_ECANCELED once the stream is closed). */
void beam_outq_destroy(beam_outq_t *q);

#endif
