/* check.h — CHECK, every fuzz target's assertion: it aborts with the failed
 * condition, so libFuzzer keeps the input (an assert would vanish under
 * NDEBUG). */
#ifndef BEAM_FUZZ_CHECK_H
#define BEAM_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

#endif
