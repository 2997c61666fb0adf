/* test_boards.c — the call boards beamd adopts (src/boards.h): a worker's
 * page of counters (include/beam/board.h) adopted from this process's own
 * memfd through /proc, read while the "worker" bumps it, refused when it is
 * not a sealed memfd of the board's size or a second one, and folded into
 * the totals and unmapped when its owner goes; a member's walk of what
 * changed, and the head's record of what a member reports. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "boards.h"

#define SEALS (F_SEAL_SEAL | F_SEAL_GROW | F_SEAL_SHRINK)

static const char ACTOR_A[BEAM_ACTOR_ID_SIZE] = "actor-a";
static const char ACTOR_B[BEAM_ACTOR_ID_SIZE] = "actor-b";

/* A board as a worker makes it (_beam.Board): *page its read-write mapping. */
static int make_board(size_t len, int seals, uint64_t **page)
{
    int fd = memfd_create("beam-board", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)len), 0);
    if (seals)
        assert_int_equal(fcntl(fd, F_ADD_SEALS, seals), 0);
    if (page) {
        *page = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        assert_true(*page != MAP_FAILED);
    }
    return fd;
}

/* Mappings of beam-board memfds in this process. */
static int count_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, "memfd:beam-board") != NULL;
    fclose(f);
    return n;
}

static void counts_are_read_live_and_folded_when_the_owner_goes(void **state)
{
    (void)state;
    beam_node_t node = {0};
    int owner1, owner2;
    uint64_t *p1, *p2;
    int fd1 = make_board(BEAM_BOARD_SIZE, SEALS, &p1);
    int fd2 = make_board(BEAM_BOARD_SIZE, SEALS, &p2);
    assert_int_equal(beam_boards_adopt(&node, &owner1, ACTOR_A, getpid(), fd1, BEAM_BOARD_SIZE), 0);
    assert_int_equal(beam_boards_adopt(&node, &owner2, ACTOR_B, getpid(), fd2, BEAM_BOARD_SIZE), 0);
    close(fd1); /* beamd's mapping keeps the page */
    close(fd2);
    assert_int_equal(beam_boards_count(&node), 2);
    assert_int_equal(count_maps(), 4); /* the workers' two and beamd's two */
    assert_int_equal(beam_boards_running(&node, ACTOR_A), 0);

    beam_board_bump(p1, BEAM_BOARD_STARTED); /* a call runs */
    assert_int_equal(beam_boards_running(&node, ACTOR_A), 1);
    assert_int_equal(beam_boards_running(&node, ACTOR_B), 0);
    beam_board_bump(p1, BEAM_BOARD_FINISHED);
    beam_board_bump(p1, BEAM_BOARD_PUSHED);
    beam_board_bump(p1, BEAM_BOARD_STARTED); /* a second one runs */
    beam_board_bump(p2, BEAM_BOARD_STARTED);
    beam_board_bump(p2, BEAM_BOARD_FINISHED);
    assert_int_equal(beam_boards_running(&node, ACTOR_A), 1);
    beam_board_counts_t t = beam_boards_totals(&node);
    assert_int_equal(t.started, 3);
    assert_int_equal(t.finished, 2);
    assert_int_equal(t.pushed, 1);

    beam_boards_drop(&node, &owner1); /* its worker's connection ended mid-call */
    assert_int_equal(beam_boards_count(&node), 1);
    assert_int_equal(count_maps(), 3);
    assert_int_equal(beam_boards_running(&node, ACTOR_A), 0); /* its worker is gone */
    beam_board_bump(p1, BEAM_BOARD_PUSHED);                  /* no longer read */
    t = beam_boards_totals(&node);
    assert_int_equal(t.started, 3);
    assert_int_equal(t.pushed, 1);
    beam_boards_drop(&node, &owner1); /* a second drop: nothing */
    beam_boards_drop(&node, &owner2);
    assert_int_equal(beam_boards_count(&node), 0);
    assert_int_equal(count_maps(), 2);
    t = beam_boards_totals(&node);
    assert_int_equal(t.started, 3);
    assert_int_equal(t.finished, 2);
    beam_boards_free(&node);
    assert_null(node.boards);
    munmap(p1, BEAM_BOARD_SIZE);
    munmap(p2, BEAM_BOARD_SIZE);
    assert_int_equal(count_maps(), 0);
}

