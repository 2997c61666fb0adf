/* test_auth.c — the cluster's secret (src/auth.h) without a socket: the
 * handshake both ways, a wrong token, a replayed answer, sealed frames
 * altered, reordered, replayed or cut, and the token file (short, long,
 * bad hex, trailing blanks, the mode of a created one). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"

static const unsigned char token_a[BEAM_TOKEN_BYTES] = "beam-auth-test-token-aaaaaaaaaaa";
static const unsigned char token_b[BEAM_TOKEN_BYTES] = "beam-auth-test-token-bbbbbbbbbbb";

/* What goes over the wire in one handshake. */
typedef struct wire_s {
    unsigned char member_mac[BEAM_AUTH_MAC_BYTES], member_header[BEAM_AUTH_HEADER_BYTES];
    unsigned char head_mac[BEAM_AUTH_MAC_BYTES], head_header[BEAM_AUTH_HEADER_BYTES];
} wire_t;

/* A whole handshake; returns the head's verdict on the answer (and, when
 * that passes, the member's on auth_ok in *member_rc). */
static int handshake(beam_auth_t *head, const unsigned char *head_token, beam_auth_t *member,
                     const unsigned char *member_token, wire_t *w, int *member_rc)
{
    assert_int_equal(beam_auth_init(head, head_token, BEAM_AUTH_HEAD), 0);
    assert_int_equal(beam_auth_init(member, member_token, BEAM_AUTH_MEMBER), 0);
    assert_int_equal(beam_auth_answer(member, head->my_nonce, w->member_mac, w->member_header), 0);
    int rc = beam_auth_check_answer(head, member->my_nonce, w->member_mac, sizeof w->member_mac, w->member_header,
                                    sizeof w->member_header, w->head_mac, w->head_header);
    if (rc == 0)
        *member_rc = beam_auth_check_ok(member, w->head_mac, sizeof w->head_mac, w->head_header,
                                        sizeof w->head_header);
    return rc;
}

static void seal(beam_auth_t *a, const char *text, unsigned char *out, size_t *len)
{
    *len = strlen(text) + BEAM_AUTH_SEAL_BYTES;
    assert_int_equal(beam_auth_seal(a, (const unsigned char *)text, strlen(text), out), 0);
}

static int open_eq(beam_auth_t *a, const unsigned char *in, size_t len, const char *want)
{
    unsigned char out[256];
    size_t n = 0;
    int rc = beam_auth_open(a, in, len, out, &n);
    if (rc == 0) {
        assert_int_equal(n, strlen(want));
        assert_memory_equal(out, want, n);
    }
    return rc;
}

static void test_good_handshake_seals_both_ways(void **state)
{
    (void)state;
    beam_auth_t head, member;
    wire_t w;
    int mrc = -1;
    assert_int_equal(handshake(&head, token_a, &member, token_a, &w, &mrc), 0);
    assert_int_equal(mrc, 0);
    unsigned char buf[256];
    size_t len;
    seal(&member, "join", buf, &len);
    assert_int_equal(open_eq(&head, buf, len, "join"), 0);
    seal(&head, "welcome", buf, &len);
    assert_int_equal(open_eq(&member, buf, len, "welcome"), 0);
    /* each direction has its own key: a member's frame does not open as the head's */
    seal(&member, "again", buf, &len);
    assert_int_equal(open_eq(&member, buf, len, "again"), -EBADMSG);
    /* a second handshake with the same token gets other keys */
    beam_auth_t head2, member2;
    wire_t w2;
    assert_int_equal(handshake(&head2, token_a, &member2, token_a, &w2, &mrc), 0);
    assert_memory_not_equal(w.member_mac, w2.member_mac, sizeof w.member_mac);
    seal(&member2, "join", buf, &len);
    assert_int_equal(open_eq(&head, buf, len, "join"), -EBADMSG);
    beam_auth_clear(&head);
    beam_auth_clear(&member);
    beam_auth_clear(&head2);
    beam_auth_clear(&member2);
}

