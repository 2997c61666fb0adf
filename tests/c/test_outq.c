/* test_outq.c — the write queue (src/outq.h) on one end of a socketpair, the
 * test reading the other: small messages coalesce into one block and one
 * write, a large one keeps its own buffer, a span is written from the
 * buffer that holds it and its reference is dropped in the write callback,
 * the cost counts what is held (span bytes included) against the caps, and
 * a failed write is reported with its status, on a later turn of the loop.
 * What the socket takes at once is written without a request (in whole or in
 * part: the rest goes through one), a full socket is no error. */
#define _GNU_SOURCE /* memmem */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "outq.h"

typedef struct fixture_s {
    uv_loop_t loop;
    uv_pipe_t pipe;
    int peer;
    beam_outq_t q;
    size_t soft, max;
    int written, last_status;
} fixture_t;

static void on_written(beam_outq_t *q, int status)
{
    fixture_t *f = q->data;
    f->written++;
    f->last_status = status;
    if (status == 0)
        assert_int_equal(beam_outq_flush(q), 0);
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    int sv[2];
    if (!f || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    uv_loop_init(&f->loop);
    uv_pipe_init(&f->loop, &f->pipe, 0);
    if (uv_pipe_open(&f->pipe, sv[0]) != 0)
        return -1;
    f->peer = sv[1];
    fcntl(f->peer, F_SETFL, fcntl(f->peer, F_GETFL) | O_NONBLOCK);
    f->soft = 1u << 20;
    f->max = 8u << 20;
    beam_outq_init(&f->q, (uv_stream_t *)&f->pipe, &f->soft, &f->max, on_written, f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    if (!uv_is_closing((uv_handle_t *)&f->pipe))
        uv_close((uv_handle_t *)&f->pipe, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT); /* pending writes end with UV_ECANCELED */
    beam_outq_destroy(&f->q);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    if (f->peer >= 0)
        close(f->peer);
    free(f);
    return 0;
}

/* Runs the loop and reads the peer until want bytes came (into out). */
static void drain(fixture_t *f, char *out, size_t want)
{
    size_t got = 0;
    for (int i = 0; i < 100000 && got < want; i++) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        ssize_t n = read(f->peer, out + got, want - got);
        if (n > 0)
            got += (size_t)n;
        else
            assert_true(n < 0 && errno == EAGAIN);
    }
    assert_int_equal(got, want);
    uv_run(&f->loop, UV_RUN_NOWAIT);
}

static char *dup_mem(const char *s, size_t n)
{
    char *p = malloc(n);
    assert_non_null(p);
    memcpy(p, s, n);
    return p;
}

static void test_small_messages_coalesce(void **state)
{
    fixture_t *f = *state;
    for (int i = 0; i < 100; i++)
        assert_int_equal(beam_outq_push(&f->q, dup_mem("0123456789", 10), 10), BEAM_OUTQ_OK);
    /* 1,000 bytes in one block: about what they hold, not 100 buffers */
    assert_non_null(f->q.head);
    assert_ptr_equal(f->q.head, f->q.tail);
    assert_true(f->q.cost < 1200 + 200);
    assert_int_equal(beam_outq_flush(&f->q), 0);
    char out[1000];
    drain(f, out, sizeof out);
    for (int i = 0; i < 100; i++)
        assert_memory_equal(out + 10 * i, "0123456789", 10);
    assert_int_equal(f->written, 1); /* one write */
    assert_int_equal(f->last_status, 0);
    assert_int_equal(f->q.cost, 0);
}

/* A span is written from its buffer, between the bytes around it, and the
 * buffer's reference is held until the write is done. */
static void test_span_written_in_place(void **state)
{
    fixture_t *f = *state;
    size_t n = 3u << 20;
    beam_buf_t *b = beam_buf_new(n);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++)
        b->data[i] = (char)(i * 13);
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "call", 1);
    beam_pack_key(&enc.pk, "args");
    beam_pack_bin_buf(&enc, b, b->data, n);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    /* what the same frame is when copied */
    beam_enc_t flat;
    beam_enc_init(&flat);
    beam_enc_push(&flat, "call", 1);
    beam_pack_key(&flat.pk, "args");
    beam_pack_bin(&flat.pk, b->data, n);
    assert_int_equal(beam_enc_end(&flat, 0), 0);
    size_t want_len;
    char *want = beam_enc_take(&flat, &want_len);
    beam_enc_destroy(&flat);

    assert_int_equal(beam_outq_push_enc(&f->q, &enc), BEAM_OUTQ_SOFT); /* 3 MiB > 1 MiB soft */
    assert_int_equal(b->refs, 2);
    assert_true(f->q.cost >= n); /* the span's bytes are counted */
    assert_true(f->q.cost < n + 4096);
    beam_buf_unref(b); /* the owner lets go: the queue keeps it alive */
    assert_int_equal(beam_outq_flush(&f->q), 0);
    char *out = malloc(want_len);
    assert_non_null(out);
    drain(f, out, want_len);
    assert_memory_equal(out, want, want_len);
    assert_int_equal(f->q.cost, 0);
    assert_int_equal(f->q.spanned, 0);
    free(out);
    free(want);
}

