/* boards.h — the call boards of a node's workers (docs/DESIGN.md, "Direct
 * calls"): each a page an actor's worker counts its direct calls on
 * (include/beam/board.h), one per worker connection. On the node of the
 * worker, the board is adopted: opened through /proc/<pid>/fd by shm.h's
 * code and mapped read-only. On the head, a member's worker's board is
 * reported: the counts its member read and sent up (local_batch), kept
 * here. beamd reads them only when asked (the `status` view): an actor's
 * direct calls running, and the node's totals, which keep a board's last
 * counts once its worker is gone. A table: it answers through a port,
 * and its owner (the worker's port) is compared, never read. */
#ifndef BEAM_BOARDS_H
#define BEAM_BOARDS_H

#include <stdint.h>

#include "beam/board.h"
#include "fieldspec.h"
#include "node.h"
#include "port.h"

/* The `board` request's fields, by position: fd, size (docs/PROTOCOL.md);
 * read by the op on this node (status.c) and by a member's shortcut. */
enum { BEAM_BOARD_F_FD, BEAM_BOARD_F_SIZE, BEAM_BOARD_NFIELDS };
extern const beam_field_spec_t beam_board_fields[BEAM_BOARD_NFIELDS];

/* Adopts the board process pid holds as its fd fd_num, size bytes, for
 * owner (a worker's port) serving actor (BEAM_ACTOR_ID_SIZE bytes, copied).
 * 0; -EINVAL: size is not BEAM_BOARD_SIZE, or the fd is not a memfd of
 * that size sealed against grow and shrink; -EEXIST: owner has one already
 * (checked after the fd, so a bad fd is named as such); -ENOMEM; another
 * negative errno when it cannot be opened or mapped. Nothing is kept on
 * failure. */
int beam_boards_adopt(beam_node_t *node, const void *owner, const char *actor, long pid, int64_t fd_num,
                      int64_t size);
/* Answers worker c's `board` request msgid by what beam_boards_adopt
 * returned (-EXDEV: this daemon cannot open c's fds): {} or the error. */
void beam_boards_reply(beam_port_t *c, uint64_t msgid, int rc);
/* The head: the counts a member read on owner's board (owner: a member's
 * worker's port, serving actor), kept as that board's (made if new).
 * Returns how many more calls it started than the last report said (0
 * when out of memory: nothing is kept then). */
uint64_t beam_boards_report(beam_node_t *node, const void *owner, const char *actor, beam_board_counts_t now);
/* A member: fn(arg, owner, counts now) for each adopted board whose counts
 * changed since the last walk (the first walk: every one that counted
 * anything); fn may not change the table. */
void beam_boards_changed(beam_node_t *node, void (*fn)(void *arg, const void *owner, beam_board_counts_t now),
                         void *arg);
/* owner is gone (its connection ended): its board's last counts go into
 * the node's totals and the page, if it has one, is unmapped. Nothing if
 * it had no board. */
void beam_boards_drop(beam_node_t *node, const void *owner);
/* Direct calls of actor started and not finished, on its workers' boards. */
uint32_t beam_boards_running(const beam_node_t *node, const char *actor);
/* Every board's counts, live ones as they are now and those of boards
 * dropped as they were last. */
beam_board_counts_t beam_boards_totals(const beam_node_t *node);
/* A board's counts as a member sends them up (local_batch kind 2,
 * docs/PROTOCOL.md): started, finished and pushed, each a little-endian
 * uint64, BEAM_BOARD_COUNTS_BYTES in all. */
#define BEAM_BOARD_COUNTS_BYTES 24
void beam_boards_pack_counts(beam_board_counts_t c, char out[BEAM_BOARD_COUNTS_BYTES]);
beam_board_counts_t beam_boards_unpack_counts(const char in[BEAM_BOARD_COUNTS_BYTES]);
/* How many boards there are now. */
uint32_t beam_boards_count(const beam_node_t *node);
/* Drops every board (the node is being freed). */
void beam_boards_free(beam_node_t *node);

#endif
