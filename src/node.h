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
struct beam_port_s;
struct beam_session_s;
struct beam_pg_s;
struct beam_proc_s;
struct beam_member_s;
struct beam_link_s;
struct beam_shortcut_s;
struct beam_member_ops_s;
struct beam_boards_s;

/* The head: clients one member may relay at once (client_open), as a
 * daemon's own clients are bounded by its fds (beamd raises its limit to at
 * most 65536); more are closed at open. --max-member-clients sets it. */
#define BEAM_MAX_MEMBER_CLIENTS 65536u

typedef struct beam_node_s {
    uv_loop_t *loop;
    beam_limits_t limits;
    size_t soft_outq; /* stop reading a client whose unsent bytes pass this */
    size_t max_outq;  /* drop a client whose unsent bytes pass this */
    uint32_t max_member_clients; /* the head: a member's clients at once (0: BEAM_MAX_MEMBER_CLIENTS) */
    int worker_niceness; /* added to a worker's nice value: RAY_worker_niceness, else 15 (Ray's raylet) */

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
    size_t shm_budget;  /* object_store_memory: what values in shared memory may take (shm.h) */
    size_t shm_used;    /* what they take now */
    uint32_t shm_objects; /* how many there are */
    struct beam_actor_s *actors;   /* uthash by id */
    struct beam_actor_s *pending;  /* actors waiting for resources, FIFO */
    struct beam_pg_s *pgs;         /* placement groups, uthash by id */
    struct beam_pg_s *pending_pgs; /* groups waiting for resources, FIFO */
    struct beam_pg_s *removed_pgs, *removed_tail; /* freed groups' rows, oldest first (placement.c) */
    size_t nremoved, removed_bytes;
    struct beam_session_s *sessions; /* live clients (utlist, session.c) */
    struct beam_proc_s *procs;     /* worker processes on this node, uthash by actor id */
    struct beam_member_s *members; /* the cluster's nodes, by index (the head's table) */
    struct beam_member_s *self;    /* this node's own entry */
    uint32_t next_member;
    struct beam_link_s *head_link; /* a member node: its link to the head */
    struct links_s *links;         /* the cluster side: listener, links, options (link.c) */
    int is_member;                 /* joined a head (--address): relays its clients */
    struct beam_shortcut_s *local;    /* a member: the calls that stay on it (shortcut.c) */
    uint64_t local_calls;          /* the head: calls members ran the local way (their submit records in local_batch) */
    uint64_t gets;                 /* get requests this node answered or parked (dispatch.c, localresults.c) */
    uint64_t results_pushed;       /* `result` pushes sent to submitting clients (beam_result_push in objects.c: the head's objects and a member's kept results) */
    struct beam_boards_s *boards;  /* workers' call boards and what dropped ones counted (boards.h) */
    struct beam_session_s *closing_sessions; /* remote clients to end next turn (session.c) */
    uv_timer_t reaper;

    /* what happens to a worker's output and exit: the actor table's on the
     * head, a message to the head on a member node */
    void (*on_proc_output)(struct beam_node_s *node, const char *actor, int stream, const char *text,
                           size_t len);
    void (*on_proc_exit)(struct beam_node_s *node, const char *actor, long pid, int64_t status,
                         int term_signal);
    /* how this node's own member starts, kills and rebinds its workers
     * (procs, wired in hooks.c; cluster.h) */
    const struct beam_member_ops_s *self_ops;
    /* a member was welcomed by its head (beamd announces readiness then) */
    void (*on_joined)(struct beam_node_s *node);
    /* Upward calls, wired in beamd.c: a lower layer tells a higher one.
     * Each may be NULL (a table's unit test), and then nothing happens. */
    struct {
        /* conn accepted a client stream: its owner takes it (0), or refuses it */
        int (*conn_open)(struct beam_node_s *node, struct beam_conn_s *conn);
        /* a client's frame for the op table (dispatch) */
        /* buf: the frame's own buffer, or NULL (beam_dispatch) */
        void (*dispatch)(struct beam_port_s *port, const char *frame, size_t len, struct beam_buf_s *buf);
        /* objects: a carried actor id is pinned (pin 1) or unpinned (0) */
        void (*actor_pin)(struct beam_node_s *node, const char *actor, int pin);
        /* placement: a group is removed (its actors die), or its record is
         * about to be freed (no actor may point at it any more) */
        void (*pg_removed)(struct beam_node_s *node, struct beam_pg_s *pg);
        void (*pg_forget)(struct beam_node_s *node, struct beam_pg_s *pg);
        /* resources came back or a group was placed: pending actors may start */
        void (*schedule)(struct beam_node_s *node);
        /* cluster: member m is dead (its actors, groups and clients go) */
        void (*member_lost)(struct beam_node_s *node, struct beam_member_s *m, const char *why);
        /* cluster: 1 while an actor or a bundle still points at m */
        int (*member_in_use)(struct beam_node_s *node, const struct beam_member_s *m);
        /* a member's relayed client: a frame on its way to the head, or its
         * end (frame NULL), before the head hears of it; 1 when the member
         * took the frame itself (shortcut.c: calls that stay on the member) */
        int (*relay_up)(struct beam_node_s *node, uint32_t vconn, const char *frame, size_t len);
    } hooks;
    int ready_fd;
    int announced;
    uint32_t next_conn;
    uint64_t start_ms;
    int stopping;
} beam_node_t;

#endif
