/* procs.h — the worker processes this node runs: spawning `python -m
 * ray._worker` with its environment, relaying what it prints line by line,
 * killing its process group, reporting its exit, and killing whatever a dead
 * worker left behind (beamd is a child subreaper, so a dead worker's
 * children, and theirs, are re-parented to it: see sweep in procs.c). It knows nothing of
 * actor state: the node's on_proc_output/on_proc_exit hooks (node.h) take
 * the events, locally to the actor table or over the link to the head. */
#ifndef BEAM_PROCS_H
#define BEAM_PROCS_H

#include <stddef.h>
#include <stdint.h>
#include <uthash.h>
#include <uv.h>

#include "node.h"
#include "spawn.h"


typedef struct beam_line_s {
    char *buf;
    size_t len, cap;
} beam_line_t;

typedef struct beam_proc_s {
    /* its key in node->procs: the actor's id, or, once a new worker runs for
     * that actor (a restart) while this one's pipes still drain, a key of its
     * own (procs.c, set_aside) */
    char key[BEAM_ACTOR_ID_SIZE];
    char actor[BEAM_ACTOR_ID_SIZE]; /* whose output and exit it reports */
    char hex[2 * BEAM_ACTOR_ID_SIZE + 1];
    char *class_name;
    uv_process_t proc;
    uv_pipe_t out, err;
    beam_line_t out_line, err_line;
    int open_handles;
    int running;
    long pid;
    uv_timer_t sweep; /* after the worker's exit: kills what it left behind */
    int sweep_rounds;
    UT_hash_handle hh;
} beam_proc_t;

/* Starts a worker (again, for a restarted actor: one of it that exited and
 * still drains is set aside). Returns 0 and its pid, or a negative uv error
 * (UV_EEXIST while a worker of that actor runs). */
int beam_proc_spawn(beam_node_t *node, const beam_spawn_t *s, long *pid);
/* The worker run for actor `from` now runs for actor `to` (a pooled task
 * worker taken by a new task): its exit and output are reported under `to`,
 * its lines prefixed with class_name. Returns 0, -ENOENT, -EEXIST (a worker
 * of `to` runs) or -ENOMEM. */
int beam_proc_rebind(beam_node_t *node, const char *from, const char *to, const char *class_name);
/* SIGKILLs the worker's process group. Returns 0, or -ENOENT if none runs. */
int beam_proc_kill(beam_node_t *node, const char *actor);
void beam_procs_kill_all(beam_node_t *node);
/* How many workers are still running. */
size_t beam_procs_running(const beam_node_t *node);

#endif