static void refuses_what_is_not_a_board_or_a_second_one(void **state)
{
    (void)state;
    beam_node_t node = {0};
    int owner;
    int unsealed = make_board(BEAM_BOARD_SIZE, 0, NULL); /* could shrink under beamd's mapping */
    int part = make_board(BEAM_BOARD_SIZE, F_SEAL_SHRINK, NULL);
    int big = make_board(2 * BEAM_BOARD_SIZE, SEALS, NULL);
    int good = make_board(BEAM_BOARD_SIZE, SEALS, NULL);
    assert_int_equal(beam_boards_adopt(&node, &owner, ACTOR_A, getpid(), unsealed, BEAM_BOARD_SIZE), -EINVAL);
    assert_int_equal(beam_boards_adopt(&node, &owner, ACTOR_A, getpid(), part, BEAM_BOARD_SIZE), -EINVAL);
    assert_int_equal(beam_boards_adopt(&node, &owner, ACTOR_A, getpid(), big, BEAM_BOARD_SIZE), -EINVAL);
    assert_int_equal(beam_boards_adopt(&node, &owner, ACTOR_A, getpid(), big, 2 * BEAM_BOARD_SIZE), -EINVAL);
    assert_int_equal(beam_boards_adopt(&node, &owner, ACTOR_A, getpid(), 1000000, BEAM_BOARD_SIZE), -ENOENT);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0); /* not a file at all */
    assert_int_equal(beam_boards_adopt(&node, &owner, ACTOR_A, getpid(), pipefd[0], BEAM_BOARD_SIZE), -EINVAL);
    assert_int_equal(beam_boards_count(&node), 0);
    assert_int_equal(beam_boards_adopt(&node, &owner, ACTOR_A, getpid(), good, BEAM_BOARD_SIZE), 0);
    assert_int_equal(beam_boards_adopt(&node, &owner, ACTOR_A, getpid(), good, BEAM_BOARD_SIZE), -EEXIST);
    assert_int_equal(beam_boards_count(&node), 1);
    beam_boards_free(&node); /* the node's end drops what is left */
    assert_int_equal(count_maps(), 0);
    close(unsealed);
    close(part);
    close(big);
    close(good);
    close(pipefd[0]);
    close(pipefd[1]);
}

static void note(void *arg, const void *owner, beam_board_counts_t now)
{
    beam_board_counts_t *seen = arg;
    (void)owner;
    *seen = now;
    seen[1].started++; /* how many boards changed */
}

static void a_member_reads_what_changed_and_the_head_keeps_what_it_reports(void **state)
{
    (void)state;
    beam_node_t member = {0}, head = {0};
    int worker, remote;
    uint64_t *page;
    int fd = make_board(BEAM_BOARD_SIZE, SEALS, &page);
    assert_int_equal(beam_boards_adopt(&member, &worker, ACTOR_A, getpid(), fd, BEAM_BOARD_SIZE), 0);
    close(fd);
    beam_board_counts_t seen[2] = {{0}};
    beam_boards_changed(&member, note, seen);
    assert_int_equal(seen[1].started, 0); /* nothing counted yet: nothing to send */
    beam_board_bump(page, BEAM_BOARD_STARTED);
    beam_boards_changed(&member, note, seen);
    assert_int_equal(seen[1].started, 1);
    assert_int_equal(seen[0].started, 1);
    beam_boards_changed(&member, note, seen);
    assert_int_equal(seen[1].started, 1); /* unchanged since */
    /* the head: what the member sent, for a member's worker it cannot open */
    assert_int_equal(beam_boards_report(&head, &remote, ACTOR_A, seen[0]), 1);
    assert_int_equal(beam_boards_running(&head, ACTOR_A), 1);
    beam_board_bump(page, BEAM_BOARD_FINISHED);
    beam_board_bump(page, BEAM_BOARD_PUSHED);
    beam_board_bump(page, BEAM_BOARD_STARTED);
    beam_board_bump(page, BEAM_BOARD_STARTED);
    beam_boards_changed(&member, note, seen);
    assert_int_equal(seen[1].started, 2);
    assert_int_equal(beam_boards_report(&head, &remote, ACTOR_A, seen[0]), 2); /* two more started */
    assert_int_equal(beam_boards_report(&head, &remote, ACTOR_A, seen[0]), 0); /* the same again */
    assert_int_equal(beam_boards_running(&head, ACTOR_A), 2);
    beam_board_counts_t t = beam_boards_totals(&head);
    assert_int_equal(t.started, 3);
    assert_int_equal(t.pushed, 1);
    beam_boards_drop(&head, &remote); /* the worker's remote session ends */
    assert_int_equal(beam_boards_running(&head, ACTOR_A), 0);
    assert_int_equal(beam_boards_totals(&head).started, 3);
    /* a report for an adopted board is ignored: its page is the truth */
    assert_int_equal(beam_boards_report(&member, &worker, ACTOR_A, (beam_board_counts_t){100, 0, 0}), 0);
    assert_int_equal(beam_boards_totals(&member).started, 3);
    beam_boards_free(&head);
    beam_boards_free(&member);
    munmap(page, BEAM_BOARD_SIZE);
    assert_int_equal(count_maps(), 0);
}

static void counts_go_up_as_three_little_endian_words(void **state)
{
    (void)state;
    beam_board_counts_t c = {0x0102030405060708u, 2, UINT64_MAX};
    char out[BEAM_BOARD_COUNTS_BYTES];
    beam_boards_pack_counts(c, out);
    assert_int_equal((unsigned char)out[0], 0x08); /* the low byte first */
    assert_int_equal((unsigned char)out[7], 0x01);
    assert_int_equal((unsigned char)out[8], 2);
    assert_int_equal((unsigned char)out[9], 0);
    assert_int_equal((unsigned char)out[23], 0xff);
    beam_board_counts_t back = beam_boards_unpack_counts(out);
    assert_true(back.started == c.started && back.finished == c.finished && back.pushed == c.pushed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counts_are_read_live_and_folded_when_the_owner_goes),
        cmocka_unit_test(refuses_what_is_not_a_board_or_a_second_one),
        cmocka_unit_test(a_member_reads_what_changed_and_the_head_keeps_what_it_reports),
        cmocka_unit_test(counts_go_up_as_three_little_endian_words),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
