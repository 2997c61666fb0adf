/* status.c — the daemon's views: the `status` op (this node, the cluster's
 * nodes, actors, placement groups, objects, clients), `pg_table`, and the
 * `board` op by which a worker hands over the call board those views read
 * its direct calls from (boards.h). */
#include "status.h"

#include <errno.h>
#include <unistd.h>

#include "actors.h"
#include "boards.h"
#include "cluster.h"
#include "port.h"
#include "session.h"
#include "objects.h"
#include "placement.h"

static const beam_field_spec_t pg_table_fields[] = {BEAM_FIELD("pg", BEAM_F_ID, 0, .size = BEAM_PG_ID_SIZE)};

void beam_status_pg_table(beam_req_t *r)
{
    beam_field_val_t v[1];
    if (BEAM_REQ_FIELDS(r, pg_table_fields, v) < 0)
        return;
    const char *id = v[0].present ? v[0].s : NULL;
    beam_pg_t *one = id ? beam_pg_find(r->node, id) : NULL;
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_reply_ok(&enc, r->msgid);
    msgpack_pack_map(&enc.pk, 1);
    beam_pack_key(&enc.pk, "groups");
    if (id) {
        msgpack_pack_array(&enc.pk, one ? 1 : 0);
        if (one)
            beam_pg_pack(&enc.pk, one);
    } else {
        msgpack_pack_array(&enc.pk, HASH_COUNT(r->node->pgs));
        for (beam_pg_t *pg = r->node->pgs; pg; pg = pg->hh.next)
            beam_pg_pack(&enc.pk, pg);
    }
    beam_enc_end(&enc, 0);
    beam_port_send_enc(r->conn, &enc);
}

/* --- board --- */

/* A worker hands over its call board, to its own node's daemon only (the
 * one that can open its fds: as for the `shm` op; a member's shortcut takes
 * its own workers' boards before they reach the head). */
void beam_status_board(beam_req_t *r)
{
    beam_field_val_t v[BEAM_BOARD_NFIELDS];
    beam_port_t *c = r->conn;
    if (c->role != BEAM_ROLE_WORKER || !c->actor) {
        beam_port_reply_error(c, r->msgid, "denied", "only an actor's worker may send this");
        return;
    }
    if (BEAM_REQ_FIELDS(r, beam_board_fields, v) < 0)
        return;
    int local = c->member == r->node->self && !r->node->is_member;
    beam_boards_reply(c, r->msgid,
                      local ? beam_boards_adopt(r->node, c, beam_actor_id(c->actor), c->pid, v[BEAM_BOARD_F_FD].i,
                                                v[BEAM_BOARD_F_SIZE].i)
                            : -EXDEV);
}

/* --- status --- */

static void pack_resources(msgpack_packer *pk, const beam_pool_t *pool, int avail)
{
    msgpack_pack_map(pk, pool->nres);
    for (size_t i = 0; i < pool->nres; i++) {
        beam_pack_key(pk, pool->res[i].name);
        msgpack_pack_double(pk, (double)(avail ? pool->res[i].avail : pool->res[i].total) / BEAM_RES_UNIT);
    }
}

static void pack_actor(msgpack_packer *pk, const beam_node_t *node, const beam_actor_t *actor)
{
    beam_actor_info_t info, *a = &info;
    beam_actor_info(actor, a);
    msgpack_pack_map(pk, 14);
    beam_pack_key(pk, "actor_id");
    beam_pack_str(pk, a->hex);
    beam_pack_key(pk, "class_name");
    beam_pack_str(pk, a->class_name);
    beam_pack_key(pk, "name");
    beam_pack_str(pk, a->name);
    beam_pack_key(pk, "namespace");
    beam_pack_str(pk, a->namespace);
    beam_pack_key(pk, "detached");
    if (a->detached)
        msgpack_pack_true(pk);
    else
        msgpack_pack_false(pk);
    beam_pack_key(pk, "state");
    beam_pack_str(pk, beam_actor_ray_state(actor));
    beam_pack_key(pk, "num_restarts");
    msgpack_pack_uint32(pk, a->restarts);
    beam_pack_key(pk, "pid");
    msgpack_pack_int64(pk, a->pid);
    beam_pack_key(pk, "node_id");
    beam_pack_str(pk, a->member ? a->member->hex : "");
    beam_pack_key(pk, "gpu_ids");
    int ngpus = a->grant ? a->grant->ngpus : 0;
    msgpack_pack_array(pk, ngpus);
    for (int i = 0; i < ngpus; i++)
        beam_pack_str(pk, a->pool->gpu_ids[a->grant->gpu_index[i]]);
    beam_pack_key(pk, "placement_group");
    beam_pack_str(pk, a->pg ? a->pg->hex : "");
    beam_pack_key(pk, "queued");
    msgpack_pack_uint32(pk, a->queued);
    beam_pack_key(pk, "running");
    msgpack_pack_uint32(pk, a->sent + beam_boards_running(node, beam_actor_id(actor)));
    beam_pack_key(pk, "death");
    beam_pack_str(pk, a->death);
}

/* [{id, available}] for each GPU device of a pool. */
static void pack_gpus(msgpack_packer *pk, const beam_pool_t *pool)
{
    msgpack_pack_array(pk, pool->ngpus);
    for (int i = 0; i < pool->ngpus; i++) {
        msgpack_pack_map(pk, 2);
        beam_pack_key(pk, "id");
        beam_pack_str(pk, pool->gpu_ids[i]);
        beam_pack_key(pk, "available");
        msgpack_pack_double(pk, (double)pool->gpu_avail[i] / BEAM_RES_UNIT);
    }
}

