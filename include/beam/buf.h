/* buf.h — a reference-counted byte buffer: bytes received once (a frame's
 * own buffer) and kept by whoever needs them (an object's value, a queued
 * call, a reply in a write queue) without being copied. Single-threaded: the
 * count is a plain integer, so a buffer never crosses threads. */
#ifndef BEAM_BUF_H
#define BEAM_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct beam_buf_s {
    uint32_t refs;
    size_t len;
    char *data; /* freed with the last reference */
    /* NULL, or what the last reference calls instead of freeing: for
     * bytes that are not the heap's (a mapping, shm.h), which it owns */
    void (*release)(struct beam_buf_s *b);
} beam_buf_t;

/* A buffer of len bytes (header and bytes in one allocation), one reference
 * held by the caller; its bytes are uninitialised. NULL when out of memory. */
beam_buf_t *beam_buf_new(size_t len);
/* Wraps data (malloc'd, len bytes): ownership passes here, even on failure
 * (data is then freed and NULL returned). One reference to the caller. */
beam_buf_t *beam_buf_wrap(char *data, size_t len);
/* Takes one more reference and returns b. */
beam_buf_t *beam_buf_ref(beam_buf_t *b);
/* Drops one reference (NULL is ignored); the last frees the bytes. */
void beam_buf_unref(beam_buf_t *b);

#endif
