/* cluster.c — the member table: who is in the cluster, alive or not, with
 * what resources, and starting or killing workers on any member. */
#include "cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "port.h"

static void append(beam_node_t *node, beam_member_t *m)
{
    beam_member_t **tail = &node->members;
    while (*tail)
        tail = &(*tail)->next;
    *tail = m;
}

int beam_cluster_init_self(beam_node_t *node)
{
    beam_member_t *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->index = node->node_index;
    memcpy(m->node_id, node->node_id, BEAM_NODE_ID_SIZE);
    memcpy(m->hex, node->node_hex, sizeof m->hex);
    snprintf(m->ip, sizeof m->ip, "%s", node->node_ip);
    snprintf(m->hostname, sizeof m->hostname, "%s", node->hostname);
    snprintf(m->socket, sizeof m->socket, "%s", node->socket_path);
    m->alive = 1;
    m->is_head = 1;
    m->local = 1;
    m->ops = node->self_ops;
    m->pool = &node->pool;
    m->joined_ms = uv_now(node->loop);
    node->self = m;
    node->next_member = node->node_index + 1;
    append(node, m);
    return 0;
}

/* 1 if a client, an actor or a bundle still points at m (dead actors keep
 * their member until their record goes). */
static int referenced(beam_node_t *node, const beam_member_t *m)
{
    return m->clients > 0 || (node->hooks.member_in_use && node->hooks.member_in_use(node, m));
}

/* Keeps the table's dead records to the newest BEAM_MAX_DEAD_MEMBERS that
 * nothing points at any more, so a flapping node cannot grow it forever. */
static void prune_dead(beam_node_t *node)
{
    size_t dead = 0;
    for (beam_member_t *m = node->members; m; m = m->next)
        dead += !m->alive;
    for (beam_member_t **p = &node->members; *p && dead > BEAM_MAX_DEAD_MEMBERS;) {
        beam_member_t *m = *p;
        if (m->alive || m->local || referenced(node, m)) {
            p = &m->next;
            continue;
        }
        *p = m->next;
        beam_pool_destroy(&m->own_pool);
        free(m->death);
        free(m);
        dead--;
    }
}

static size_t alive_count(const beam_node_t *node)
{
    size_t n = 0;
    for (const beam_member_t *m = node->members; m; m = m->next)
        n += m->alive;
    return n;
}

beam_member_t *beam_cluster_add(beam_node_t *node, const char *node_id, const char *ip, const char *hostname,
                                const char *socket, beam_pool_t *pool, const beam_member_ops_t *ops,
                                struct beam_link_s *link)
{
    prune_dead(node);
    if (alive_count(node) >= BEAM_MAX_MEMBERS)
        return NULL;
    beam_member_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->index = node->next_member++;
    memcpy(m->node_id, node_id, BEAM_NODE_ID_SIZE);
    beam_id_hex(node_id, BEAM_NODE_ID_SIZE, m->hex);
    snprintf(m->ip, sizeof m->ip, "%s", ip);
    snprintf(m->hostname, sizeof m->hostname, "%s", hostname);
    snprintf(m->socket, sizeof m->socket, "%s", socket);
    m->alive = 1;
    m->own_pool = *pool;
    memset(pool, 0, sizeof *pool);
    m->pool = &m->own_pool;
    m->ops = ops;
    m->link = link;
    m->joined_ms = uv_now(node->loop);
    append(node, m);
    beam_log(BEAM_LOG_INFO, "node %s (%s) joined as member %u", m->hex, m->ip, m->index);
    return m;
}

beam_member_t *beam_cluster_find(beam_node_t *node, uint32_t index)
{
    for (beam_member_t *m = node->members; m; m = m->next)
        if (m->index == index)
            return m;
    return NULL;
}

uint32_t beam_cluster_client_node(const beam_node_t *node, const beam_port_t *p)
{
    return p->member ? p->member->index : node->self->index;
}

beam_member_t *beam_cluster_find_id(beam_node_t *node, const char *node_id)
{
    for (beam_member_t *m = node->members; m; m = m->next)
        if (memcmp(m->node_id, node_id, BEAM_NODE_ID_SIZE) == 0)
            return m;
    return NULL;
}

size_t beam_cluster_alive(beam_node_t *node, beam_member_t **out, size_t max)
{
    size_t n = 0;
    for (beam_member_t *m = node->members; m && n < max; m = m->next)
        if (m->alive)
            out[n++] = m;
    return n;
}

size_t beam_cluster_count(const beam_node_t *node)
{
    size_t n = 0;
    for (const beam_member_t *m = node->members; m; m = m->next)
        n++;
    return n;
}

void beam_cluster_member_lost(beam_node_t *node, beam_member_t *m, const char *why)
{
    if (!m->alive || m->local)
        return;
    m->alive = 0;
    free(m->death);
    m->death = strdup(why);
    m->link = NULL;
    beam_log(BEAM_LOG_WARN, "node %s (%s, member %u) is dead: %s", m->hex, m->ip, m->index, why);
    if (node->hooks.member_lost)
        node->hooks.member_lost(node, m, why);
}

int beam_cluster_spawn(beam_node_t *node, beam_member_t *m, const beam_spawn_t *s, long *pid)
{
    *pid = 0;
    if (!m->alive || !m->ops)
        return UV_EHOSTUNREACH;
    return m->ops->spawn(node, m, s, pid);
}

int beam_cluster_rebind(beam_node_t *node, beam_member_t *m, const char *from, const char *to,
                        const char *class_name)
{
    if (!m || !m->alive || !m->ops || !m->ops->rebind)
        return -ENOTSUP;
    return m->ops->rebind(node, m, from, to, class_name);
}

void beam_cluster_kill(beam_node_t *node, beam_member_t *m, const char *actor)
{
    if (m && m->alive && m->ops)
        m->ops->kill(node, m, actor);
}

void beam_cluster_destroy(beam_node_t *node)
{
    while (node->members) {
        beam_member_t *m = node->members;
        node->members = m->next;
        if (!m->local)
            beam_pool_destroy(&m->own_pool);
        free(m->death);
        free(m);
    }
    node->self = NULL;
}
