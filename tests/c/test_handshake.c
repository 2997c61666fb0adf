/* test_handshake.c — one link's handshake and sealing (src/handshake.h)
 * with no socket: a head and a member side pass their messages to each
 * other through the codec; both end sealed, and what one seals the other
 * opens, in order only. A wrong token, a message out of place or one
 * without its stream header ends the handshake with the reason the link
 * logs; a forged, replayed or cut frame does not open. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "handshake.h"

static const unsigned char token[BEAM_TOKEN_BYTES] = "beam-hs-test-token-32-bytes-ok!!";
static const unsigned char wrong[BEAM_TOKEN_BYTES] = "beam-hs-test-token-32-bytes-no!!";

/* enc's one frame parsed into m (its bytes into *keep, which the caller frees). */
static void parse(beam_enc_t *enc, beam_msg_t *m, char **keep)
{
    size_t n;
    char err[160];
    beam_limits_t lim;
    beam_limits_default(&lim);
    *keep = beam_enc_take(enc, &n);
    beam_enc_destroy(enc);
    assert_non_null(*keep);
    assert_int_equal(beam_msg_parse(*keep + BEAM_FRAME_HEADER, n - BEAM_FRAME_HEADER, &lim, m, err, sizeof err), 0);
}

/* Hands the message in enc to hs: its verdict, its answer (if any) in out. */
static int hand(beam_handshake_t *hs, beam_enc_t *enc, beam_enc_t *out, int *answer, const char **why)
{
    beam_msg_t m;
    char *keep;
    parse(enc, &m, &keep);
    int rc = beam_handshake_take(hs, &m, out, answer, why);
    beam_msg_destroy(&m);
    free(keep);
    return rc;
}

static void setup_pair(beam_handshake_t *head, beam_handshake_t *member, const unsigned char *member_token)
{
    assert_int_equal(sodium_init() >= 0, 1);
    assert_int_equal(beam_handshake_init(head, token, BEAM_AUTH_HEAD), 0);
    assert_int_equal(beam_handshake_init(member, member_token, BEAM_AUTH_MEMBER), 0);
}

/* The whole exchange: challenge, auth, auth_ok; 0, or the first refusal. */
static int run(beam_handshake_t *head, beam_handshake_t *member, const char **why)
{
    beam_enc_t msg, answer, ok;
    int has;
    beam_handshake_challenge(head, &msg);
    int rc = hand(member, &msg, &answer, &has, why);
    if (rc < 0)
        return rc;
    assert_true(has);
    assert_int_equal(member->state, BEAM_HS_WAIT_AUTH_OK);
    rc = hand(head, &answer, &ok, &has, why);
    if (rc < 0)
        return rc;
    assert_true(has && beam_handshake_done(head));
    rc = hand(member, &ok, &answer, &has, why);
    if (rc == 0)
        assert_true(!has && beam_handshake_done(member));
    return rc;
}

/* A frame (header and body) of body bytes, malloc'd. */
static char *frame_of(const char *body, size_t n)
{
    char *f = malloc(BEAM_FRAME_HEADER + n);
    beam_put_u32be(f, (uint32_t)n);
    memcpy(f + BEAM_FRAME_HEADER, body, n);
    return f;
}

static void test_through_and_sealed(void **state)
{
    (void)state;
    beam_handshake_t head, member;
    const char *why = NULL;
    setup_pair(&head, &member, token);
    assert_int_equal(run(&head, &member, &why), 0);
    /* both ways: what one seals the other opens, in order */
    for (int dir = 0; dir < 2; dir++) {
        beam_handshake_t *tx = dir ? &head : &member, *rx = dir ? &member : &head;
        size_t n1, n2, plen;
        char *s1 = beam_handshake_seal(tx, frame_of("first", 5), BEAM_FRAME_HEADER + 5, &n1);
        char *s2 = beam_handshake_seal(tx, frame_of("second", 6), BEAM_FRAME_HEADER + 6, &n2);
        assert_non_null(s1);
        assert_int_equal(n1, BEAM_FRAME_HEADER + 5 + BEAM_AUTH_SEAL_BYTES);
        unsigned char *plain;
        /* out of order: the second before the first does not open */
        assert_int_equal(beam_handshake_open(rx, s2 + 4, n2 - 4, &plain, &plen), -EBADMSG);
        assert_int_equal(beam_handshake_open(rx, s1 + 4, n1 - 4, &plain, &plen), 0);
        assert_int_equal(plen, 5);
        assert_memory_equal(plain, "first", 5);
        free(plain);
        assert_int_equal(beam_handshake_open(rx, s2 + 4, n2 - 4, &plain, &plen), 0);
        assert_memory_equal(plain, "second", 6);
        free(plain);
        free(s2);
        free(s1);
    }
    beam_handshake_clear(&head);
    beam_handshake_clear(&member);
}

