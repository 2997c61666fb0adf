/* boards.h — the call boards beamd has adopted (docs/DESIGN.md, "Direct
 * calls"): each a page an actor's worker counts its direct calls on
 * (include/beam/board.h), opened through /proc/<pid>/fd by shm.h's code and
 * mapped read-only, one per worker connection. beamd reads them only when
 * asked (the `status` view): an actor's direct calls running, and the
 * node's totals, which keep a board's last counts once its worker is gone.
 * A table: no transport, no reply; its owner is compared, never read. */
#ifndef BEAM_BOARDS_H
#define BEAM_BOARDS_H

#include <stdint.h>

#include "beam/board.h"
#include "node.h"

/* Adopts the board process pid holds as its fd fd_num, size bytes, for
 * owner (a worker's port) serving actor (BEAM_ACTOR_ID_SIZE bytes, copied).
 * 0; -EINVAL: size is not BEAM_BOARD_SIZE, or the fd is not a memfd of
 * that size sealed against grow and shrink; -EEXIST: owner has one already
 * (checked after the fd, so a bad fd is named as such);
 * -ENOMEM; another negative errno when it cannot be opened or mapped.
 * Nothing is kept on failure. */
int beam_boards_adopt(beam_node_t *node, const void *owner, const char *actor, long pid, int64_t fd_num,
                      int64_t size);
/* owner is gone (its connection ended): its board's last counts go into
 * the node's totals and the page is unmapped. Nothing if it had none. */
void beam_boards_drop(beam_node_t *node, const void *owner);
/* Direct calls of actor started and not finished, on its workers' boards. */
uint32_t beam_boards_running(const beam_node_t *node, const char *actor);
/* Every board's counts, live ones as they are now and those of boards
 * dropped as they were last. */
beam_board_counts_t beam_boards_totals(const beam_node_t *node);
/* How many boards are adopted now. */
uint32_t beam_boards_count(const beam_node_t *node);
/* Drops every board (the node is being freed). */
void beam_boards_free(beam_node_t *node);

#endif
