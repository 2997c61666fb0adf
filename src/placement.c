/* placement.c — placing bundles on nodes by strategy, and the group table. */
#include "placement.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "log.h"
#include "objects.h"

/* ---------- the algorithm ---------- */

static void free_sims(beam_pool_t *sim, size_t n)
{
    for (size_t i = 0; i < n; i++)
        beam_pool_destroy(&sim[i]);
    free(sim);
}

static beam_pool_t *clone_all(beam_pool_t *const *nodes, size_t n, int fresh)
{
    beam_pool_t *sim = calloc(n ? n : 1, sizeof *sim);
    if (!sim)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (beam_pool_clone(&sim[i], nodes[i]) < 0) {
            free_sims(sim, i);
            return NULL;
        }
        if (fresh) { /* as if nothing were in use: for "can it ever fit" */
            for (size_t r = 0; r < sim[i].nres; r++)
                sim[i].res[r].avail = sim[i].res[r].total;
            for (int g = 0; g < sim[i].ngpus; g++)
                sim[i].gpu_avail[g] = BEAM_RES_UNIT;
        }
    }
    return sim;
}

static int take(beam_pool_t *pool, const beam_demand_t *d)
{
    beam_grant_t g;
    return beam_pool_take(pool, d, &g);
}

/* Tries the strategy on simulated pools (consumed as it goes). */
static int place_on(beam_pool_t *sim, size_t nnodes, const beam_demand_t *b, size_t nb, int strategy, int *out)
{
    int *count = calloc(nnodes ? nnodes : 1, sizeof *count);
    if (!count)
        return -ENOMEM;
    int rc = 0;
    if (strategy == BEAM_PG_STRICT_PACK) {
        rc = -EAGAIN;
        for (size_t n = 0; n < nnodes && rc != 0; n++) {
            beam_pool_t trial;
            if (beam_pool_clone(&trial, &sim[n]) < 0) {
                rc = -ENOMEM;
                break;
            }
            size_t i = 0;
            while (i < nb && take(&trial, &b[i]) == 0)
                out[i++] = (int)n;
            beam_pool_destroy(&trial);
            if (i == nb)
                rc = 0;
        }
        free(count);
        return rc;
    }
    for (size_t i = 0; i < nb && rc == 0; i++) {
        int best = -1;
        for (size_t n = 0; n < nnodes; n++) {
            if (strategy == BEAM_PG_STRICT_SPREAD && count[n] > 0)
                continue;
            beam_pool_t trial;
            if (beam_pool_clone(&trial, &sim[n]) < 0) {
                rc = -ENOMEM;
                break;
            }
            int fits = take(&trial, &b[i]) == 0;
            beam_pool_destroy(&trial);
            if (!fits)
                continue;
            if (best < 0)
                best = (int)n;
            else if (strategy == BEAM_PG_PACK && count[n] > count[best])
                best = (int)n; /* fill the node already in use */
            else if (strategy == BEAM_PG_SPREAD && count[n] < count[best])
                best = (int)n; /* the node with fewest of ours */
        }
        if (rc == 0 && best < 0)
            rc = -EAGAIN;
        if (rc == 0) {
            take(&sim[best], &b[i]);
            count[best]++;
            out[i] = best;
        }
    }
    free(count);
    return rc;
}

int beam_place(beam_pool_t *const *nodes, size_t nnodes, const beam_demand_t *bundles, size_t nbundles,
               int strategy, int *out_node)
{
    if (nbundles == 0)
        return 0;
    beam_pool_t *sim = clone_all(nodes, nnodes, 0);
    if (!sim)
        return -ENOMEM;
    int rc = place_on(sim, nnodes, bundles, nbundles, strategy, out_node);
    free_sims(sim, nnodes);
    if (rc != -EAGAIN)
        return rc;
    /* would it fit an idle cluster? if not, it never will */
    int *scratch = calloc(nbundles, sizeof *scratch);
    sim = scratch ? clone_all(nodes, nnodes, 1) : NULL;
    if (!sim) {
        free(scratch);
        return -ENOMEM;
    }
    int ever = place_on(sim, nnodes, bundles, nbundles, strategy, scratch);
    free_sims(sim, nnodes);
    free(scratch);
    return ever == 0 ? -EAGAIN : -ENOSPC;
}