static void test_in_order_round_trip(void **state)
{
    (void)state;
    beam_handshake_t head, member;
    const char *why = NULL;
    setup_pair(&head, &member, token);
    assert_int_equal(run(&head, &member, &why), 0);
    size_t n, plen;
    unsigned char *plain;
    for (int i = 0; i < 3; i++) {
        char *s = beam_handshake_seal(&member, frame_of("hello", 5), BEAM_FRAME_HEADER + 5, &n);
        assert_int_equal(beam_handshake_open(&head, s + 4, n - 4, &plain, &plen), 0);
        assert_int_equal(plen, 5);
        assert_memory_equal(plain, "hello", 5);
        free(plain);
        /* the same frame again is a replay */
        assert_int_equal(beam_handshake_open(&head, s + 4, n - 4, &plain, &plen), -EBADMSG);
        free(s);
        /* which does not stop the next one in order (the link closes on the first) */
    }
    /* cut and altered frames */
    char *s = beam_handshake_seal(&head, frame_of("down", 4), BEAM_FRAME_HEADER + 4, &n);
    assert_int_equal(beam_handshake_open(&member, s + 4, 3, &plain, &plen), -EBADMSG);
    s[n - 1] ^= 1;
    assert_int_equal(beam_handshake_open(&member, s + 4, n - 4, &plain, &plen), -EBADMSG);
    free(s);
    beam_handshake_clear(&head);
    beam_handshake_clear(&member);
}

/* Before the handshake nothing is sealed: frames pass as they are. */
static void test_clear_before(void **state)
{
    (void)state;
    beam_handshake_t head, member;
    setup_pair(&head, &member, token);
    size_t n, plen;
    unsigned char *plain = (unsigned char *)"x";
    char *f = frame_of("abc", 3), *s = beam_handshake_seal(&head, f, BEAM_FRAME_HEADER + 3, &n);
    assert_ptr_equal(s, f);
    assert_int_equal(n, BEAM_FRAME_HEADER + 3);
    assert_int_equal(beam_handshake_open(&member, s + 4, 3, &plain, &plen), 0);
    assert_null(plain);
    free(s);
    beam_handshake_clear(&head);
    beam_handshake_clear(&member);
}

static void test_wrong_token(void **state)
{
    (void)state;
    beam_handshake_t head, member;
    const char *why = NULL;
    setup_pair(&head, &member, wrong);
    assert_int_equal(run(&head, &member, &why), -EACCES);
    assert_string_equal(why, "authentication failed");
    assert_false(beam_handshake_done(&head));
    beam_handshake_clear(&head);
    beam_handshake_clear(&member);
}

/* A member that gets anything but a challenge first, and a head that gets
 * anything but an auth, refuse it. */
static void test_out_of_place(void **state)
{
    (void)state;
    beam_handshake_t head, member;
    beam_enc_t enc, out;
    const char *why = NULL;
    int has;
    setup_pair(&head, &member, token);
    beam_enc_init(&enc);
    beam_enc_push(&enc, "join", 0);
    beam_enc_end(&enc, 0);
    assert_int_equal(hand(&member, &enc, &out, &has, &why), -EPROTO);
    assert_string_equal(why, "expected a challenge from the head");
    assert_false(has);
    beam_enc_init(&enc);
    beam_enc_push(&enc, "challenge", 0);
    beam_enc_end(&enc, 0);
    assert_int_equal(hand(&head, &enc, &out, &has, &why), -EACCES);
    beam_handshake_clear(&head);
    beam_handshake_clear(&member);
}

/* An auth with the right MAC but no stream header. */
static void test_auth_without_stream(void **state)
{
    (void)state;
    beam_handshake_t head, member;
    beam_enc_t msg, answer, out;
    const char *why = NULL;
    int has;
    beam_msg_t m;
    char *keep;
    setup_pair(&head, &member, token);
    beam_handshake_challenge(&head, &msg);
    assert_int_equal(hand(&member, &msg, &answer, &has, &why), 0);
    parse(&answer, &m, &keep);
    /* the same auth, its stream left out */
    const char *nonce, *mac;
    uint32_t nl, ml;
    assert_int_equal(beam_field_bin(&m.params, "nonce", &nonce, &nl), 0);
    assert_int_equal(beam_field_bin(&m.params, "mac", &mac, &ml), 0);
    beam_enc_init(&msg);
    beam_enc_push(&msg, "auth", 2);
    beam_pack_key(&msg.pk, "nonce");
    beam_pack_bin(&msg.pk, nonce, nl);
    beam_pack_key(&msg.pk, "mac");
    beam_pack_bin(&msg.pk, mac, ml);
    beam_enc_end(&msg, 0);
    beam_msg_destroy(&m);
    free(keep);
    assert_int_equal(hand(&head, &msg, &out, &has, &why), -EPROTO);
    assert_string_equal(why, "auth without a stream header");
    beam_handshake_clear(&head);
    beam_handshake_clear(&member);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_through_and_sealed),  cmocka_unit_test(test_in_order_round_trip),
        cmocka_unit_test(test_clear_before),        cmocka_unit_test(test_wrong_token),
        cmocka_unit_test(test_out_of_place),        cmocka_unit_test(test_auth_without_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
