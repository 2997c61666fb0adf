/* test_dsock.c — a direct-call socket's bytes (src/pybeam/dsock.h) over a
 * socketpair, with no Python: frames fed whole, byte by byte and split at
 * every offset; a bad header, an oversized one and a frame that is not a
 * push end it for good (sticky); what came before the peer's end is still
 * delivered; a frame larger than the socket takes is kept and written
 * whole as the peer reads; a write to a gone peer drops it; a long wait
 * with wake_early set is a blocking read that a frame, the receive timeout
 * or the peer's end ends, and a blocking socket's writes never block. The Python
 * side is tested end to end (tests/python/test_direct_calls.py). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dsock.h"

typedef struct fixture_s {
    pb_dsock_t s;
    int peer;
} fixture_t;

static int setup(void **state)
{
    int sv[2];
    fixture_t *f = calloc(1, sizeof *f);
    if (!f || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0 || pb_dsock_init(&f->s, sv[0]) < 0)
        return -1;
    f->peer = sv[1];
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    pb_dsock_destroy(&f->s);
    if (f->peer >= 0)
        close(f->peer);
    free(f);
    return 0;
}

/* [2, "result", {"obj": obj, "status": status}] as a whole frame. */
static char *push_frame(const char *obj, int status, size_t *len)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "result", 2);
    beam_pack_key(&enc.pk, "obj");
    beam_pack_bin(&enc.pk, obj, strlen(obj));
    beam_pack_key(&enc.pk, "status");
    msgpack_pack_int(&enc.pk, status);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    char *p = beam_enc_take(&enc, len);
    beam_enc_destroy(&enc);
    return p;
}

static void write_peer(fixture_t *f, const char *p, size_t n)
{
    assert_int_equal(write(f->peer, p, n), (ssize_t)n);
}

static int count(pb_dframe_t *h)
{
    int n = 0;
    for (; h; h = h->next)
        n++;
    return n;
}

static int status_of(pb_dframe_t *g)
{
    const msgpack_object *m = &g->frame->msg.params;
    int64_t v = -1;
    assert_int_equal(beam_field_int(m, "status", &v), 0);
    return (int)v;
}

static void frames_split_at_every_offset(void **state)
{
    fixture_t *f = *state;
    size_t a_len, b_len;
    char *a = push_frame("a", 1, &a_len), *b = push_frame("b", 2, &b_len);
    size_t n = a_len + b_len;
    char *both = malloc(n);
    memcpy(both, a, a_len);
    memcpy(both + a_len, b, b_len);
    for (size_t cut = 0; cut <= n; cut++) {
        pb_dframe_t *head = NULL;
        write_peer(f, both, cut);
        assert_int_equal(pb_dsock_pump(&f->s, 0, &head), 0);
        assert_int_equal(count(head), cut >= n ? 2 : cut >= a_len ? 1 : 0);
        write_peer(f, both + cut, n - cut);
        while (count(head) < 2)
            assert_int_equal(pb_dsock_pump(&f->s, 1000, &head), 0);
        assert_int_equal(count(head), 2);
        assert_true(beam_str_eq(head->frame->msg.op, head->frame->msg.op_len, "result"));
        assert_int_equal(status_of(head), 1);
        assert_int_equal(status_of(head->next), 2);
        pb_dframes_free(head);
    }
    assert_false(f->s.ended);
    free(a);
    free(b);
    free(both);
}

static void frames_byte_by_byte(void **state)
{
    fixture_t *f = *state;
    size_t len;
    char *a = push_frame("byte", 7, &len);
    pb_dframe_t *head = NULL;
    for (size_t i = 0; i < len; i++) {
        assert_null(head);
        write_peer(f, a + i, 1);
        assert_int_equal(pb_dsock_pump(&f->s, 0, &head), 0);
    }
    assert_int_equal(count(head), 1);
    assert_int_equal(status_of(head), 7);
    pb_dframes_free(head);
    free(a);
}

static void timeout_without_frames(void **state)
{
    fixture_t *f = *state;
    pb_dframe_t *head = NULL;
    assert_int_equal(pb_dsock_pump(&f->s, 5, &head), 0);
    assert_null(head);
    assert_false(f->s.ended);
}

