/* batch.h — on a member, the local_batch being built: the records of its
 * local calls ([kind, vconn, frame], docs/PROTOCOL.md) held to go up to the
 * head as one link message (docs/DESIGN.md, "Calls that stay on a member").
 * local.c holds records here; anything else the member sends the head
 * sends what is held first (beam_local_flush), so the head sees the
 * member's messages in the order they were made. Functions return 0 or a
 * negative errno. */
#ifndef BEAM_BATCH_H
#define BEAM_BATCH_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "beam/codec.h"
#include "node.h"

/* What is held goes up once it is BEAM_LOCAL_HOLD_MS old, looked at each
 * time the loop is about to wait; a timer of BEAM_LOCAL_QUIET_MS covers a
 * loop that falls quiet. (A timer due within the kernel's tick is re-armed
 * in the kernel at every wait: measured, it made every process of a local
 * call dearer; and a longer hold wakes the head less: docs/DESIGN.md.) At
 * most BEAM_LOCAL_HOLD_MAX records and BEAM_LOCAL_HOLD_BYTES are held (more
 * go up at once); a frame over a quarter of the bytes is not held. */
#define BEAM_LOCAL_HOLD_MS 5
#define BEAM_LOCAL_QUIET_MS 10
#define BEAM_LOCAL_HOLD_MAX 256
#define BEAM_LOCAL_HOLD_BYTES (256u << 10)
/* A held record's kind, as local_batch carries it (headup.c reads them): a
 * local client's frame (a local call's task_done), or a local call's
 * submit. */
enum { BEAM_LOCAL_REC_FRAME = 0, BEAM_LOCAL_REC_SUBMIT = 1 };

typedef struct beam_batch_s {
    beam_node_t *node;
    beam_enc_t enc;      /* the local_batch message while n > 0 */
    size_t n, count_at;  /* records so far; where msgs' count lies in enc */
    uint64_t since;      /* loop time the first record was held */
    uv_prepare_t age;    /* before each wait: sends what is BEAM_LOCAL_HOLD_MS old */
    uv_timer_t quiet;    /* sends what is held after BEAM_LOCAL_QUIET_MS */
} beam_batch_t;

/* b is the caller's (its handles are closed by beam_batch_reset once the
 * node is stopping; free b only after the loop has run them). */
void beam_batch_init(beam_batch_t *b, beam_node_t *node);
/* Starts a record [kind, vconn, frame]: the caller packs the frame (one bin)
 * with the packer returned, then calls beam_batch_done. */
msgpack_packer *beam_batch_start(beam_batch_t *b, int kind, uint32_t vconn);
/* The record is complete: held, or sent with the others when the batch is full. */
void beam_batch_done(beam_batch_t *b);
/* A frame body from local client vconn held as a BEAM_LOCAL_REC_FRAME
 * record: 0, or -EMSGSIZE (too large to hold: the caller forwards it, after
 * beam_batch_flush). */
int beam_batch_hold_frame(beam_batch_t *b, uint32_t vconn, const char *body, size_t len);
/* Sends what is held to the head as one local_batch (one frame, one
 * write). A batch that ran out of memory while it was built has lost
 * records of calls the member already ran: the link is closed then (the
 * head loses this node, which joins again), never a record dropped. */
void beam_batch_flush(beam_batch_t *b);
/* Drops what is held (the head is lost); closes the handles once the node
 * is stopping. */
void beam_batch_reset(beam_batch_t *b);

#endif
