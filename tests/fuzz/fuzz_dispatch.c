/* fuzz_dispatch.c — a libFuzzer target for beamd's request path. Each input
 * gets a fresh beam_node_t on its own uv loop, listening on a real unix
 * socket; up to three clients connect and are accepted by beam_conn_accept,
 * so the bytes go through everything a peer reaches: the peer check, the
 * read path and its decoder, beam_dispatch and every op handler, the write
 * queue and its caps, and closing. After the input every client hangs up;
 * then the node must have closed every connection, freed every object and
 * actor, given all resources back, and the loop must close with no handle
 * open. ASan/UBSan and LeakSanitizer do the rest.
 *
 * Workers are never started: uv_spawn is wrapped (-Wl,--wrap=uv_spawn) to
 * fail before it forks, so create_actor goes through the real path up to the
 * spawn and the actor then dies as one whose worker could not start. The
 * worker-only ops (actor_ready, task_done) are reached only as refusals.
 *
 * The input is a sequence of records:
 *   byte 0          which clients say hello first (bit 0..2: client 0..2 as a
 *                   driver; bit 3: client 2 as ctl instead), so short inputs
 *                   reach the ops past hello
 *   then, repeated: a selector byte s, and for writes a 2-byte big-endian
 *                   length n and n bytes.
 *     s >> 6 == 0, 1: write n bytes to client (s & 3) % 3 as they are
 *                     (normally whole frames: 4-byte length + msgpack)
 *     s >> 6 == 2:    client (s & 3) % 3 hangs up, and a new one connects
 *     s >> 6 == 3:    run the loop until nothing moves (timers included when
 *                     s & 1: a get/wait with a short timeout expires)
 *
 * Build and run: scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined),
 * seed corpus in tests/fuzz/corpus/dispatch/ (made by tests/fuzz/make_corpus.py). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uthash.h>
#include <uv.h>

#include "actors.h"
#include "invariants.h"
#include "cluster.h"
#include "hooks.h"
#include "session.h"
#include "link.h"
#include "shortcut.h"
#include "log.h"
#include "node.h"
#include "objects.h"
#include "placement.h"
#include "procs.h"
#include "server.h"

#define NCLIENTS 3


/* The real uv_spawn, made to fail before it forks: an inherited stdin fd of
 * -1 is refused (UV_EINVAL) after the handle is initialised, as any early
 * spawn failure is, so the caller's cleanup path runs as in production. */
int __real_uv_spawn(uv_loop_t *loop, uv_process_t *handle, const uv_process_options_t *options);
int __wrap_uv_spawn(uv_loop_t *loop, uv_process_t *handle, const uv_process_options_t *options)
{
    uv_process_options_t opt = *options;
    uv_stdio_container_t stdio[1] = {{.flags = UV_INHERIT_FD, .data.fd = -1}};
    opt.stdio = stdio;
    opt.stdio_count = 1;
    return __real_uv_spawn(loop, handle, &opt);
}

static char sock_dir[64];
static char sock_path[108];

typedef struct fuzz_s {
    uv_loop_t loop;
    beam_node_t node;
    beam_server_t server;
    int fds[NCLIENTS];
} fuzz_t;