static void test_caps(void **state)
{
    fixture_t *f = *state;
    f->max = 100u << 10;
    f->soft = 50u << 10;
    char *big = malloc(60u << 10);
    assert_non_null(big);
    memset(big, 'b', 60u << 10);
    assert_int_equal(beam_outq_push(&f->q, big, 60u << 10), BEAM_OUTQ_SOFT); /* its own buffer */
    big = malloc(60u << 10);
    assert_non_null(big);
    assert_int_equal(beam_outq_push(&f->q, big, 60u << 10), BEAM_OUTQ_OVER);
    assert_false(beam_outq_drained(&f->q));
    beam_outq_destroy(&f->q); /* never written: freed here */
}

/* A small buffer pushed as its own (a link's sealed frame) is queued as it
 * is, not copied into a block; messages around it keep their order. */
static void test_own_buffer_kept_whatever_its_length(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(beam_outq_push(&f->q, dup_mem("ab", 2), 2), BEAM_OUTQ_OK);
    char *own = dup_mem("cdef", 4);
    assert_int_equal(beam_outq_push_own(&f->q, own, 4), BEAM_OUTQ_OK);
    assert_ptr_not_equal(f->q.head, f->q.tail); /* a block of its own after "ab"'s */
    assert_true(f->q.cost < 2048);
    assert_int_equal(beam_outq_push(&f->q, dup_mem("g", 1), 1), BEAM_OUTQ_OK);
    assert_int_equal(beam_outq_flush(&f->q), 0);
    char out[7];
    drain(f, out, sizeof out);
    assert_memory_equal(out, "abcdefg", 7);
    assert_int_equal(f->written, 1); /* still one write (scatter/gather) */
    assert_int_equal(f->q.cost, 0);
}

/* A write to a peer that is gone reports its error to the owner. */
static void test_failed_write_reported(void **state)
{
    fixture_t *f = *state;
    close(f->peer);
    f->peer = -1;
    assert_int_equal(beam_outq_push(&f->q, dup_mem("x", 1), 1), BEAM_OUTQ_OK);
    int rc = beam_outq_flush(&f->q);
    if (rc == 0) {
        for (int i = 0; i < 1000 && f->written == 0; i++)
            uv_run(&f->loop, UV_RUN_NOWAIT);
        assert_int_equal(f->written, 1);
        assert_int_equal(f->last_status, UV_EPIPE);
    } else {
        assert_int_equal(rc, UV_EPIPE); /* libuv may fail the write at once */
    }
    assert_int_equal(f->q.cost, 0);
}

/* A stream with nothing unwritten takes a batch at once: no write request,
 * no turn of the loop; the blocks and the span's reference are let go, the
 * cost is off the queue and the owner is told before the flush returns. */
static void test_written_at_once(void **state)
{
    enum { SPAN = 2 * BEAM_ENC_SPAN_MIN }; /* written from its buffer, not copied */
    fixture_t *f = *state;
    beam_buf_t *b = beam_buf_new(SPAN);
    assert_non_null(b);
    memset(b->data, 's', SPAN);
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "call", 1);
    beam_pack_key(&enc.pk, "args");
    beam_pack_bin_buf(&enc, b, b->data, SPAN);
    assert_int_equal(beam_enc_end(&enc, 0), 0);
    assert_int_equal(beam_outq_push(&f->q, dup_mem("abc", 3), 3), BEAM_OUTQ_OK);
    assert_int_equal(beam_outq_push_enc(&f->q, &enc), BEAM_OUTQ_OK);
    assert_int_equal(b->refs, 2);
    assert_int_equal(beam_outq_flush(&f->q), 0);
    assert_int_equal(f->written, 1);
    assert_int_equal(f->last_status, 0);
    assert_null(f->q.head);
    assert_null(f->q.tail);
    assert_int_equal(f->q.cost, 0);
    assert_int_equal(f->q.spanned, 0);
    assert_int_equal(b->refs, 1); /* the span was written: its reference dropped */
    assert_int_equal(uv_stream_get_write_queue_size((uv_stream_t *)&f->pipe), 0);
    static char out[2 * SPAN];
    size_t got = 0; /* there already, the loop not run */
    for (ssize_t n; (n = read(f->peer, out + got, sizeof out - got)) > 0;)
        got += (size_t)n;
    assert_true(got > 3 + SPAN);
    assert_memory_equal(out, "abc", 3);
    assert_non_null(memmem(out, got, b->data, SPAN)); /* the span, whole */
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(f->written, 1); /* no request's callback to come */
    beam_buf_unref(b);
    /* the queue is used again as before */
    assert_int_equal(beam_outq_push(&f->q, dup_mem("de", 2), 2), BEAM_OUTQ_OK);
    assert_int_equal(beam_outq_flush(&f->q), 0);
    assert_int_equal(f->written, 2);
    drain(f, out, 2);
    assert_memory_equal(out, "de", 2);
}