static const char *strategies[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};

int beam_pg_strategy(const char *name, size_t len)
{
    for (int i = 0; i < 4; i++)
        if (strlen(strategies[i]) == len && memcmp(strategies[i], name, len) == 0)
            return i;
    return -1;
}

const char *beam_pg_strategy_name(int strategy)
{
    return strategy >= 0 && strategy < 4 ? strategies[strategy] : "?";
}

const char *beam_pg_state_name(int state)
{
    switch (state) {
    case BEAM_PG_PENDING: return "PENDING";
    case BEAM_PG_CREATED: return "CREATED";
    case BEAM_PG_RESCHEDULING: return "RESCHEDULING";
    default: return "REMOVED";
    }
}

/* ---------- the table ---------- */

beam_pg_t *beam_pg_find(beam_node_t *node, const char *id)
{
    beam_pg_t *pg = NULL;
    HASH_FIND(hh, node->pgs, id, BEAM_PG_ID_SIZE, pg);
    return pg;
}

static void complete_waiters(beam_node_t *node, beam_pg_t *pg, int ok)
{
    while (pg->waiters) {
        beam_pg_waiter_t *w = pg->waiters;
        pg->waiters = w->next;
        beam_object_t *o = beam_object_find(node, w->obj);
        if (o && ok) {
            beam_object_complete(node, o, BEAM_OBJ_OK, w->value, w->len, NULL);
            w->value = NULL;
        } else if (o) {
            beam_object_fail(node, o, BEAM_OBJ_LOST, "The placement group was removed before it was placed.");
        }
        free(w->value);
        free(w);
    }
}

/* The nodes the group's unplaced bundles may go to: every live member, less
 * those already holding one of its bundles for STRICT_SPREAD, and only the
 * node holding them for STRICT_PACK (a group re-placing bundles it lost). */
static size_t candidates(beam_node_t *node, const beam_pg_t *pg, beam_member_t **out)
{
    beam_member_t *alive[BEAM_MAX_MEMBERS];
    size_t na = beam_cluster_alive(node, alive, BEAM_MAX_MEMBERS), n = 0;
    beam_member_t *packed = NULL;
    for (uint32_t i = 0; i < pg->nbundles && !packed; i++)
        if (pg->bundles[i].placed && pg->strategy == BEAM_PG_STRICT_PACK)
            packed = pg->bundles[i].member;
    for (size_t k = 0; k < na; k++) {
        int used = 0;
        for (uint32_t i = 0; i < pg->nbundles; i++)
            used |= pg->bundles[i].placed && pg->bundles[i].member == alive[k];
        if ((pg->strategy == BEAM_PG_STRICT_SPREAD && used) || (packed && alive[k] != packed))
            continue;
        out[n++] = alive[k];
    }
    return n;
}

/* Reserves the group's unplaced bundles (all of them, the first time) on
 * the cluster's live nodes, all or none. Returns 0 once every bundle is
 * placed, or the algorithm's error. */
