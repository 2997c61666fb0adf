/* localbatch.h — on a member, the local_batch being built: the records of its
 * local calls ([kind, vconn, frame], docs/PROTOCOL.md) held to go up to the
 * head as one link message (docs/DESIGN.md, "Calls that stay on a member").
 * shortcut.c holds records here; anything else the member sends the head
 * sends what is held first (beam_shortcut_flush), so the head sees the
 * member's messages in the order they were made. Functions return 0 or a
 * negative errno. */
#ifndef BEAM_LOCALBATCH_H
#define BEAM_LOCALBATCH_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "beam/codec.h"
#include "node.h"

/* What is held goes up once it is BEAM_SHORTCUT_HOLD_MS old, looked at each
 * time the loop is about to wait; a timer of BEAM_LOCAL_QUIET_MS covers a
 * loop that falls quiet. (A timer due within the kernel's tick is re-armed
 * in the kernel at every wait: measured, it made every process of a local
 * call dearer; and a longer hold wakes the head less: docs/DESIGN.md.) At
 * most BEAM_SHORTCUT_HOLD_MAX records and BEAM_SHORTCUT_HOLD_BYTES are held (more
 * go up at once); a frame over a quarter of the bytes is not held. */
#define BEAM_SHORTCUT_HOLD_MS 5
#define BEAM_LOCAL_QUIET_MS 10
#define BEAM_SHORTCUT_HOLD_MAX 256
#define BEAM_SHORTCUT_HOLD_BYTES (256u << 10)
/* A held record's kind, as local_batch carries it (intake.c reads them): a
 * local client's frame (a local call's task_done), a local call's submit,
 * or a local worker's call board (boards.h) as read now: its counts in
 * beam_boards_pack_counts's form. */
enum { BEAM_LOCAL_REC_FRAME = 0, BEAM_LOCAL_REC_SUBMIT = 1, BEAM_LOCAL_REC_BOARD = 2 };
/* While the member has boards, they are read this often and each one whose
 * counts changed goes up as a record (direct calls wake the member for
 * nothing else); a worker's last counts go up before its end does. */
#define BEAM_LOCAL_BOARDS_MS 20

typedef struct beam_localbatch_s {
    beam_node_t *node;
    beam_enc_t enc;      /* the local_batch message while n > 0 */
    size_t n, count_at;  /* records so far; where msgs' count lies in enc */
    uint64_t since;      /* loop time the first record was held */
    uv_prepare_t age;    /* before each wait: sends what is BEAM_SHORTCUT_HOLD_MS old */
    uv_timer_t quiet;    /* sends what is held after BEAM_LOCAL_QUIET_MS */
    uv_timer_t boards;   /* reads the boards every BEAM_LOCAL_BOARDS_MS while there are any */
} beam_localbatch_t;

/* b is the caller's (its handles are closed by beam_localbatch_reset once the
 * node is stopping; free b only after the loop has run them). */
void beam_localbatch_init(beam_localbatch_t *b, beam_node_t *node);
/* Starts a record [kind, vconn, frame]: the caller packs the frame (one bin)
 * with the packer returned, then calls beam_localbatch_done. */
msgpack_packer *beam_localbatch_start(beam_localbatch_t *b, int kind, uint32_t vconn);
/* The record is complete: held, or sent with the others when the batch is full. */
void beam_localbatch_done(beam_localbatch_t *b);
/* A frame body from local client vconn held as a BEAM_LOCAL_REC_FRAME
 * record: 0, or -EMSGSIZE (too large to hold: the caller forwards it, after
 * beam_localbatch_flush). */
int beam_localbatch_hold_frame(beam_localbatch_t *b, uint32_t vconn, const char *body, size_t len);
/* A board was adopted: the boards are read from now on. */
void beam_localbatch_boards_start(beam_localbatch_t *b);
/* Holds a record for each board whose counts changed since the last read
 * (a board's owner is a local client's port: the record names its number). */
void beam_localbatch_boards(beam_localbatch_t *b);
/* Sends what is held to the head as one local_batch (one frame, one
 * write). A batch that ran out of memory while it was built has lost
 * records of calls the member already ran: the link is closed then (the
 * head loses this node, which joins again), never a record dropped. */
void beam_localbatch_flush(beam_localbatch_t *b);
/* Drops what is held (the head is lost); closes the handles once the node
 * is stopping. */
void beam_localbatch_reset(beam_localbatch_t *b);

#endif