typedef struct later_s {
    int fd;
    const char *bytes;
    size_t len;
} later_t;

/* Writes its bytes 50 ms after it starts, then closes nothing. */
static void *write_later(void *arg)
{
    later_t *l = arg;
    usleep(50 * 1000);
    assert_int_equal(write(l->fd, l->bytes, l->len), (ssize_t)l->len);
    return NULL;
}

/* The early wake's wait: a blocking read (no poll) returns the frame that
 * came while it waited, with nothing left unread. */
static void blocking_wait_reads_what_comes(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(pb_dsock_set_rcvtimeo(&f->s, 5000), 0);
    f->s.wake_early = 1;
    size_t len;
    char *a = push_frame("later", 3, &len);
    later_t l = {f->peer, a, len};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, write_later, &l), 0);
    pb_dframe_t *head = NULL;
    assert_int_equal(pb_dsock_pump(&f->s, -1, &head), 0);
    pthread_join(t, NULL);
    assert_int_equal(count(head), 1);
    assert_int_equal(status_of(head), 3);
    assert_false(f->s.ended);
    pb_dframes_free(head);
    free(a);
}

/* Its receive timeout ends a blocking wait with nothing and the socket
 * still open: the slice after which the caller runs signal handlers. */
static void blocking_wait_ends_at_the_receive_timeout(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(pb_dsock_set_rcvtimeo(&f->s, 20), 0);
    f->s.wake_early = 1;
    pb_dframe_t *head = NULL;
    assert_int_equal(pb_dsock_pump(&f->s, -1, &head), 0);
    assert_null(head);
    assert_false(f->s.ended);
    assert_int_equal(pb_dsock_pump(&f->s, 20, &head), 0); /* a wait as long as the timeout: the same */
    assert_null(head);
    assert_false(f->s.ended);
}

/* The peer's end ends a blocking wait, and the socket counts as ended. */
static void blocking_wait_ends_at_the_peer_end(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(pb_dsock_set_rcvtimeo(&f->s, 5000), 0);
    f->s.wake_early = 1;
    close(f->peer);
    f->peer = -1;
    pb_dframe_t *head = NULL;
    assert_int_equal(pb_dsock_pump(&f->s, -1, &head), 0);
    assert_null(head);
    assert_true(f->s.ended);
}

/* Feeds bad bytes after a good frame: the good one comes, then the socket
 * ends, and a good frame after that is never read. */
static void bad_input_is_sticky(fixture_t *f, const char *bad, size_t bad_len)
{
    size_t len;
    char *a = push_frame("ok", 0, &len);
    write_peer(f, a, len);
    write_peer(f, bad, bad_len);
    pb_dframe_t *head = NULL;
    assert_int_equal(pb_dsock_pump(&f->s, 1000, &head), 0);
    while (!f->s.ended)
        assert_int_equal(pb_dsock_pump(&f->s, 1000, &head), 0);
    assert_int_equal(count(head), 1);
    write_peer(f, a, len);
    assert_int_equal(pb_dsock_pump(&f->s, 10, &head), 0);
    assert_int_equal(count(head), 1);
    pb_dframes_free(head);
    free(a);
}

static void zero_length_frame_ends_it(void **state)
{
    static const char zero[4] = {0, 0, 0, 0};
    bad_input_is_sticky(*state, zero, sizeof zero);
}

static void oversized_frame_ends_it_before_allocating(void **state)
{
    char huge[4];
    beam_put_u32be(huge, BEAM_DEFAULT_MAX_FRAME + 1);
    bad_input_is_sticky(*state, huge, sizeof huge);
}

static void garbage_body_ends_it(void **state)
{
    static const char garbage[] = {0, 0, 0, 3, (char)0xc1, (char)0xc1, (char)0xc1};
    bad_input_is_sticky(*state, garbage, sizeof garbage);
}

static void a_request_is_not_a_push(void **state)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_request(&enc, 1, "call", 0);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    size_t len;
    char *p = beam_enc_take(&enc, &len);
    bad_input_is_sticky(*state, p, len);
    free(p);
    beam_enc_destroy(&enc);
}

