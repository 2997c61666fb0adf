/* cluster.c — the member table: who is in the cluster, alive or not, with
 * what resources, and starting or killing workers on any member. */
#include "cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors.h"
#include "conn.h"
#include "link.h"
#include "log.h"
#include "placement.h"

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
    m->pool = &node->pool;
    m->joined_ms = uv_now(node->loop);
    node->self = m;
    node->next_member = node->node_index + 1;
    append(node, m);
    return 0;
}

/* 1 if an actor or a bundle still points at m (dead actors keep their
 * member until their record goes). */
static int referenced(beam_node_t *node, const beam_member_t *m)
{
    for (beam_actor_t *a = node->actors; a; a = a->hh.next)
        if (a->member == m)
            return 1;
    for (beam_pg_t *pg = node->pgs; pg; pg = pg->hh.next)
        for (uint32_t i = 0; i < pg->nbundles; i++)
            if (pg->bundles[i].member == m)
                return 1;
    for (beam_conn_t *c = node->conns; c; c = c->next)
        if (c->member == m)
            return 1;
    return 0;
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
                                const char *socket, beam_pool_t *pool, struct beam_link_s *link)
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
    /* its actors die of the node's death; then its clients, whose actors
     * elsewhere and groups go with them as owners */
    beam_actors_member_lost(node, m, "The actor died because its node has died.");
    beam_pgs_member_lost(node, m);
    for (;;) {
        beam_conn_t *victim = NULL;
        for (beam_conn_t *c = node->conns; c; c = c->next)
            if (c->member == m && !c->closing) {
                victim = c;
                break;
            }
        if (!victim)
            break;
        victim->remote_closed = 1;
        beam_conn_close(victim, "its node died");
    }
    beam_actors_schedule(node);
}

static void pack_strv(msgpack_packer *pk, char *const *v)
{
    size_t n = 0;
    for (char *const *p = v; p && *p; p++)
        n++;
    msgpack_pack_array(pk, n);
    for (char *const *p = v; p && *p; p++)
        beam_pack_str(pk, *p);
}

int beam_cluster_spawn(beam_node_t *node, beam_member_t *m, const beam_spawn_t *s, long *pid)
{
    *pid = 0;
    if (m->local)
        return beam_proc_spawn(node, s, pid);
    if (!m->alive || !m->link)
        return UV_EHOSTUNREACH;
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "spawn", 10);
    beam_pack_key(&enc.pk, "actor");
    beam_pack_bin(&enc.pk, s->actor, BEAM_ACTOR_ID_SIZE);
    beam_pack_key(&enc.pk, "class_name");
    beam_pack_str(&enc.pk, s->class_name);
    beam_pack_key(&enc.pk, "python");
    beam_pack_str(&enc.pk, s->python);
    beam_pack_key(&enc.pk, "cwd");
    beam_pack_str(&enc.pk, s->cwd ? s->cwd : "");
    beam_pack_key(&enc.pk, "env");
    pack_strv(&enc.pk, s->env);
    beam_pack_key(&enc.pk, "sys_path");
    pack_strv(&enc.pk, s->sys_path);
    beam_pack_key(&enc.pk, "gpus");
    beam_pack_str(&enc.pk, s->gpus);
    beam_pack_key(&enc.pk, "token");
    beam_pack_str(&enc.pk, s->token);
    beam_pack_key(&enc.pk, "noset_cuda");
    msgpack_pack_int(&enc.pk, s->noset_cuda);
    beam_pack_key(&enc.pk, "owner_pid");
    msgpack_pack_uint32(&enc.pk, s->owner_pid);
    beam_enc_end(&enc, 0);
    return beam_link_send_enc(m->link, &enc);
}

void beam_cluster_kill(beam_node_t *node, beam_member_t *m, const char *actor)
{
    if (!m)
        return;
    if (m->local) {
        beam_proc_kill(node, actor);
        return;
    }
    if (!m->alive || !m->link)
        return;
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "kill_worker", 1);
    beam_pack_key(&enc.pk, "actor");
    beam_pack_bin(&enc.pk, actor, BEAM_ACTOR_ID_SIZE);
    beam_enc_end(&enc, 0);
    beam_link_send_enc(m->link, &enc);
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
