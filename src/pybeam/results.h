/* results.h — the results beamd pushes to this client (submit's `push`,
 * docs/PROTOCOL.md): a table keyed by object id, of the ids this client
 * submitted with push and has not released. An id is expected from its
 * submit on; the reader files its `result` push there (not on the push
 * queue); a waiting thread decodes it once, and the decoded value stays
 * until the id is released, so every get of it is answered from here.
 *
 * Pure C, no Python: an entry holds its frame and its decoded value as
 * opaque pointers that the glue (pybeam.c) frees. Not thread-safe: the
 * client's lock guards it (pb_client.h). Returns: 0 or a negative errno. */
#ifndef PYBEAM_RESULTS_H
#define PYBEAM_RESULTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "beam/protocol.h"

/* The table's hash: ids this client made differ mostly in their sequence
 * bytes, so a 64-bit fold of the id mixed once spreads them as well as
 * uthash's byte-at-a-time default, at a fraction of its cost. */
static inline unsigned pb_results_hash(const void *key)
{
    uint64_t a, b, c;
    uint32_t d;
    memcpy(&a, key, 8);
    memcpy(&b, (const char *)key + 8, 8);
    memcpy(&c, (const char *)key + 16, 8);
    memcpy(&d, (const char *)key + 24, 4);
    uint64_t x = a ^ (b * 0x9e3779b97f4a7c15ULL) ^ (c << 1) ^ d;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 29;
    return (unsigned)x;
}
#define HASH_FUNCTION(keyptr, keylen, hashv) ((hashv) = pb_results_hash(keyptr))
#include <uthash.h>

typedef enum {
    PB_RESULT_EXPECTED = 0, /* submitted with push; nothing came yet */
    PB_RESULT_ARRIVED,      /* frame (not yet decoded) or value is set */
    PB_RESULT_DECODING,     /* a thread took the frame to decode it */
} pb_result_state_t;

typedef struct pb_result_s {
    char id[BEAM_OBJECT_ID_SIZE];
    pb_result_state_t state;
    void *frame; /* the push's frame, owned, until it is decoded */
    void *value; /* the decoded value, owned (a PyObject * in the glue) */
    int status;  /* the pushed status; -1: no value pushed (fetch it with a get) */
    const char *data; /* the pushed value's bytes, inside frame */
    uint32_t len;
    UT_hash_handle hh;
} pb_result_t;

typedef struct pb_results_s {
    pb_result_t *map;
    size_t count;
    size_t pending;  /* entries still EXPECTED */
    uint64_t filed;  /* result pushes filed, ever */
    uint64_t failed; /* ...of which with an error status (a get ends at the first) */
} pb_results_t;

/* The entry of id, or NULL (never expected, or released). */
pb_result_t *pb_results_find(pb_results_t *t, const char *id);
/* Expects id's result: 0, -EEXIST (already expected), -ENOMEM. */
int pb_results_expect(pb_results_t *t, const char *id);
/* Files frame as id's result with its status (-1: none pushed) and its
 * value's bytes data[0..len) (inside frame): 0
 * (taken), -ENOENT (id not expected: the caller frees frame), -EALREADY
 * (already arrived: the caller frees it). */
int pb_results_file(pb_results_t *t, const char *id, void *frame, int status, const char *data, uint32_t len);
/* Unlinks id's entry and returns it (NULL: none); the caller frees its
 * frame and value, then the entry with free(). */
pb_result_t *pb_results_take(pb_results_t *t, const char *id);
/* Unlinks and returns any one entry (NULL when empty), as take. */
pb_result_t *pb_results_pop(pb_results_t *t);

#endif