static void frames_before_the_end_are_delivered(void **state)
{
    fixture_t *f = *state;
    size_t len;
    char *a = push_frame("last", 3, &len);
    write_peer(f, a, len);
    close(f->peer);
    f->peer = -1;
    pb_dframe_t *head = NULL;
    while (!head && !f->s.ended)
        assert_int_equal(pb_dsock_pump(&f->s, 1000, &head), 0);
    assert_int_equal(count(head), 1);
    assert_int_equal(status_of(head), 3);
    while (!f->s.ended)
        assert_int_equal(pb_dsock_pump(&f->s, 1000, &head), 0);
    assert_int_equal(count(head), 1);
    pb_dframes_free(head);
    free(a);
}

static void a_large_frame_is_kept_and_written_whole(void **state)
{
    fixture_t *f = *state;
    int small = 4096;
    setsockopt(f->s.fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    size_t n = 1 << 20;
    char *big = malloc(n);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)(i * 7);
    struct iovec iov[2] = {{big, n / 2}, {big + n / 2, n / 2}};
    assert_int_equal(pb_dsock_write(&f->s, iov, 2), 0);
    assert_true(pb_dsock_unwritten(&f->s) > 0);
    /* a second write queues behind the first, in order */
    struct iovec tail = {"END", 3};
    assert_int_equal(pb_dsock_write(&f->s, &tail, 1), 0);
    char *got = malloc(n + 3);
    size_t have = 0;
    while (have < n + 3) {
        ssize_t r = recv(f->peer, got + have, n + 3 - have, MSG_DONTWAIT);
        if (r > 0)
            have += (size_t)r;
        pb_dframe_t *head = NULL;
        assert_int_equal(pb_dsock_pump(&f->s, 0, &head), 0); /* writes as the socket takes */
        assert_null(head);
    }
    assert_memory_equal(got, big, n);
    assert_memory_equal(got + n, "END", 3);
    assert_int_equal(pb_dsock_unwritten(&f->s), 0);
    assert_int_equal(pb_dsock_flush(&f->s), 0);
    free(big);
    free(got);
}

static void a_write_to_a_gone_peer_is_dropped(void **state)
{
    fixture_t *f = *state;
    close(f->peer);
    f->peer = -1;
    struct iovec iov = {"x", 1};
    assert_int_equal(pb_dsock_write(&f->s, &iov, 1), 0);
    assert_int_equal(pb_dsock_unwritten(&f->s), 0);
    pb_dframe_t *head = NULL;
    while (!f->s.ended)
        assert_int_equal(pb_dsock_pump(&f->s, 1000, &head), 0);
    assert_null(head);
}

static void closed_socket_reads_nothing(void **state)
{
    fixture_t *f = *state;
    pb_dsock_close(&f->s);
    pb_dframe_t *head = NULL;
    assert_int_equal(pb_dsock_pump(&f->s, 0, &head), 0);
    assert_null(head);
    assert_true(f->s.ended);
    struct iovec iov = {"x", 1};
    assert_int_equal(pb_dsock_write(&f->s, &iov, 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(frames_split_at_every_offset, setup, teardown),
        cmocka_unit_test_setup_teardown(frames_byte_by_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(timeout_without_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(blocking_wait_reads_what_comes, setup, teardown),
        cmocka_unit_test_setup_teardown(blocking_wait_ends_at_the_receive_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(blocking_wait_ends_at_the_peer_end, setup, teardown),
        cmocka_unit_test_setup_teardown(zero_length_frame_ends_it, setup, teardown),
        cmocka_unit_test_setup_teardown(oversized_frame_ends_it_before_allocating, setup, teardown),
        cmocka_unit_test_setup_teardown(garbage_body_ends_it, setup, teardown),
        cmocka_unit_test_setup_teardown(a_request_is_not_a_push, setup, teardown),
        cmocka_unit_test_setup_teardown(frames_before_the_end_are_delivered, setup, teardown),
        cmocka_unit_test_setup_teardown(a_large_frame_is_kept_and_written_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(a_write_to_a_gone_peer_is_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(closed_socket_reads_nothing, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
