/* placement.h — placement groups: the placement algorithm (pure: bundles onto
 * node pools by strategy, all or nothing), and the group table (reserving
 * bundles, their own pools for actors, ready waiters, removal). */
#ifndef BEAM_PLACEMENT_H
#define BEAM_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>
#include <uthash.h>

#include "node.h"
#include "port.h"
#include "resources.h"

enum { BEAM_PG_PACK = 0, BEAM_PG_SPREAD, BEAM_PG_STRICT_PACK, BEAM_PG_STRICT_SPREAD };
enum { BEAM_PG_PENDING = 0, BEAM_PG_CREATED, BEAM_PG_REMOVED, BEAM_PG_RESCHEDULING };

#define BEAM_PG_MAX_BUNDLES 1024
/* Removed groups are freed once their bundles are back, as Ray's GCS drops
 * them from its registry; the table keeps a row for the most recent ones
 * (state REMOVED), at most this many and this many bytes, oldest out first. */
#define BEAM_PG_HISTORY 64
#define BEAM_PG_HISTORY_BYTES (1u << 20)

/* Chooses a node (an index into nodes) for every bundle so that all fit at
 * once, by strategy: PACK fills a node before the next, SPREAD prefers
 * distinct nodes, STRICT_PACK puts all on one node, STRICT_SPREAD each on a
 * distinct node. The pools are not changed. Returns 0 with out_node filled,
 * -EAGAIN when it cannot be placed now, -ENOSPC when it never can be (by the
 * nodes' totals), -ENOMEM. */
int beam_place(beam_pool_t *const *nodes, size_t nnodes, const beam_demand_t *bundles, size_t nbundles,
               int strategy, int *out_node);
/* Parses "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"; -1 otherwise. */
int beam_pg_strategy(const char *name, size_t len);
const char *beam_pg_strategy_name(int strategy);
const char *beam_pg_state_name(int state);

typedef struct beam_bundle_s {
    beam_demand_t demand;
    int placed;
    struct beam_member_s *member; /* the node it is reserved on */
    beam_grant_t grant; /* what it took from its node's pool */
    beam_pool_t pool;   /* what actors placed in it take from */
} beam_bundle_t;

typedef struct beam_pg_waiter_s {
    char obj[28];
    char *value;
    size_t len;
    struct beam_pg_waiter_s *next;
} beam_pg_waiter_t;

/* A pg_remove request that is answered once the group's bundles are back. */
typedef struct beam_pg_remover_s {
    beam_port_t *port;
    uint64_t msgid;
    struct beam_pg_remover_s *next;
} beam_pg_remover_t;

typedef struct beam_pg_s {
    char id[BEAM_PG_ID_SIZE];
    char hex[2 * BEAM_PG_ID_SIZE + 1];
    char *name;
    int strategy;
    int state;
    int detached;
    uint32_t nbundles;
    beam_bundle_t *bundles;
    beam_port_t *owner;
    beam_pg_waiter_t *waiters;
    uint32_t users; /* actors holding a grant from its bundles */
    uint64_t created_ns, placed_ns; /* uv_hrtime(): creation latency in Ray's stats */
    uint32_t attempts;
    beam_pg_remover_t *removers;
    int removing; /* inside beam_pg_remove: its bundles go back once that is done */
    /* a removed group's row (its bundles freed, nbundles 0): the bundle
     * specs as packed msgpack, then from row_nodes_at on the nodes they had
     * (bundles_to_node_id, kept as Ray keeps it), and how many there were */
    char *row_bundles;
    size_t row_len, row_nodes_at;
    uint32_t row_nbundles;
    struct beam_pg_s *removed_next; /* the history, oldest first */
    struct beam_pg_s *pending_next;
    UT_hash_handle hh;
} beam_pg_t;

beam_pg_t *beam_pg_find(beam_node_t *node, const char *id);
/* Adds a group (taking name) and tries to place it. Returns 0, -EEXIST, -ENOMEM. */
int beam_pg_create(beam_node_t *node, beam_port_t *owner, const char *id, char *name, int strategy,
                   const beam_demand_t *bundles, uint32_t n, int detached);
/* Marks it removed, kills the actors placed in it (node->hooks.pg_removed),
 * fails its ready waiters; the bundles go back to the node once those
 * actors' workers have exited, and then (not before) port gets its {} reply
 * to msgid (none when port is NULL), so a caller that makes the next group at once finds them free. The
 * group is then freed, leaving a row in the bounded history. pg may be freed
 * when this returns. */
void beam_pg_remove(beam_node_t *node, beam_pg_t *pg, beam_port_t *port, uint64_t msgid);
/* Packs the group's pg_table row (a map) into pk; a removed group's from its
 * history row. */
void beam_pg_pack(msgpack_packer *pk, const beam_pg_t *pg);
/* Completes obj with value (taken) once the group is placed (now if it is);
 * with LOST if it is removed first. */
int beam_pg_ready(beam_node_t *node, beam_pg_t *pg, const char *obj, char *value, size_t len);
/* Places pending groups in order; returns how many were placed. */
int beam_pgs_schedule(beam_node_t *node);
/* An actor placed in pg gave its grant back. */
void beam_pg_user_gone(beam_node_t *node, beam_pg_t *pg);
/* A client closed: its groups (not detached) pass to heir (a worker's
 * driver, NULL for none) or are removed, and its pg_remove requests are
 * dropped unanswered. */
void beam_pgs_conn_gone(beam_node_t *node, beam_port_t *c, beam_port_t *heir);
/* A member died: groups with bundles there lose them (state RESCHEDULING). */
void beam_pgs_member_lost(beam_node_t *node, struct beam_member_s *m);
void beam_pgs_destroy(beam_node_t *node);

#endif
