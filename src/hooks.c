/* hooks.c — the node's hooks wired to the modules that answer them. */
#include "hooks.h"

#include "actors.h"
#include "boards.h"
#include "cluster.h"
#include "dispatch.h"
#include "link.h"
#include "shortcut.h"
#include "objects.h"
#include "placement.h"
#include "procs.h"
#include "session.h"

/* A member died: its actors die of the node's death; then its clients,
 * whose actors elsewhere and groups go with them as owners. */
static void on_member_lost(beam_node_t *node, beam_member_t *m, const char *why)
{
    (void)why;
    beam_actors_member_lost(node, m, "The actor died because its node has died.");
    beam_pgs_member_lost(node, m);
    beam_sessions_member_lost(node, m);
    beam_actors_schedule(node);
}

/* This node's own member starts, kills and rebinds its workers here. */
static int self_spawn(beam_node_t *node, beam_member_t *m, const beam_spawn_t *s, long *pid)
{
    (void)m;
    return beam_proc_spawn(node, s, pid);
}

static void self_kill(beam_node_t *node, beam_member_t *m, const char *actor)
{
    (void)m;
    beam_proc_kill(node, actor);
}

static int self_rebind(beam_node_t *node, beam_member_t *m, const char *from, const char *to,
                       const char *class_name)
{
    (void)m;
    return beam_proc_rebind(node, from, to, class_name);
}

static const beam_member_ops_t self_ops = {self_spawn, self_kill, self_rebind};

void beam_hooks_wire(beam_node_t *node)
{
    node->self_ops = &self_ops;
    node->on_proc_output = beam_actor_worker_output;
    node->on_proc_exit = beam_actor_worker_exited;
    node->hooks.conn_open = beam_session_open_local;
    node->hooks.dispatch = beam_dispatch;
    node->hooks.actor_pin = beam_actor_pin_id;
    node->hooks.pg_removed = beam_actors_pg_removed;
    node->hooks.pg_forget = beam_actors_pg_forget;
    node->hooks.schedule = beam_actors_schedule;
    node->hooks.member_lost = on_member_lost;
    node->hooks.member_in_use = beam_actors_member_in_use;
    node->hooks.relay_up = beam_shortcut_up;
}

void beam_node_stop(beam_node_t *node, const char *why)
{
    node->stopping = 1;
    beam_actors_stop_all(node);
    beam_procs_kill_all(node);
    beam_sessions_close_all(node, why);
    beam_links_stop(node);
    beam_shortcut_reset(node); /* (closes its timer and prepare handle, even with no link left to close) */
    uv_close((uv_handle_t *)&node->reaper, NULL);
}

void beam_node_free(beam_node_t *node)
{
    beam_sessions_reap(node);
    beam_objects_destroy(node);
    beam_actors_destroy(node);
    beam_pgs_destroy(node);
    beam_cluster_destroy(node);
    beam_links_destroy(node);
    beam_shortcut_destroy(node);
    beam_boards_free(node);
    beam_pool_destroy(&node->pool);
}