static void pack_member(msgpack_packer *pk, const beam_member_t *m)
{
    msgpack_pack_map(pk, 11);
    beam_pack_key(pk, "node_id");
    beam_pack_str(pk, m->hex);
    beam_pack_key(pk, "node_index");
    msgpack_pack_uint32(pk, m->index);
    beam_pack_key(pk, "node_ip");
    beam_pack_str(pk, m->ip);
    beam_pack_key(pk, "hostname");
    beam_pack_str(pk, m->hostname);
    beam_pack_key(pk, "socket");
    beam_pack_str(pk, m->socket);
    beam_pack_key(pk, "is_head");
    msgpack_pack_int(pk, m->is_head);
    beam_pack_key(pk, "alive");
    if (m->alive)
        msgpack_pack_true(pk);
    else
        msgpack_pack_false(pk);
    beam_pack_key(pk, "death");
    beam_pack_str(pk, m->death ? m->death : "");
    beam_pack_key(pk, "resources_total");
    pack_resources(pk, m->pool, 0);
    beam_pack_key(pk, "resources_available");
    pack_resources(pk, m->pool, 1);
    beam_pack_key(pk, "gpus");
    pack_gpus(pk, m->pool);
}

void beam_status(beam_req_t *r)
{
    beam_node_t *node = r->node;
    uint32_t drivers = 0, workers = 0, ctls = 0;
    for (beam_session_t *s = node->sessions; s; s = s->next) {
        drivers += s->port.role == BEAM_ROLE_DRIVER;
        workers += s->port.role == BEAM_ROLE_WORKER;
        ctls += s->port.role == BEAM_ROLE_CTL;
    }
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_reply_ok(&enc, r->msgid);
    msgpack_packer *pk = &enc.pk;
    beam_board_counts_t direct = beam_boards_totals(node);
    msgpack_pack_map(pk, 21);
    beam_pack_key(pk, "direct_calls"); /* direct calls workers of this node started (boards.h) */
    msgpack_pack_uint64(pk, direct.started);
    beam_pack_key(pk, "local_calls"); /* calls members ran the local way (actors.h, localcalls.c) */
    msgpack_pack_uint64(pk, node->local_calls);
    beam_pack_key(pk, "gets"); /* get requests answered or held here */
    msgpack_pack_uint64(pk, node->gets);
    beam_pack_key(pk, "results_pushed"); /* results pushed to their callers (submit's push, or direct) */
    msgpack_pack_uint64(pk, node->results_pushed + direct.pushed);
    beam_pack_key(pk, "nodes");
    msgpack_pack_array(pk, beam_cluster_count(node));
    for (const beam_member_t *m = node->members; m; m = m->next)
        pack_member(pk, m);
    beam_pack_key(pk, "node_id");
    beam_pack_str(pk, node->node_hex);
    beam_pack_key(pk, "node_ip");
    beam_pack_str(pk, node->node_ip);
    beam_pack_key(pk, "hostname");
    beam_pack_str(pk, node->hostname);
    beam_pack_key(pk, "is_head");
    msgpack_pack_int(pk, node->is_head);
    beam_pack_key(pk, "socket");
    beam_pack_str(pk, node->socket_path);
    beam_pack_key(pk, "pid");
    msgpack_pack_int64(pk, (int64_t)getpid());
    beam_pack_key(pk, "uptime_ms");
    msgpack_pack_uint64(pk, uv_now(node->loop) - node->start_ms);
    beam_pack_key(pk, "resources_total");
    pack_resources(pk, &node->pool, 0);
    beam_pack_key(pk, "resources_available");
    pack_resources(pk, &node->pool, 1);
    beam_pack_key(pk, "gpus");
    pack_gpus(pk, &node->pool);
    beam_pack_key(pk, "actors");
    msgpack_pack_array(pk, beam_actors_count(node));
    for (beam_actor_t *a = beam_actors_first(node); a; a = beam_actors_next(a))
        pack_actor(pk, node, a);
    beam_pack_key(pk, "placement_groups");
    msgpack_pack_array(pk, HASH_COUNT(node->pgs));
    for (beam_pg_t *pg = node->pgs; pg; pg = pg->hh.next)
        beam_pg_pack(pk, pg);
    beam_pack_key(pk, "objects");
    msgpack_pack_map(pk, 2);
    beam_pack_key(pk, "count");
    msgpack_pack_uint64(pk, beam_object_count(node));
    beam_pack_key(pk, "bytes");
    msgpack_pack_uint64(pk, node->object_bytes);
    beam_pack_key(pk, "object_store"); /* values in shared memory (shm.h) */
    msgpack_pack_map(pk, 3);
    beam_pack_key(pk, "count");
    msgpack_pack_uint32(pk, node->shm_objects);
    beam_pack_key(pk, "bytes");
    msgpack_pack_uint64(pk, node->shm_used);
    beam_pack_key(pk, "budget");
    msgpack_pack_uint64(pk, node->shm_budget);
    beam_pack_key(pk, "clients");
    msgpack_pack_map(pk, 3);
    beam_pack_key(pk, "drivers");
    msgpack_pack_uint32(pk, drivers);
    beam_pack_key(pk, "workers");
    msgpack_pack_uint32(pk, workers);
    beam_pack_key(pk, "ctl");
    msgpack_pack_uint32(pk, ctls);
    beam_pack_key(pk, "version");
    beam_pack_str(pk, BEAM_VERSION);
    beam_enc_end(&enc, 0);
    beam_port_send_enc(r->conn, &enc);
}