static int try_place(beam_node_t *node, beam_pg_t *pg)
{
    beam_member_t *members[BEAM_MAX_MEMBERS];
    beam_pool_t *nodes[BEAM_MAX_MEMBERS];
    size_t nn = candidates(node, pg, members);
    for (size_t i = 0; i < nn; i++)
        nodes[i] = members[i]->pool;
    uint32_t *todo = calloc(pg->nbundles, sizeof *todo);
    int *where = calloc(pg->nbundles, sizeof *where);
    beam_demand_t *d = calloc(pg->nbundles, sizeof *d);
    if (!todo || !where || !d) {
        free(todo);
        free(where);
        free(d);
        return -ENOMEM;
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < pg->nbundles; i++)
        if (!pg->bundles[i].placed) {
            todo[n] = i;
            d[n++] = pg->bundles[i].demand;
        }
    pg->attempts++;
    int rc = beam_place(nodes, nn, d, n, pg->strategy, where);
    for (uint32_t k = 0; rc == 0 && k < n; k++) {
        beam_bundle_t *b = &pg->bundles[todo[k]];
        int took = beam_pool_take(nodes[where[k]], &b->demand, &b->grant) == 0;
        if (!took || beam_pool_from_grant(&b->pool, nodes[where[k]], &b->grant) != 0) {
            /* a take cannot fail after a successful plan, but building the
             * bundle's pool can (memory): undo what this call took, bundle
             * k's own take included */
            beam_log(BEAM_LOG_ERROR, "placement group %s: reservation failed after planning", pg->hex);
            if (took)
                beam_pool_give(nodes[where[k]], &b->grant);
            for (uint32_t j = 0; j < k; j++) {
                beam_bundle_t *u = &pg->bundles[todo[j]];
                beam_pool_give(nodes[where[j]], &u->grant);
                beam_pool_destroy(&u->pool);
                u->placed = 0;
                u->member = NULL;
            }
            rc = -EAGAIN;
            break;
        }
        b->placed = 1;
        b->member = members[where[k]];
    }
    free(todo);
    free(where);
    free(d);
    if (rc == 0) {
        int again = pg->state == BEAM_PG_RESCHEDULING;
        pg->state = BEAM_PG_CREATED;
        if (!pg->placed_ns)
            pg->placed_ns = uv_hrtime();
        beam_log(BEAM_LOG_INFO, "placement group %s (%s, %u bundles) %s", pg->hex,
                 beam_pg_strategy_name(pg->strategy), pg->nbundles, again ? "placed again" : "placed");
        complete_waiters(node, pg, 1);
    } else if (rc == -ENOSPC && pg->attempts == 1) {
        beam_log(BEAM_LOG_WARN, "placement group %s cannot be placed on the cluster as it is; it stays pending",
                 pg->hex);
    }
    return rc;
}

static void pending_remove(beam_node_t *node, beam_pg_t *pg)
{
    for (beam_pg_t **p = &node->pending_pgs; *p; p = &(*p)->pending_next)
        if (*p == pg) {
            *p = pg->pending_next;
            pg->pending_next = NULL;
            return;
        }
}

int beam_pgs_schedule(beam_node_t *node)
{
    int placed = 0;
    beam_pg_t **p = &node->pending_pgs;
    while (*p) {
        beam_pg_t *pg = *p;
        if (try_place(node, pg) == 0) {
            *p = pg->pending_next;
            pg->pending_next = NULL;
            placed++;
        } else {
            p = &pg->pending_next;
        }
    }
    return placed;
}

/* Resources came back or a group was queued: the node's scheduler (the
 * actors' table, through the hook: groups first, then actors) runs; a table
 * alone places its groups. */
static void schedule(beam_node_t *node)
{
    if (node->hooks.schedule)
        node->hooks.schedule(node);
    else
        beam_pgs_schedule(node);
}

int beam_pg_create(beam_node_t *node, beam_port_t *owner, const char *id, char *name, int strategy,
                   const beam_demand_t *bundles, uint32_t n, int detached)
{
    if (beam_pg_find(node, id))
        return -EEXIST;
    beam_pg_t *pg = calloc(1, sizeof *pg);
    beam_bundle_t *b = calloc(n, sizeof *b);
    if (!pg || !b) {
        free(pg);
        free(b);
        return -ENOMEM;
    }
    memcpy(pg->id, id, BEAM_PG_ID_SIZE);
    beam_id_hex(id, BEAM_PG_ID_SIZE, pg->hex);
    pg->name = name;
    pg->strategy = strategy;
    pg->detached = detached;
    pg->nbundles = n;
    pg->bundles = b;
    pg->owner = owner;
    pg->created_ns = uv_hrtime();
    for (uint32_t i = 0; i < n; i++)
        b[i].demand = bundles[i];
    HASH_ADD(hh, node->pgs, id, BEAM_PG_ID_SIZE, pg);
    beam_pg_t **tail = &node->pending_pgs;
    while (*tail)
        tail = &(*tail)->pending_next;
    *tail = pg;
    /* groups ahead of it get their turn first, then actors that wait on it */
    schedule(node);
    return 0;
}

