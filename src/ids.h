/* ids.h — beam's ids: sizes, the home node in the first 4 bytes, hex form,
 * and random bytes. Layouts are in docs/DESIGN.md (Ids). */
#ifndef BEAM_IDS_H
#define BEAM_IDS_H

#include <stddef.h>
#include <stdint.h>

#include "beam/protocol.h"

/* The node index an id was made on: its first 4 bytes, big-endian. */
uint32_t beam_id_home(const char *id);
/* Writes 2*n lowercase hex digits and a NUL to out (2*n+1 bytes). */
void beam_id_hex(const char *id, size_t n, char *out);
/* Fills buf with n random bytes; returns 0 or a negative errno. */
int beam_random(void *buf, size_t n);

#endif
