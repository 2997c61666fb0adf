/* clock.h — the extension's one clock, with no Python (dsock.c, tested
 * without the interpreter, reads it as the rest of _beam does). */
#ifndef PYBEAM_CLOCK_H
#define PYBEAM_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline int64_t pb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#endif
