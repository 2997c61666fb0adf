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
    assert_int_equal(beam_heartbeat_tick(&hb, 2500, 1), BEAM_BEAT_SEND);
    assert_int_equal(beam_heartbeat_tick(&hb, 10000, 1), BEAM_BEAT_SEND); /* silent exactly the timeout: not yet */
    assert_int_equal(beam_heartbeat_tick(&hb, 10001, 1), BEAM_BEAT_SILENT);
    beam_heartbeat_heard(&hb, 9000);
    assert_int_equal(beam_heartbeat_tick(&hb, 10001, 1), BEAM_BEAT_SEND);
    assert_int_equal(beam_heartbeat_tick(&hb, 19001, 1), BEAM_BEAT_SILENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_deadline),
        cmocka_unit_test(test_beats_and_silence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