/* What the socket does not take at once goes through a write request, from
 * where the written part ended: the blocks written whole are freed at once,
 * the cut one and those after it when the request is done. */
static void test_partial_then_written_by_request(void **state)
{
    fixture_t *f = *state;
    size_t big = 4u << 20; /* more than a unix socket's buffer */
    char *own = malloc(big);
    assert_non_null(own);
    for (size_t i = 0; i < big; i++)
        own[i] = (char)(i * 7 + 1);
    char *want = malloc(big + 5);
    assert_non_null(want);
    memcpy(want, "head", 4);
    memcpy(want + 4, own, big);
    want[4 + big] = '!';
    assert_int_equal(beam_outq_push(&f->q, dup_mem("head", 4), 4), BEAM_OUTQ_OK);
    assert_int_equal(beam_outq_push(&f->q, own, big), BEAM_OUTQ_SOFT);
    assert_int_equal(beam_outq_push(&f->q, dup_mem("!", 1), 1), BEAM_OUTQ_SOFT);
    size_t before = f->q.cost;
    assert_int_equal(beam_outq_flush(&f->q), 0);
    size_t unwritten = uv_stream_get_write_queue_size((uv_stream_t *)&f->pipe);
    assert_true(unwritten > 0);
    assert_true(unwritten < big); /* a part went at once... */
    assert_int_equal(f->written, 0); /* ...the rest is a request in flight */
    assert_null(f->q.head);
    assert_true(f->q.cost < before); /* "head"'s block is freed */
    assert_true(f->q.cost > big);    /* the cut buffer is held until written */
    assert_false(beam_outq_drained(&f->q));
    char *out = malloc(big + 5);
    assert_non_null(out);
    drain(f, out, big + 5);
    assert_memory_equal(out, want, big + 5);
    assert_int_equal(f->written, 1);
    assert_int_equal(f->last_status, 0);
    assert_int_equal(f->q.cost, 0);
    assert_true(beam_outq_drained(&f->q));
    free(out);
    free(want);
}

/* A full socket (UV_EAGAIN) is no error: the batch waits in a request, in
 * order after what the socket holds. */
static void test_socket_full_waits_in_request(void **state)
{
    fixture_t *f = *state;
    uv_os_fd_t fd;
    assert_int_equal(uv_fileno((uv_handle_t *)&f->pipe, &fd), 0);
    char fill[4096];
    memset(fill, 'f', sizeof fill);
    size_t filled = 0;
    for (;;) {
        ssize_t n = write(fd, fill, sizeof fill);
        if (n < 0) {
            assert_int_equal(errno, EAGAIN);
            break;
        }
        filled += (size_t)n;
    }
    assert_int_equal(beam_outq_push(&f->q, dup_mem("xyz", 3), 3), BEAM_OUTQ_OK);
    assert_int_equal(beam_outq_flush(&f->q), 0);
    assert_int_equal(f->written, 0);
    assert_null(f->q.head);
    assert_int_equal(uv_stream_get_write_queue_size((uv_stream_t *)&f->pipe), 3);
    assert_true(f->q.cost > 0);
    char *out = malloc(filled + 3);
    assert_non_null(out);
    drain(f, out, filled + 3);
    assert_memory_equal(out + filled, "xyz", 3);
    assert_int_equal(f->written, 1);
    assert_int_equal(f->last_status, 0);
    assert_int_equal(f->q.cost, 0);
    free(out);
}

/* A write that fails at once is reported as a failed request is: on a later
 * turn of the loop, not under the caller of the flush (an owner that
 * closes on it would free what its caller is using). */
static void test_failed_write_not_reported_under_flush(void **state)
{
    fixture_t *f = *state;
    close(f->peer);
    f->peer = -1;
    assert_int_equal(beam_outq_push(&f->q, dup_mem("gone", 4), 4), BEAM_OUTQ_OK);
    assert_int_equal(beam_outq_flush(&f->q), 0);
    assert_int_equal(f->written, 0);
    assert_true(f->q.cost > 0); /* held by the failed request until its callback */
    for (int i = 0; i < 1000 && f->written == 0; i++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(f->written, 1);
    assert_int_equal(f->last_status, UV_EPIPE);
    assert_int_equal(f->q.cost, 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as beamd: a write to a gone peer is an error, not a signal */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_small_messages_coalesce, setup, teardown),
        cmocka_unit_test_setup_teardown(test_span_written_in_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_caps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_own_buffer_kept_whatever_its_length, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_write_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_written_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partial_then_written_by_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_socket_full_waits_in_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_write_not_reported_under_flush, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
