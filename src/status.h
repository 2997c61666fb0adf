/* status.h — the daemon's views, answered from the tables as they stand:
 * `status` (this node, the cluster's nodes, actors, placement groups,
 * objects, clients, the direct calls on workers' call boards) and
 * `pg_table` (one group or all). Read-only, but for `board`, which adopts
 * what they read. */
#ifndef BEAM_STATUS_H
#define BEAM_STATUS_H

#include "request.h"

/* Replies to a `status` request. */
void beam_status(beam_req_t *r);
/* A worker's `board` request: its call board adopted (boards.h), {} or an
 * error reply (denied: not an actor's worker, not this node's, or the fd
 * cannot be opened; bad_request: not a sealed memfd of 4096 bytes, or a
 * second board). */
void beam_status_board(beam_req_t *r);
/* Replies to a `pg_table` request ("pg" optional: one group, or every one). */
void beam_status_pg_table(beam_req_t *r);

#endif