int beam_pg_ready(beam_node_t *node, beam_pg_t *pg, const char *obj, char *value, size_t len)
{
    beam_object_t *o = beam_object_find(node, obj);
    if (!o)
        return -ENOENT;
    if (pg->state == BEAM_PG_CREATED) {
        beam_object_complete(node, o, BEAM_OBJ_OK, value, len, NULL);
        return 0;
    }
    if (pg->state == BEAM_PG_REMOVED) {
        free(value);
        beam_object_fail(node, o, BEAM_OBJ_LOST, "The placement group was removed before it was placed.");
        return 0;
    }
    /* drop waiters whose objects were let go (a loop polling pg.wait()) */
    for (beam_pg_waiter_t **p = &pg->waiters; *p;) {
        beam_pg_waiter_t *old = *p;
        if (beam_object_find(node, old->obj)) {
            p = &old->next;
            continue;
        }
        *p = old->next;
        free(old->value);
        free(old);
    }
    beam_pg_waiter_t *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    o->abandonable = 1; /* a ready() nobody waits on may go before the group is placed */
    memcpy(w->obj, obj, sizeof w->obj);
    w->value = value;
    w->len = len;
    w->next = pg->waiters;
    pg->waiters = w;
    return 0;
}

static void give_back_bundles(beam_node_t *node, beam_pg_t *pg)
{
    for (uint32_t i = 0; i < pg->nbundles; i++) {
        beam_bundle_t *b = &pg->bundles[i];
        if (!b->placed)
            continue;
        if (b->member && b->member->alive)
            beam_pool_give(b->member->pool, &b->grant);
        beam_pool_destroy(&b->pool);
        b->placed = 0;
    }
}

/* The bundle specs as an array of maps; nonzero if a write failed. */
static int pack_bundles(msgpack_packer *pk, const beam_pg_t *pg)
{
    int rc = msgpack_pack_array(pk, pg->nbundles);
    for (uint32_t i = 0; i < pg->nbundles; i++) {
        const beam_demand_t *d = &pg->bundles[i].demand;
        rc |= msgpack_pack_map(pk, d->n);
        for (size_t j = 0; j < d->n; j++) {
            size_t len = strlen(d->name[j]);
            rc |= msgpack_pack_str(pk, len);
            rc |= msgpack_pack_str_body(pk, d->name[j], len);
            rc |= msgpack_pack_double(pk, (double)d->amount[j] / BEAM_RES_UNIT);
        }
    }
    return rc;
}

void beam_pg_pack(msgpack_packer *pk, const beam_pg_t *pg)
{
    msgpack_pack_map(pk, 8);
    beam_pack_key(pk, "placement_group_id");
    beam_pack_str(pk, pg->hex);
    beam_pack_key(pk, "name");
    beam_pack_str(pk, pg->name ? pg->name : "");
    beam_pack_key(pk, "strategy");
    beam_pack_str(pk, beam_pg_strategy_name(pg->strategy));
    beam_pack_key(pk, "state");
    beam_pack_str(pk, beam_pg_state_name(pg->state));
    beam_pack_key(pk, "bundles");
    if (pg->row_bundles) { /* packed when it was freed */
        pk->callback(pk->data, pg->row_bundles, pg->row_nodes_at);
        beam_pack_key(pk, "bundles_to_node_id");
        pk->callback(pk->data, pg->row_bundles + pg->row_nodes_at, pg->row_len - pg->row_nodes_at);
    } else {
        pack_bundles(pk, pg);
        beam_pack_key(pk, "bundles_to_node_id");
        msgpack_pack_array(pk, pg->nbundles);
        for (uint32_t i = 0; i < pg->nbundles; i++)
            beam_pack_str(pk, pg->bundles[i].placed && pg->bundles[i].member ? pg->bundles[i].member->hex : "");
    }
    beam_pack_key(pk, "creation_latency_ms");
    msgpack_pack_double(pk, pg->placed_ns ? (double)(pg->placed_ns - pg->created_ns) / 1e6 : 0.0);
    beam_pack_key(pk, "attempts");
    msgpack_pack_uint32(pk, pg->attempts);
}