static void test_wrong_token_is_refused_both_ways(void **state)
{
    (void)state;
    beam_auth_t head, member;
    wire_t w;
    int mrc = 0;
    /* a member without the token */
    assert_int_equal(handshake(&head, token_a, &member, token_b, &w, &mrc), -EACCES);
    assert_int_equal(head.rx_on, 0);
    assert_int_equal(head.tx_on, 0);
    /* a head without the token: it cannot check the member, and a forged
     * auth_ok (made with another token) is refused by the member */
    beam_auth_t fake;
    assert_int_equal(beam_auth_init(&member, token_a, BEAM_AUTH_MEMBER), 0);
    assert_int_equal(beam_auth_init(&fake, token_a, BEAM_AUTH_HEAD), 0);
    assert_int_equal(beam_auth_answer(&member, fake.my_nonce, w.member_mac, w.member_header), 0);
    assert_int_equal(beam_auth_check_answer(&fake, member.my_nonce, w.member_mac, sizeof w.member_mac,
                                            w.member_header, sizeof w.member_header, w.head_mac, w.head_header),
                     0);
    beam_auth_t forger;
    assert_int_equal(beam_auth_init(&forger, token_b, BEAM_AUTH_HEAD), 0);
    memcpy(forger.my_nonce, fake.my_nonce, BEAM_AUTH_NONCE_BYTES);
    unsigned char forged[BEAM_AUTH_MAC_BYTES], header[BEAM_AUTH_HEADER_BYTES];
    /* the forger cannot check the answer, but makes its auth_ok all the same */
    assert_int_equal(beam_auth_check_answer(&forger, member.my_nonce, w.member_mac, sizeof w.member_mac,
                                            w.member_header, sizeof w.member_header, forged, header),
                     -EACCES);
    memset(forged, 0x5a, sizeof forged);
    assert_int_equal(beam_auth_check_ok(&member, forged, sizeof forged, w.head_header, sizeof w.head_header),
                     -EACCES);
    assert_int_equal(member.rx_on, 0);
    /* a mac of the wrong size is malformed, not checked */
    assert_int_equal(beam_auth_check_ok(&member, w.head_mac, sizeof w.head_mac - 1, w.head_header,
                                        sizeof w.head_header),
                     -EINVAL);
    assert_int_equal(beam_auth_check_ok(&member, w.head_mac, sizeof w.head_mac, w.head_header, 3), -EINVAL);
    /* the real auth_ok passes */
    assert_int_equal(beam_auth_check_ok(&member, w.head_mac, sizeof w.head_mac, w.head_header,
                                        sizeof w.head_header),
                     0);
}

static void test_replayed_answer_fails_a_new_challenge(void **state)
{
    (void)state;
    beam_auth_t head, member, head2;
    wire_t w;
    int mrc = -1;
    assert_int_equal(handshake(&head, token_a, &member, token_a, &w, &mrc), 0);
    /* an eavesdropper replays the member's auth to a new challenge */
    assert_int_equal(beam_auth_init(&head2, token_a, BEAM_AUTH_HEAD), 0);
    unsigned char mac[BEAM_AUTH_MAC_BYTES], header[BEAM_AUTH_HEADER_BYTES];
    assert_int_equal(beam_auth_check_answer(&head2, member.my_nonce, w.member_mac, sizeof w.member_mac,
                                            w.member_header, sizeof w.member_header, mac, header),
                     -EACCES);
    /* and a head's old auth_ok does not pass a member's new answer */
    beam_auth_t member2;
    assert_int_equal(beam_auth_init(&member2, token_a, BEAM_AUTH_MEMBER), 0);
    unsigned char m2[BEAM_AUTH_MAC_BYTES], h2[BEAM_AUTH_HEADER_BYTES];
    assert_int_equal(beam_auth_answer(&member2, head.my_nonce, m2, h2), 0);
    assert_int_equal(beam_auth_check_ok(&member2, w.head_mac, sizeof w.head_mac, w.head_header,
                                        sizeof w.head_header),
                     -EACCES);
    /* out of order: a head does not answer twice, a member not before its challenge */
    assert_int_equal(beam_auth_check_answer(&head, member.my_nonce, w.member_mac, sizeof w.member_mac,
                                            w.member_header, sizeof w.member_header, mac, header),
                     -EPROTO);
    beam_auth_t member3;
    assert_int_equal(beam_auth_init(&member3, token_a, BEAM_AUTH_MEMBER), 0);
    assert_int_equal(beam_auth_check_ok(&member3, w.head_mac, sizeof w.head_mac, w.head_header,
                                        sizeof w.head_header),
                     -EPROTO);
    unsigned char buf[64];
    assert_int_equal(beam_auth_seal(&member3, (const unsigned char *)"x", 1, buf), -EPERM);
}

