/* dsock.h — the bytes of one direct-call socket (docs/DESIGN.md, "Direct
 * calls"), with no Python: frames written whole or the rest kept, frames
 * read by the codec's I/O-free decoder (beam_frame_header's bound, sticky
 * errors) and parsed as beamd's (frame.h). direct.c wraps it as
 * _beam.DirectConn; tests/c/test_dsock.c drives it over a socketpair.
 *
 * Threads: one reader at a time (pb_dsock_pump; the caller makes sure);
 * writes from any thread (the unwritten bytes have a lock of their own). */
#ifndef PYBEAM_DSOCK_H
#define PYBEAM_DSOCK_H

#include <pthread.h>
#include <stddef.h>
#include <sys/uio.h>

#include "beam/codec.h"
#include "frame.h"

typedef struct pb_dsock_s {
    int fd;             /* owned; -1 once closed */
    beam_limits_t limits;
    beam_decoder_t dec; /* the read side: the reading thread's */
    int ended;          /* EOF, a read error or a bad frame: nothing more is read */
    int rcvtimeo_ms;    /* the socket's receive timeout (0: none): how long one blocking read lasts */
    int wake_early;     /* a long wait is a blocking read (the early wake), not a poll: the reader's choice */
    pthread_mutex_t out_lock; /* guards out, out_off, out_len, out_cap */
    char *out;          /* bytes not yet written: [out_off, out_len) */
    size_t out_off, out_len, out_cap;
} pb_dsock_t;

/* Frames read, parsed, in order; each list node owns its frame. */
typedef struct pb_dframe_s {
    pb_frame_t *frame;
    struct pb_dframe_s *next;
} pb_dframe_t;

/* Takes fd (made blocking: every read that must not wait and every write
 * says MSG_DONTWAIT) with beam's default limits. 0, or a negative errno
 * (fd is then not taken). */
int pb_dsock_init(pb_dsock_t *s, int fd);
/* Sets the socket's receive timeout: a wait in pump of at least ms (or
 * without end) is then a blocking read of at most ms. 0, or a negative
 * errno. */
int pb_dsock_set_rcvtimeo(pb_dsock_t *s, int ms);
/* Closes the fd (if still open) and frees the buffers. */
void pb_dsock_destroy(pb_dsock_t *s);
/* Closes the fd now; the socket counts as ended. No reader may be in pump. */
void pb_dsock_close(pb_dsock_t *s);

/* Writes the frame in iov at once when nothing is unwritten before it,
 * and keeps what the socket did not take (a write error drops it: the
 * reader then sees the end). 0, or -ENOMEM (nothing of it kept). */
int pb_dsock_write(pb_dsock_t *s, const struct iovec *iov, int cnt);
/* Writes what the socket takes of the unwritten bytes; returns how many
 * are still unwritten. */
size_t pb_dsock_flush(pb_dsock_t *s);
size_t pb_dsock_unwritten(pb_dsock_t *s);

/* Waits at most wait_ms (-1: without end, 0: not at all, reading without
 * a poll first) for the socket,
 * writing the unwritten bytes as it takes them and reading what comes,
 * until at least one more whole frame came or the socket ended. Appends
 * the whole frames to the list at *head (the caller frees them with pb_dframes_free).
 * With wake_early set and nothing to write, a wait without end or of at
 * least the receive timeout is a blocking recv, not a poll (the early
 * wake, dsock.c), and ends early, with nothing, when the receive timeout
 * passes.
 * Returns 0, or -EINTR when a signal cut the wait short. */
int pb_dsock_pump(pb_dsock_t *s, int wait_ms, pb_dframe_t **head);
void pb_dframes_free(pb_dframe_t *head);

#endif