static void pg_free(beam_pg_t *pg)
{
    for (uint32_t i = 0; i < pg->nbundles; i++)
        if (pg->bundles[i].placed)
            beam_pool_destroy(&pg->bundles[i].pool);
    while (pg->waiters) {
        beam_pg_waiter_t *w = pg->waiters;
        pg->waiters = w->next;
        free(w->value);
        free(w);
    }
    while (pg->removers) {
        beam_pg_remover_t *rm = pg->removers;
        pg->removers = rm->next;
        free(rm);
    }
    free(pg->bundles);
    free(pg->row_bundles);
    free(pg->name);
    free(pg);
}

static size_t row_bytes(const beam_pg_t *pg)
{
    return sizeof *pg + pg->row_len + (pg->name ? strlen(pg->name) + 1 : 0);
}

/* Drops the oldest rows until the history is within its bounds. */
static void trim_history(beam_node_t *node)
{
    while (node->removed_pgs && (node->nremoved > BEAM_PG_HISTORY || node->removed_bytes > BEAM_PG_HISTORY_BYTES)) {
        beam_pg_t *old = node->removed_pgs;
        node->removed_pgs = old->removed_next;
        if (!node->removed_pgs)
            node->removed_tail = NULL;
        node->nremoved--;
        node->removed_bytes -= row_bytes(old);
        HASH_DEL(node->pgs, old);
        if (node->hooks.pg_forget)
            node->hooks.pg_forget(node, old); /* dead actors still name it */
        pg_free(old);
    }
}

/* The removed group's bundles are back: it keeps only its table row (the
 * bundle specs packed small), in the history, which may free it at once. */
static void retire(beam_node_t *node, beam_pg_t *pg)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int failed = pack_bundles(&pk, pg);
    size_t nodes_at = sb.size;
    /* the nodes its bundles had, as Ray's table keeps them once removed */
    failed |= msgpack_pack_array(&pk, pg->nbundles);
    for (uint32_t i = 0; i < pg->nbundles; i++) {
        const char *hex = pg->bundles[i].member ? pg->bundles[i].member->hex : "";
        failed |= msgpack_pack_str(&pk, strlen(hex));
        failed |= msgpack_pack_str_body(&pk, hex, strlen(hex));
    }
    char *row = !failed && sb.size ? malloc(sb.size) : NULL;
    if (row) /* (without memory the row keeps no bundles: two empty arrays) */
        memcpy(row, sb.data, sb.size);
    pg->row_len = row ? sb.size : 2;
    pg->row_nodes_at = row ? nodes_at : 1;
    pg->row_bundles = row ? row : strdup("\x90\x90");
    pg->row_nbundles = row ? pg->nbundles : 0;
    msgpack_sbuffer_destroy(&sb);
    for (uint32_t i = 0; i < pg->nbundles; i++)
        if (pg->bundles[i].placed)
            beam_pool_destroy(&pg->bundles[i].pool);
    free(pg->bundles);
    pg->bundles = NULL;
    pg->nbundles = 0;
    pg->owner = NULL;
    if (!pg->row_bundles) { /* no memory even for that: no row */
        HASH_DEL(node->pgs, pg);
        if (node->hooks.pg_forget)
            node->hooks.pg_forget(node, pg);
        pg_free(pg);
        return;
    }
    pg->removed_next = NULL;
    if (node->removed_tail)
        node->removed_tail->removed_next = pg;
    else
        node->removed_pgs = pg;
    node->removed_tail = pg;
    node->nremoved++;
    node->removed_bytes += row_bytes(pg);
    trim_history(node);
}

/* A removed group with no actor left in it: its bundles go back, its
 * pg_remove requests are answered, it is retired, and whatever waited for
 * resources gets its turn. pg may be freed when this returns. */
static void finish_removal(beam_node_t *node, beam_pg_t *pg)
{
    give_back_bundles(node, pg);
    while (pg->removers) {
        beam_pg_remover_t *rm = pg->removers;
        pg->removers = rm->next;
        beam_port_reply_empty(rm->port, rm->msgid);
        free(rm);
    }
    if (!pg->row_bundles)
        retire(node, pg);
    schedule(node);
}

