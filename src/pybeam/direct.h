/* direct.h — _beam.DirectConn: one direct-call socket (docs/DESIGN.md,
 * "Direct calls"), at either end, once its handshake is done. It carries
 * beam frames holding push envelopes [2, op, params]: sent encoded by
 * convert.h, read by the codec's I/O-free decoder (its bound and sticky
 * errors) and parsed as beamd's frames are (frame.h).
 *
 * Methods (GIL held on entry; released only around poll and recv):
 *   send(op, params) -> bytes still unwritten: writes what the socket takes
 *     now, keeps the rest (written by flush, read or wait_writable);
 *   call(obj, method, args, forgets), result(obj, status, data): send of
 *     those two ops with their params as arguments, not a dict (the same
 *     frame);
 *   flush() -> bytes still unwritten;
 *   wait_writable(timeout_ms) -> bytes still unwritten, after waiting at
 *     most timeout_ms for the socket to take more;
 *   read(timeout_ms=-1) -> [(op, params), ...] every whole frame come
 *     (waiting at most timeout_ms, -1 without end, for at least one; []
 *     at the timeout), writing what is unwritten meanwhile; None once the
 *     socket ended or sent a bad frame (then always None). The known ops'
 *     params come as tuples of their keys' values (None for one missing):
 *     call (obj, method, args, forgets), result (obj, status, data),
 *     forget (objs,); another op's as a dict;
 *   fileno(), close(), pending (bytes unwritten), ended.
 * One thread reads at a time (a second read raises RuntimeError); sends
 * from other threads meanwhile are safe (the unwritten bytes have a lock).
 * The object owns the fd it was made with. */
#ifndef PYBEAM_DIRECT_H
#define PYBEAM_DIRECT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

extern PyType_Spec pb_direct_spec;

#endif