static void remove_sock_dir(void)
{
    unlink(sock_path);
    rmdir(sock_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    /* quiet (-1 is below every level) unless BEAM_FUZZ_LOG is set */
    beam_log_set_level(getenv("BEAM_FUZZ_LOG") ? BEAM_LOG_DEBUG : -1);
    snprintf(sock_dir, sizeof sock_dir, "/tmp/beam-fuzz-XXXXXX");
    CHECK(mkdtemp(sock_dir) != NULL);
    snprintf(sock_path, sizeof sock_path, "%s/beamd.sock", sock_dir);
    atexit(remove_sock_dir);
    return 0;
}

static void node_setup(fuzz_t *f)
{
    beam_node_t *node = &f->node;
    memset(f, 0, sizeof *f);
    for (int i = 0; i < NCLIENTS; i++)
        f->fds[i] = -1;
    CHECK(uv_loop_init(&f->loop) == 0);
    fuzz_node_init(node, &f->loop, 4);
    CHECK(beam_pool_add(&node->pool, "custom", beam_res_units(2)) == 0);
    CHECK(beam_pool_add_gpu(&node->pool, "1") == 0);
    char err[256];
    if (beam_server_listen(&f->server, node, sock_path, err, sizeof err) < 0) {
        fprintf(stderr, "fuzz_dispatch: %s\n", err);
        abort();
    }
    snprintf(node->socket_path, sizeof node->socket_path, "%s", sock_path);
    beam_sessions_init(&f->loop, node);
    beam_hooks_wire(node); /* beamd's own wiring */
    CHECK(beam_cluster_init_self(node) == 0);
}

/* Reads and drops whatever beamd sent the clients; 1 if anything came. */
static int drain(fuzz_t *f)
{
    static char scratch[1 << 16];
    int any = 0;
    for (int i = 0; i < NCLIENTS; i++) {
        if (f->fds[i] < 0)
            continue;
        for (;;) {
            ssize_t n = read(f->fds[i], scratch, sizeof scratch);
            if (n <= 0)
                break; /* EAGAIN, or beamd closed it: the fd stays until the client hangs up */
            any = 1;
        }
    }
    return any;
}

/* One round of the clients: drains them (fuzz_pump's move). */
static int move(void *target)
{
    return drain(target);
}

static void pump(fuzz_t *f, int timers)
{
    fuzz_pump(&f->loop, move, f, timers);
}

static int client_connect(fuzz_t *f, int i)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock_path);
    CHECK(connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0);
    CHECK(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
    f->fds[i] = fd;
    /* accepted once the node has numbered one more connection (counting the
     * list would not do: a client hung up before may leave it meanwhile) */
    uint32_t before = f->node.next_conn;
    for (int k = 0; k < 1000 && f->node.next_conn == before; k++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
    CHECK(f->node.next_conn == before + 1);
    return fd;
}

/* Writes all of data to client i, running the loop while its socket is full. */
static void client_write(fuzz_t *f, int i, const uint8_t *data, size_t n)
{
    size_t off = 0;
    int stuck = 0;
    while (off < n && f->fds[i] >= 0) {
        ssize_t w = write(f->fds[i], data + off, n - off);
        if (w > 0) {
            off += (size_t)w;
            stuck = 0;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return; /* beamd closed this client (EPIPE): the rest is lost, as for a real peer */
        pump(f, 0);
        /* beamd stopped reading a client that does not read (backpressure);
         * drain() reads it, so this ends unless the node is stuck */
        CHECK(++stuck < 100000);
    }
    pump(f, 0);
}

static void client_hangup(fuzz_t *f, int i)
{
    if (f->fds[i] >= 0)
        close(f->fds[i]);
    f->fds[i] = -1;
}

static void hello(fuzz_t *f, int i, const char *role)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_request(&enc, 1, "hello", 2);
    beam_pack_key(&enc.pk, "role");
    beam_pack_str(&enc.pk, role);
    beam_pack_key(&enc.pk, "pid");
    msgpack_pack_int(&enc.pk, 4242 + i);
    CHECK(beam_enc_end(&enc, 0) == 0);
    size_t len;
    char *buf = beam_enc_take(&enc, &len);
    beam_enc_destroy(&enc);
    client_write(f, i, (const uint8_t *)buf, len);
    free(buf);
}

/* After every client hung up: the tables are empty (invariants.h). */
static void check_empty(fuzz_t *f)
{
    fuzz_check_tables_empty(&f->node);
}

static void on_walk_close(uv_handle_t *h, void *arg)
{
    (void)arg;
    fprintf(stderr, "fuzz_dispatch: handle of type %s left open\n", uv_handle_type_name(h->type));
}

/* beamd's stop() and the end of its main(), in order. */
static void node_teardown(fuzz_t *f)
{
    beam_node_t *node = &f->node;
    beam_server_close(&f->server);
    beam_node_stop(node, "the fuzz input ended");
    uv_run(&f->loop, UV_RUN_DEFAULT);
    beam_node_free(node);
    if (uv_loop_close(&f->loop) != 0) {
        uv_walk(&f->loop, on_walk_close, NULL);
        CHECK(!"the loop has handles open after teardown");
    }
}

/* What a client writes is a frame (its header, then its body) more often
 * than not: the member's op tables (shortcut.h) read the body both ways, as a
 * client's request and as the head's push, without state; they take it,
 * pass it or refuse it naming a field, and never read past it. */
static void local_tables(const beam_node_t *node, const uint8_t *p, size_t n)
{
    char err[160];
    if (n <= BEAM_FRAME_HEADER)
        return;
    for (int up = 0; up < 2; up++) {
        int rc = beam_shortcut_check((const char *)p + BEAM_FRAME_HEADER, n - BEAM_FRAME_HEADER, up, &node->limits, err,
                                  sizeof err);
        CHECK(rc == 1 || rc == 0 || rc == -EINVAL || rc == -EPROTO);
        if (rc < 0)
            CHECK(memchr(err, '\0', sizeof err) != NULL && err[0] != '\0');
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fuzz_t f;
    if (size == 0)
        return 0;
    node_setup(&f);
    uint8_t flags = data[0];
    for (int i = 0; i < NCLIENTS; i++)
        client_connect(&f, i);
    for (int i = 0; i < NCLIENTS; i++)
        if (flags & (1u << i))
            hello(&f, i, i == 2 && (flags & 8) ? "ctl" : "driver");

    size_t off = 1;
    while (off < size) {
        uint8_t s = data[off++];
        int who = (s & 3) % NCLIENTS;
        switch (s >> 6) {
        case 0:
        case 1: {
            if (size - off < 2) {
                off = size;
                break;
            }
            size_t n = ((size_t)data[off] << 8) | data[off + 1];
            off += 2;
            if (n > size - off)
                n = size - off;
            client_write(&f, who, data + off, n);
            local_tables(&f.node, data + off, n);
            off += n;
            break;
        }
        case 2:
            client_hangup(&f, who);
            pump(&f, 0);
            client_connect(&f, who);
            break;
        default:
            pump(&f, s & 1);
            break;
        }
    }

    /* everyone hangs up: every connection must close and take its things */
    for (int i = 0; i < NCLIENTS; i++)
        client_hangup(&f, i);
    for (int k = 0; k < 1000 && f.node.sessions; k++)
        uv_run(&f.loop, UV_RUN_NOWAIT);
    pump(&f, 0);
    check_empty(&f);
    node_teardown(&f);
    return 0;
}