static void test_altered_reordered_replayed_or_cut_frames_fail(void **state)
{
    (void)state;
    beam_auth_t head, member;
    wire_t w;
    int mrc = -1;
    unsigned char f1[64], f2[64], f3[64], f4[64];
    size_t l1, l2, l3, l4;
    /* altered: every byte of a sealed frame is covered */
    assert_int_equal(handshake(&head, token_a, &member, token_a, &w, &mrc), 0);
    seal(&member, "first", f1, &l1);
    for (size_t i = 0; i < l1; i++) {
        beam_auth_t h = head;
        f1[i] ^= 0x01;
        assert_int_equal(open_eq(&h, f1, l1, "first"), -EBADMSG);
        f1[i] ^= 0x01;
    }
    assert_int_equal(open_eq(&head, f1, l1, "first"), 0);
    /* replayed */
    assert_int_equal(open_eq(&head, f1, l1, "first"), -EBADMSG);
    /* reordered: the third before the second */
    seal(&member, "second", f2, &l2);
    seal(&member, "third", f3, &l3);
    beam_auth_t h = head;
    assert_int_equal(open_eq(&h, f3, l3, "third"), -EBADMSG);
    assert_int_equal(open_eq(&head, f2, l2, "second"), 0);
    assert_int_equal(open_eq(&head, f3, l3, "third"), 0);
    /* cut: short of its tag, or shorter than any sealed frame */
    seal(&member, "fourth", f4, &l4);
    h = head;
    assert_int_equal(open_eq(&h, f4, l4 - 1, "fourth"), -EBADMSG);
    assert_int_equal(open_eq(&h, f4, BEAM_AUTH_SEAL_BYTES - 1, ""), -EBADMSG);
    assert_int_equal(open_eq(&head, f4, l4, "fourth"), 0);
    /* an empty body seals and opens */
    seal(&member, "", f1, &l1);
    assert_int_equal(l1, BEAM_AUTH_SEAL_BYTES);
    assert_int_equal(open_eq(&head, f1, l1, ""), 0);
}

/* ---------- the token file ---------- */

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/beam-test-auth-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int read_text(const char *text, unsigned char *token)
{
    char path[128], err[256];
    snprintf(path, sizeof path, "%s/t", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return beam_token_read(path, token, err, sizeof err);
}

static void test_token_files(void **state)
{
    (void)state;
    unsigned char token[BEAM_TOKEN_BYTES], again[BEAM_TOKEN_BYTES];
    char path[128], err[256], hex[80];
    snprintf(path, sizeof path, "%s/cluster.token", dir);
    assert_int_equal(beam_token_create(path, token, err, sizeof err), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_size, 2 * BEAM_TOKEN_BYTES + 1);
    assert_int_equal(beam_token_read(path, again, err, sizeof err), 0);
    assert_memory_equal(token, again, sizeof token);
    /* a file made with a wider mode is narrowed when written again */
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(beam_token_create(path, token, err, sizeof err), 0);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* the exact form, with trailing blanks */
    for (int i = 0; i < BEAM_TOKEN_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", i);
    assert_int_equal(read_text(hex, token), 0);
    for (int i = 0; i < BEAM_TOKEN_BYTES; i++)
        assert_int_equal(token[i], i);
    char text[100];
    snprintf(text, sizeof text, "%s \n\n", hex);
    assert_int_equal(read_text(text, token), 0);
    /* short, long, bad hex, empty */
    snprintf(text, sizeof text, "%.*s", 2 * BEAM_TOKEN_BYTES - 1, hex);
    assert_int_equal(read_text(text, token), -EINVAL);
    snprintf(text, sizeof text, "%s0", hex);
    assert_int_equal(read_text(text, token), -EINVAL);
    snprintf(text, sizeof text, "%s00", hex);
    assert_int_equal(read_text(text, token), -EINVAL);
    snprintf(text, sizeof text, "%s", hex);
    text[10] = 'g';
    assert_int_equal(read_text(text, token), -EINVAL);
    assert_int_equal(read_text("", token), -EINVAL);
    /* missing; a folder that is not there */
    snprintf(path, sizeof path, "%s/none", dir);
    assert_int_equal(beam_token_read(path, token, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, path));
    snprintf(path, sizeof path, "%s/no/such/t", dir);
    assert_int_equal(beam_token_create(path, token, err, sizeof err), -ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_handshake_seals_both_ways),
        cmocka_unit_test(test_wrong_token_is_refused_both_ways),
        cmocka_unit_test(test_replayed_answer_fails_a_new_challenge),
        cmocka_unit_test(test_altered_reordered_replayed_or_cut_frames_fail),
        cmocka_unit_test_setup_teardown(test_token_files, make_dir, remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