void beam_pg_user_gone(beam_node_t *node, beam_pg_t *pg)
{
    if (pg->users > 0)
        pg->users--;
    if (pg->state == BEAM_PG_REMOVED && pg->users == 0 && !pg->removing)
        finish_removal(node, pg);
}

void beam_pg_remove(beam_node_t *node, beam_pg_t *pg, beam_port_t *port, uint64_t msgid)
{
    if (port && msgid) {
        beam_pg_remover_t *rm = calloc(1, sizeof *rm);
        if (rm) {
            rm->port = port;
            rm->msgid = msgid;
            rm->next = pg->removers;
            pg->removers = rm;
        } else {
            /* no memory to wait: answer now (the bundles still go back
             * only once the workers are gone) */
            beam_port_reply_empty(port, msgid);
        }
    }
    if (pg->state == BEAM_PG_REMOVED) {
        /* removed before: answered when that removal ends, or now if it has */
        if (pg->users == 0 && !pg->removing)
            finish_removal(node, pg);
        return;
    }
    pg->state = BEAM_PG_REMOVED;
    pending_remove(node, pg); /* pending, or waiting to place bundles it lost */
    complete_waiters(node, pg, 0);
    beam_log(BEAM_LOG_INFO, "placement group %s removed", pg->hex);
    /* a death here may give a grant back: the group must outlive the walk */
    pg->removing = 1;
    if (node->hooks.pg_removed)
        node->hooks.pg_removed(node, pg);
    pg->removing = 0;
    if (pg->users == 0)
        finish_removal(node, pg);
}

void beam_pgs_conn_gone(beam_node_t *node, beam_port_t *c, beam_port_t *heir)
{
    /* a group lives as long as its job, as in Ray: one an actor made passes
     * to that actor's driver when the actor goes */
    if (heir && beam_port_closing(heir))
        heir = NULL;
    beam_pg_t *pg, *tmp;
    HASH_ITER(hh, node->pgs, pg, tmp)
        for (beam_pg_remover_t **p = &pg->removers; *p;) {
            beam_pg_remover_t *rm = *p;
            if (rm->port != c) {
                p = &rm->next;
                continue;
            }
            *p = rm->next;
            free(rm);
        }
    /* a removal can free other groups (a retired row pushing an old one out
     * of the history), so the walk restarts after each */
    for (;;) {
        beam_pg_t *victim = NULL;
        HASH_ITER(hh, node->pgs, pg, tmp)
            if (pg->owner == c) {
                victim = pg;
                break;
            }
        if (!victim)
            return;
        victim->owner = heir;
        if (!heir && !victim->detached)
            beam_pg_remove(node, victim, NULL, 0);
    }
}

void beam_pgs_member_lost(beam_node_t *node, beam_member_t *m)
{
    /* the actors placed there are already gone (their grants given back),
     * so the lost bundles' pools can go; the group waits to be placed again */
    for (beam_pg_t *pg = node->pgs; pg; pg = pg->hh.next) {
        if (pg->state != BEAM_PG_CREATED && pg->state != BEAM_PG_RESCHEDULING)
            continue;
        int lost = 0;
        for (uint32_t i = 0; i < pg->nbundles; i++) {
            beam_bundle_t *b = &pg->bundles[i];
            if (!b->placed || b->member != m)
                continue;
            beam_pool_destroy(&b->pool);
            b->placed = 0;
            b->member = NULL;
            lost++;
            beam_log(BEAM_LOG_WARN, "placement group %s lost bundle %u with node %s", pg->hex, i, m->hex);
        }
        if (lost && pg->state == BEAM_PG_CREATED) {
            pg->state = BEAM_PG_RESCHEDULING;
            beam_pg_t **tail = &node->pending_pgs;
            while (*tail)
                tail = &(*tail)->pending_next;
            *tail = pg;
        }
    }
}

void beam_pgs_destroy(beam_node_t *node)
{
    beam_pg_t *pg, *tmp;
    HASH_ITER(hh, node->pgs, pg, tmp) {
        HASH_DEL(node->pgs, pg);
        pg_free(pg);
    }
    node->pending_pgs = NULL;
    node->removed_pgs = node->removed_tail = NULL;
    node->nremoved = node->removed_bytes = 0;
}
