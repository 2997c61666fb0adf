/* heartbeat.h — a link's liveness, with no I/O: when it was born and last
 * heard from, and what its timer should do at each tick (docs/PROTOCOL.md,
 * "The cluster link": a handshake must end within
 * BEAM_HANDSHAKE_TIMEOUT_MS; then a heartbeat each heartbeat_ms, and a peer
 * silent for timeout_ms is dead). The link (link.h) owns the timer and
 * sends the heartbeat; this says when. */
#ifndef BEAM_HEARTBEAT_H
#define BEAM_HEARTBEAT_H

#include <stdint.h>

#define BEAM_HANDSHAKE_TIMEOUT_MS 5000

typedef struct beam_heartbeat_s {
    uint64_t born_ms, last_rx_ms;
    uint64_t tick_ms; /* the last tick's time */
    uint64_t every_ms, timeout_ms;
} beam_heartbeat_t;

/* What a tick asks of the link. */
typedef enum {
    BEAM_BEAT_WAIT,           /* nothing yet */
    BEAM_BEAT_SEND,           /* send a heartbeat */
    BEAM_BEAT_HANDSHAKE_LATE, /* close: "the handshake took too long" */
    BEAM_BEAT_SILENT,         /* close: "no heartbeat within the timeout" */
} beam_beat_t;

/* A link born at now_ms (loop time), beating every every_ms once up. */
void beam_heartbeat_init(beam_heartbeat_t *hb, uint64_t now_ms, uint64_t every_ms, uint64_t timeout_ms);
/* Something arrived from the peer at now_ms. */
void beam_heartbeat_heard(beam_heartbeat_t *hb, uint64_t now_ms);
/* The timer's period: within a second while the handshake is under way
 * (its timeout is kept to that), every_ms once up. */
uint64_t beam_heartbeat_period(const beam_heartbeat_t *hb, int up);
/* The tick at now_ms of a link up or not (still in its handshake). Silence
 * is judged by a loop that ran: a tick that comes a whole beat late (this
 * daemon was itself stopped or starved, and what the peer sent meanwhile
 * still waits unread, as timers run before a turn's reads) only beats; the
 * next tick judges. */
beam_beat_t beam_heartbeat_tick(beam_heartbeat_t *hb, uint64_t now_ms, int up);

#endif
