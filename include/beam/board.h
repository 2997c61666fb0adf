/* board.h — a worker's call board (docs/DESIGN.md, "Direct calls"): one page
 * of shared memory on which an actor's worker counts the direct calls beamd
 * never sees, for beamd to read when asked. The worker makes it (a memfd of
 * BEAM_BOARD_SIZE bytes sealed against grow and shrink, mapped read-write)
 * and is its one writer: its main thread bumps each counter with an atomic
 * store; beamd adopts it (boards.h) and maps it read-only. Shared by beamd
 * and _beam: the layout below is the whole contract. */
#ifndef BEAM_BOARD_H
#define BEAM_BOARD_H

#include <stdint.h>

#define BEAM_BOARD_SIZE 4096u /* the memfd's size, exactly */

/* The page's first bytes, each counter a native-endian uint64 that only
 * grows; the rest of the page is zero and unread. */
enum { BEAM_BOARD_STARTED, BEAM_BOARD_FINISHED, BEAM_BOARD_PUSHED, BEAM_BOARD_NCOUNTERS };

typedef struct beam_board_counts_s {
    uint64_t started;  /* direct calls whose method began */
    uint64_t finished; /* of those, the ones whose method returned or raised */
    uint64_t pushed;   /* results sent to their caller on the direct socket */
} beam_board_counts_t;

/* The writer (one thread): counter i goes up by one, published with a
 * release store so a reader never sees a count ahead of what it counts. */
static inline void beam_board_bump(uint64_t *page, int i)
{
    __atomic_store_n(&page[i], page[i] + 1, __ATOMIC_RELEASE);
}

/* A reader: the counts as they are now. finished is read before started,
 * so started >= finished always holds in what it returns. */
static inline beam_board_counts_t beam_board_read(const uint64_t *page)
{
    beam_board_counts_t c;
    c.pushed = __atomic_load_n(&page[BEAM_BOARD_PUSHED], __ATOMIC_ACQUIRE);
    c.finished = __atomic_load_n(&page[BEAM_BOARD_FINISHED], __ATOMIC_ACQUIRE);
    c.started = __atomic_load_n(&page[BEAM_BOARD_STARTED], __ATOMIC_ACQUIRE);
    return c;
}

#endif
