/* heartbeat.c — a link's liveness, no I/O (heartbeat.h). */
#include "heartbeat.h"

void beam_heartbeat_init(beam_heartbeat_t *hb, uint64_t now_ms, uint64_t every_ms, uint64_t timeout_ms)
{
    hb->born_ms = hb->last_rx_ms = hb->tick_ms = now_ms;
    hb->every_ms = every_ms;
    hb->timeout_ms = timeout_ms;
}

void beam_heartbeat_heard(beam_heartbeat_t *hb, uint64_t now_ms)
{
    hb->last_rx_ms = now_ms;
}

uint64_t beam_heartbeat_period(const beam_heartbeat_t *hb, int up)
{
    return up || hb->every_ms < 1000 ? hb->every_ms : 1000;
}

beam_beat_t beam_heartbeat_tick(beam_heartbeat_t *hb, uint64_t now_ms, int up)
{
    uint64_t since = now_ms - hb->tick_ms; /* the pace is every_ms at most */
    hb->tick_ms = now_ms;
    if (!up)
        return now_ms - hb->born_ms >= BEAM_HANDSHAKE_TIMEOUT_MS ? BEAM_BEAT_HANDSHAKE_LATE : BEAM_BEAT_WAIT;
    if (since <= 2 * hb->every_ms && now_ms - hb->last_rx_ms > hb->timeout_ms)
        return BEAM_BEAT_SILENT;
    return BEAM_BEAT_SEND;
}
