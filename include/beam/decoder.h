/* decoder.h — the frame decoder: beam's frames (a 4-byte big-endian length,
 * then a body of one msgpack value) taken out of a byte stream, with no I/O,
 * and the limits on everything a peer controls (docs/PROTOCOL.md). */
#ifndef BEAM_DECODER_H
#define BEAM_DECODER_H

#include <stddef.h>
#include <stdint.h>

#include "beam/protocol.h"

/* Caps on everything a peer controls; checked before anything is allocated. */
typedef struct beam_limits_s {
    uint32_t max_frame; /* bytes in one frame body */
    uint32_t max_depth; /* nesting of arrays/maps */
    uint32_t max_items; /* array elements + map pairs in one frame */
    uint32_t max_str;   /* bytes in one str */
} beam_limits_t;

void beam_limits_default(beam_limits_t *lim);

/* The frame rule, the one every reader of beam's frames applies (beamd's
 * decoder below, _beam's reader, beamctl's): the 4-byte big-endian header
 * at p announces a body of 1..max_frame bytes. 0 with *n set, or -1 with
 * the fault in err ("frame length N is outside 1..MAX"). */
int beam_frame_header(const char *p, uint32_t max_frame, uint32_t *n, char *err, size_t errlen);

/* The frame decoder: bytes go in (read straight into its free space with
 * beam_decoder_space/commit, or copied in with feed), whole frames come out.
 * Once it fails the error is sticky (beam_decoder_next keeps returning -1).
 * A frame whose header announces BEAM_DECODER_OWN bytes or more gets a
 * buffer of its own, sized from the header (so bounded by max_frame) before
 * its body arrives: the body is read into it directly, and the caller may
 * take that buffer with the frame (beam_decoder_take) instead of copying it.
 * The shared buffer holds the smaller frames; it grows to what is in flight
 * and is freed again once it is empty and larger than BEAM_DECODER_KEEP bytes
 * (or at once by beam_decoder_trim). */
#define BEAM_DECODER_KEEP (1u << 20)
#define BEAM_DECODER_OWN (64u << 10)
#define BEAM_DECODER_READ (64u << 10) /* the free space beam_decoder_space offers */
typedef struct beam_decoder_s {
    char *buf;
    size_t len;  /* bytes held */
    size_t pos;  /* start of the first frame not yet taken */
    size_t cap;
    size_t scan; /* frames in [pos, scan) are whole; scan starts the first that is not */
    char *own;   /* the body of a large frame being read into its own buffer, or NULL */
    size_t own_len, own_have;
    size_t own_at; /* where the own frame sits among the shared ones (== scan) */
    char *given;   /* the own buffer next returned last: freed at the next call unless taken */
    size_t own_min; /* a frame this large gets its own buffer (BEAM_DECODER_OWN; tests lower it) */
    beam_limits_t lim;
    int failed;
    char err[160];
} beam_decoder_t;

void beam_decoder_init(beam_decoder_t *dec, const beam_limits_t *lim);
void beam_decoder_destroy(beam_decoder_t *dec);
/* Copies data in. Returns 0, or -1 (sticky) when memory runs out. */
int beam_decoder_feed(beam_decoder_t *dec, const char *data, size_t n);
/* Where the next read should land: *p and *n (n > 0) are the free space of
 * the buffer the next bytes belong in (the rest of a large frame's own
 * buffer, else BEAM_DECODER_READ bytes at the shared buffer's tail: what one
 * read takes in is what one turn dispatches). Valid until the next call on
 * dec. Returns 0, or -1 (sticky) when memory runs out. */
int beam_decoder_space(beam_decoder_t *dec, char **p, size_t *n);
/* n bytes (at most what space offered) were written at the space. */
void beam_decoder_commit(beam_decoder_t *dec, size_t n);
/* Returns 1 and sets frame and len to the next whole frame body (valid until the
 * next feed, space or next call), 0 when more bytes are needed, -1 on a bad frame
 * header (length 0 or over max_frame; the message is in dec->err). The body
 * is not validated here: beam_msg_parse does that. */
int beam_decoder_next(beam_decoder_t *dec, const char **frame, size_t *len);
/* The buffer of the frame next returned last when it has one of its own
 * (the frame pointer itself, malloc'd): ownership passes to the caller, who
 * frees it with free(). NULL for a frame in the shared buffer. */
char *beam_decoder_take(beam_decoder_t *dec);
/* Frees the shared buffer if it holds nothing (between reads of an idle
 * connection, so it costs no memory while it waits). */
void beam_decoder_trim(beam_decoder_t *dec);

#endif
