/* cluster.h — the cluster's node table as the head keeps it: each member's
 * identity, liveness and resource pool, and where its workers are started
 * (here through procs, elsewhere through the operations its link's owner
 * gave it). A lone daemon is a cluster of one: itself. A member's death is
 * told upward through node->hooks.member_lost. */
#ifndef BEAM_CLUSTER_H
#define BEAM_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "node.h"
#include "spawn.h"
#include "resources.h"

#define BEAM_MAX_MEMBERS 256     /* live nodes in one cluster */
#define BEAM_MAX_DEAD_MEMBERS 64 /* dead ones kept for the tables (ray.nodes() shows them) */

struct beam_member_s;

/* How a member starts and kills workers: procs for this node (wired in
 * hooks.c as node->self_ops), a message over the link for another (set by
 * the link's owner). */
typedef struct beam_member_ops_s {
    /* 0 (pid set when known at once, else 0) or a negative error */
    int (*spawn)(beam_node_t *node, struct beam_member_s *m, const beam_spawn_t *s, long *pid);
    void (*kill)(beam_node_t *node, struct beam_member_s *m, const char *actor);
    /* the worker started for actor `from` now serves actor `to` (a pooled
     * task worker taken by a new task): 0 or a negative error; NULL where
     * workers are not reused */
    int (*rebind)(beam_node_t *node, struct beam_member_s *m, const char *from, const char *to,
                  const char *class_name);
} beam_member_ops_t;

typedef struct beam_member_s {
    uint32_t index;
    char node_id[BEAM_NODE_ID_SIZE];
    char hex[2 * BEAM_NODE_ID_SIZE + 1];
    char ip[64];
    char hostname[256];
    char socket[108];
    int alive;
    int is_head;
    int local;               /* this daemon itself */
    beam_pool_t *pool;       /* &node->pool for the local member, else &own_pool */
    beam_pool_t own_pool;
    const beam_member_ops_t *ops; /* spawn and kill there */
    struct beam_link_s *link; /* a remote member's link (its ops' context) */
    uint32_t clients;         /* clients on it (session.c counts them) */
    char *death;
    uint64_t joined_ms;
    struct beam_member_s *next;
} beam_member_t;

/* Adds this daemon as member 1 (the head of its own cluster); its workers
 * are started through node->self_ops (NULL: none can be, until set). */
int beam_cluster_init_self(beam_node_t *node);
/* A node joined: a new member with the next index; pool is taken; its
 * workers are started and killed through ops (with link as their context). */
beam_member_t *beam_cluster_add(beam_node_t *node, const char *node_id, const char *ip, const char *hostname,
                                const char *socket, beam_pool_t *pool, const beam_member_ops_t *ops,
                                struct beam_link_s *link);
beam_member_t *beam_cluster_find(beam_node_t *node, uint32_t index);
/* The index of the node client p is on (its member's, else this node's):
 * with its connection number, the creator part of the ids it makes (ids.h). */
uint32_t beam_cluster_client_node(const beam_node_t *node, const struct beam_port_s *p);
beam_member_t *beam_cluster_find_id(beam_node_t *node, const char *node_id);
/* Alive members, self first; returns how many were put in out (at most max). */
size_t beam_cluster_alive(beam_node_t *node, beam_member_t **out, size_t max);
size_t beam_cluster_count(const beam_node_t *node);
/* Marks a member dead and tells node->hooks.member_lost (its actors die,
 * its clients are closed, its groups lose their bundles there). */
void beam_cluster_member_lost(beam_node_t *node, beam_member_t *m, const char *why);

/* Starts an actor's worker on member m. Returns 0 (pid set when local, 0
 * when it is started remotely and not yet reported) or a negative error. */
int beam_cluster_spawn(beam_node_t *node, beam_member_t *m, const beam_spawn_t *s, long *pid);
/* The worker of actor `from` on member m now serves actor `to`, whose
 * class is class_name. Returns 0, or -ENOTSUP where m cannot, or its ops'
 * error. */
int beam_cluster_rebind(beam_node_t *node, beam_member_t *m, const char *from, const char *to,
                        const char *class_name);
/* Kills an actor's worker on member m. */
void beam_cluster_kill(beam_node_t *node, beam_member_t *m, const char *actor);
void beam_cluster_destroy(beam_node_t *node);

#endif
