/* node.h — the daemon's state for its node: configuration, identity, the
 * resource pool and the heads of every table. One per beamd; each module
 * reaches its tables through it (no globals). */
#ifndef BEAM_NODE_H
#define BEAM_NODE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "beam/codec.h"
#include "ids.h"
#include "resources.h"

struct beam_object_s;
struct beam_actor_s;
struct beam_conn_s;
struct beam_pg_s;
struct beam_proc_s;
struct beam_member_s;
struct beam_link_s;

typedef struct beam_node_s {
    uv_loop_t *loop;
    beam_limits_t limits;
    size_t soft_outq; /* stop reading a client whose unsent bytes pass this */
    size_t max_outq;  /* drop a client whose unsent bytes pass this */

    char node_id[BEAM_NODE_ID_SIZE];
    char node_hex[2 * BEAM_NODE_ID_SIZE + 1];
    uint32_t node_index;
    char node_ip[64];
    char hostname[256];
    char socket_path[108];
    int is_head;

    beam_pool_t pool;

    struct beam_object_s *objects; /* uthash by id */
    size_t object_bytes;
    struct beam_actor_s *actors;   /* uthash by id */
    struct beam_actor_s *pending;  /* actors waiting for resources, FIFO */
    struct beam_pg_s *pgs;         /* placement groups, uthash by id */
    struct beam_pg_s *pending_pgs; /* groups waiting for resources, FIFO */
    struct beam_pg_s *removed_pgs, *removed_tail; /* freed groups' rows, oldest first (placement.c) */
    size_t nremoved, removed_bytes;
    struct beam_conn_s *conns;     /* live connections (utlist) */
    struct beam_proc_s *procs;     /* worker processes on this node, uthash by actor id */
    struct beam_member_s *members; /* the cluster's nodes, by index (the head's table) */
    struct beam_member_s *self;    /* this node's own entry */
    uint32_t next_member;
    struct beam_link_s *head_link; /* a member node: its link to the head */
    struct links_s *links;         /* the cluster side: listener, links, options (link.c) */
    int is_member;                 /* joined a head (--address): relays its clients */
    struct beam_conn_s *doomed_conns; /* closed remote connections to free next turn */
    uv_timer_t reaper;

    /* what happens to a worker's output and exit: the actor table's on the
     * head, a message to the head on a member node */
    void (*on_proc_output)(struct beam_node_s *node, const char *actor, int stream, const char *text,
                           size_t len);
    void (*on_proc_exit)(struct beam_node_s *node, const char *actor, long pid, int64_t status,
                         int term_signal);
    /* the op table, for a frame from a client on another node (relay.c;
     * beamd.c sets beam_dispatch) */
    void (*dispatch)(struct beam_conn_s *conn, const char *frame, size_t len);
    /* a member was welcomed by its head (beamd announces readiness then) */
    void (*on_joined)(struct beam_node_s *node);
    int ready_fd;
    int announced;
    uint32_t next_conn;
    uint64_t start_ms;
    int stopping;
} beam_node_t;

#endif
