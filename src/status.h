/* status.h — the daemon's views, answered from the tables as they stand:
 * `status` (this node, the cluster's nodes, actors, placement groups,
 * objects, clients) and `pg_table` (one group or all). Read-only. */
#ifndef BEAM_STATUS_H
#define BEAM_STATUS_H

#include "request.h"

/* Replies to a `status` request. */
void beam_status(beam_req_t *r);
/* Replies to a `pg_table` request ("pg" optional: one group, or every one). */
void beam_status_pg_table(beam_req_t *r);

#endif
