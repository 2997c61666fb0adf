/* shm.h — values in shared memory on this node (docs/DESIGN.md, "Large
 * values"). A producer writes a value once into a memfd sealed against
 * growing and shrinking (no mapping of it can fault); beamd adopts it here by opening
 * the producer's fd through /proc/<pid>/fd, checks it (a sealed memfd of the
 * size claimed), charges it to the node's budget (object_store_memory) and
 * keeps the fd as the value's storage, mapped read-only: a value that must
 * leave the node (a get from a member, a link) is sent from the mapping, and
 * a reader on this node opens /proc/<beamd>/fd/<fd> and maps it itself.
 * Nothing is ever named in a file system: the memory goes with the last fd
 * and mapping, whoever holds them and however they end. */
#ifndef BEAM_SHM_H
#define BEAM_SHM_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "beam/buf.h"
#include "node.h"

/* Opens the memfd process pid holds as its fd fd_num through /proc, checks
 * it (a memfd of len bytes sealed against grow and shrink) and maps it
 * read-only, charging nothing: *map (len bytes) and *fd_out (this process's
 * own fd, close-on-exec) are the caller's to munmap and close; *ino (may be
 * NULL) is its inode. The one adopting code: beam_shm_adopt for values, and
 * a worker's call board (boards.h). 0; -EINVAL: not such a memfd; another
 * negative errno when it cannot be opened or mapped (nothing is left then). */
int beam_shm_map(long pid, int64_t fd_num, size_t len, void **map, int *fd_out, uint64_t *ino);
/* Adopts the memfd process pid holds as its fd, len bytes: *out is a buffer
 * whose data is the read-only mapping (one reference to the caller; the
 * last one unmaps it, closes the fd and gives len back to the budget).
 * 0; -ENOSPC: len does not fit in what is left of node->shm_budget;
 * -EINVAL: not a memfd of len bytes sealed against grow and shrink; another negative errno when it
 * cannot be opened or mapped. */
int beam_shm_adopt(beam_node_t *node, long pid, int64_t fd, size_t len, beam_buf_t **out);
/* Whether b is an adopted value's buffer. */
int beam_shm_is(const beam_buf_t *b);
/* Packs what a reader on this node needs to map b's value (b adopted):
 * {"fd": beamd's fd, "size": bytes, "ino": the memfd's inode}. */
void beam_shm_pack(msgpack_packer *pk, const beam_buf_t *b);

#endif
