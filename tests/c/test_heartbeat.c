/* test_heartbeat.c — a link's liveness (src/heartbeat.h), by the clock
 * alone: the handshake's pace and deadline, then a heartbeat each tick and
 * a peer silent past the timeout found dead. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "heartbeat.h"

static void test_handshake_deadline(void **state)
{
    (void)state;
    beam_heartbeat_t hb;
    beam_heartbeat_init(&hb, 1000, 2500, 10000);
    assert_int_equal(beam_heartbeat_period(&hb, 0), 1000); /* within a second while greeting */
    assert_int_equal(beam_heartbeat_tick(&hb, 1000 + BEAM_HANDSHAKE_TIMEOUT_MS - 1, 0), BEAM_BEAT_WAIT);
    assert_int_equal(beam_heartbeat_tick(&hb, 1000 + BEAM_HANDSHAKE_TIMEOUT_MS, 0), BEAM_BEAT_HANDSHAKE_LATE);
    beam_heartbeat_heard(&hb, 5000); /* hearing from it does not extend the handshake */
    assert_int_equal(beam_heartbeat_tick(&hb, 1000 + BEAM_HANDSHAKE_TIMEOUT_MS, 0), BEAM_BEAT_HANDSHAKE_LATE);
    beam_heartbeat_init(&hb, 0, 200, 800);
    assert_int_equal(beam_heartbeat_period(&hb, 0), 200); /* a fast heartbeat keeps its own pace */
}

static void test_beats_and_silence(void **state)
{
    (void)state;
    beam_heartbeat_t hb;
    beam_heartbeat_init(&hb, 0, 2500, 10000);
    assert_int_equal(beam_heartbeat_period(&hb, 1), 2500);
    for (uint64_t t = 2500; t <= 10000; t += 2500) /* silent exactly the timeout: not yet */
        assert_int_equal(beam_heartbeat_tick(&hb, t, 1), BEAM_BEAT_SEND);
    assert_int_equal(beam_heartbeat_tick(&hb, 10001, 1), BEAM_BEAT_SILENT);
    beam_heartbeat_heard(&hb, 9000);
    assert_int_equal(beam_heartbeat_tick(&hb, 10001, 1), BEAM_BEAT_SEND);
    for (uint64_t t = 12500; t <= 17500; t += 2500)
        assert_int_equal(beam_heartbeat_tick(&hb, t, 1), BEAM_BEAT_SEND);
    assert_int_equal(beam_heartbeat_tick(&hb, 19001, 1), BEAM_BEAT_SILENT);
}

/* A tick a whole beat late: this daemon's loop was stopped or starved, and
 * what the peer sent meanwhile waits unread: it beats and judges nothing;
 * the next tick on pace judges. */
static void test_a_late_tick_judges_nothing(void **state)
{
    (void)state;
    beam_heartbeat_t hb;
    beam_heartbeat_init(&hb, 0, 500, 2000);
    assert_int_equal(beam_heartbeat_tick(&hb, 500, 1), BEAM_BEAT_SEND);
    assert_int_equal(beam_heartbeat_tick(&hb, 2600, 1), BEAM_BEAT_SEND); /* stalled 2.1 s: silent past 2 s */
    assert_int_equal(beam_heartbeat_tick(&hb, 3100, 1), BEAM_BEAT_SILENT); /* on pace: judged */
    beam_heartbeat_init(&hb, 0, 500, 2000);
    assert_int_equal(beam_heartbeat_tick(&hb, 500, 1), BEAM_BEAT_SEND);
    assert_int_equal(beam_heartbeat_tick(&hb, 2600, 1), BEAM_BEAT_SEND);
    beam_heartbeat_heard(&hb, 2601); /* the turn's reads: the peer was there */
    assert_int_equal(beam_heartbeat_tick(&hb, 3100, 1), BEAM_BEAT_SEND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_deadline),
        cmocka_unit_test(test_beats_and_silence),
        cmocka_unit_test(test_a_late_tick_judges_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
