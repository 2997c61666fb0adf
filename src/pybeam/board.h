/* board.h — _beam.Board: a worker's call board (include/beam/board.h,
 * docs/DESIGN.md "Direct calls"), the writer's side. Board() makes the
 * memfd (BEAM_BOARD_SIZE bytes, sealed against grow, shrink and further
 * seals) and maps it read-write; the worker hands fileno() to beamd with
 * the `board` request and keeps the fd open for its life.
 *
 * Methods (GIL held; no Python arithmetic, one atomic store each):
 *   start(), finish(): a direct call's method begins, ends (returned or raised);
 *   pushed(): a result goes to its caller on the direct socket;
 *   counts() -> (started, finished, pushed); fileno(); size (4096).
 * One thread writes (the worker's main thread, which runs direct calls).
 * The object owns the fd and the mapping. */
#ifndef PYBEAM_BOARD_H
#define PYBEAM_BOARD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

extern PyType_Spec pb_board_spec;

#endif
