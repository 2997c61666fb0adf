/* ids.h — beam's ids: sizes, the home node in the first 4 bytes, hex form,
 * and random bytes. Layouts are in docs/DESIGN.md (Ids). */
#ifndef BEAM_IDS_H
#define BEAM_IDS_H

#include <stddef.h>
#include <stdint.h>

#include "beam/protocol.h"

/* The node index an id was made on: its first 4 bytes, big-endian. */
uint32_t beam_id_home(const char *id);
/* An id's creator part: the node index and the connection number (its
 * first 8 bytes, big-endian) of the client that made it, as hello gave
 * them. 1 when id was made by the client (node_index, conn): the ids a
 * client may use for a new object (put, submit, pg_ready) are its own. */
#define BEAM_ID_CREATOR_BYTES 8
int beam_id_made_by(const char *id, uint32_t node_index, uint32_t conn);
/* What a refusal of another's id says. */
#define BEAM_ID_NOT_OWN "its first 8 bytes must be the node index and connection number its hello gave"
/* An object id's sequence number (bytes 8..15, big-endian): a client's
 * counter, so its new ids mostly grow. */
uint64_t beam_object_seq(const char *obj);
/* Writes 2*n lowercase hex digits and a NUL to out (2*n+1 bytes). */
void beam_id_hex(const char *id, size_t n, char *out);
/* Fills buf with n random bytes; returns 0 or a negative errno. */
int beam_random(void *buf, size_t n);

#endif
