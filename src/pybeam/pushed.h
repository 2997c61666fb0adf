/* pushed.h — the Python side of the results beamd pushes (results.h holds
 * the table): expecting an id at its submit, waiting for pushed results
 * from any thread (leader/follower, as a request's reply: wire.h), turning
 * each into its Python value once, and dropping an entry when its id is
 * released. Every function needs the GIL; the table is read and changed
 * under the client's lock only.
 *
 * A value is what a `get` reply entry holds: the tuple (status, data);
 * True when the push carried no value (over BEAM_PUSH_MAX_DATA, or a
 * member gave the call back to the head: fetch it with a get); None when
 * nothing came yet; False when the id is not expected here (never
 * submitted with push, or released). Returns: 0 or a negative errno. */
#ifndef PYBEAM_PUSHED_H
#define PYBEAM_PUSHED_H

#include "pb_client.h"

/* At most this many results are expected and not yet come at once. A
 * pushed result costs its caller a wake-up when it comes (beamd sends it
 * as soon as it is ready, one frame each), where one get of many costs
 * one: so a sync call or a handful in flight (a tensor-parallel step) is
 * pushed, and the calls of a deeper pipeline past this many are fetched
 * by the get that asks for them, together. */
#define PB_PUSH_MAX_PENDING 16

/* Expects id's result unless PB_PUSH_MAX_PENDING are pending (an id
 * already expected stays as it is): 1 expected (submit it with push), 0
 * not (submit it without), -ENOMEM. */
int pb_pushed_expect(pb_client_t *c, const char *id);
/* id was released: its entry goes, arrived or not. */
void pb_pushed_drop(pb_client_t *c, const char *id);
/* Frees every entry (the client's dealloc). */
void pb_pushed_clear(pb_client_t *c);

/* Waits until every id of ids[0..n) has its result, or one that came is
 * an error (a get ends at the first error), or deadline (0: none) passes;
 * at once when one is not expected here (the caller asks beamd for it and
 * the others it lacks with one get). Then out[i] holds a new reference to each id's value (above;
 * None where nothing came in time). 0; -EPIPE when the connection closed
 * first (nothing in out); -EINTR or -ENOMEM with a Python exception set. */
int pb_pushed_wait(pb_client_t *c, PyTypeObject *frame_type, const char *const *ids, size_t n, int64_t deadline,
                   PyObject **out);

/* Ids whose pushed results are watched for an error while something else
 * is waited for (a get of a list's other refs: pb_pushed_failed). */
typedef struct pb_failed_watch_s {
    const char *const *ids;
    size_t n;
    int scanned;
    uint64_t failed_seen; /* c->results.failed when last looked */
} pb_failed_watch_t;

/* 1 if one of w's ids has its result with an error status (looked for
 * again only when an error was filed since). c->lock held. */
int pb_pushed_failed(pb_client_t *c, pb_failed_watch_t *w);

/* The Client's methods over the table (pybeam.c lists them): wait_result
 * (obj, timeout=None), wait_results(objs, timeout=None), result_stats();
 * their docs are in pybeam.c's method table. */
PyObject *pb_client_wait_result(pb_client_t *c, PyObject *args);
PyObject *pb_client_wait_results(pb_client_t *c, PyObject *args);
PyObject *pb_client_result_stats(pb_client_t *c, PyObject *unused);

/* The ids of seq (a PySequence_Fast of object ids as bytes), borrowed
 * from it, in memory the caller frees with PyMem_Free; NULL with an
 * exception set. */
const char **pb_ids_of(PyObject *seq, Py_ssize_t *n);

#endif
