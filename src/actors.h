/* actors.h — the actor table: creating an actor (waiting for resources,
 * spawning its worker, relaying its output), its call queue in submission
 * order, and its death (kill, crash, owner gone, last handle gone). */
#ifndef BEAM_ACTORS_H
#define BEAM_ACTORS_H

#include <stddef.h>
#include <stdint.h>
#include <uthash.h>
#include <uv.h>

#include "calls.h"
#include "node.h"
#include "objects.h"
#include "port.h"
#include "spec.h"

enum {
    BEAM_ACTOR_PENDING = 0, /* waiting for resources */
    BEAM_ACTOR_STARTING,    /* worker spawned, not yet constructed */
    BEAM_ACTOR_ALIVE,
    BEAM_ACTOR_DEAD,
};

/* The options of create_actor beyond resources and placement group. The
 * strings are owned by whoever holds the struct (beam_actor_create takes
 * them). */
typedef struct beam_actor_options_s {
    char *name;          /* NULL or "": anonymous */
    char *namespace;     /* the name's namespace (named actors only) */
    char *job_namespace; /* the creator's namespace: the worker's own */
    int detached;        /* lifetime="detached": outlives its owner and its handles */
    int max_concurrency; /* calls the worker runs at once (it enforces it) */
    int spread;          /* scheduling_strategy="SPREAD" */
    int has_affinity;    /* NodeAffinitySchedulingStrategy */
    int affinity_soft;
    char affinity[BEAM_NODE_ID_SIZE];
    int task; /* a remote function's worker: what it creates outlives it */
} beam_actor_options_t;

typedef struct beam_actor_s {
    char id[BEAM_ACTOR_ID_SIZE];
    char hex[2 * BEAM_ACTOR_ID_SIZE + 1];
    int state;
    char *class_name;
    char *name;
    char *namespace;     /* of the name; NULL when anonymous */
    char *job_namespace; /* given to the worker in init */
    int detached;
    int max_concurrency;
    int spread;
    int has_affinity, affinity_soft;
    char affinity[BEAM_NODE_ID_SIZE];
    int death_status; /* what its calls fail with: BEAM_OBJ_ACTOR_DIED or _UNSCHEDULABLE */
    beam_actor_spec_t spec;
    beam_demand_t demand;
    beam_grant_t grant;
    int has_grant;
    beam_pool_t *pool;        /* where the grant came from: the node's or a bundle's */
    struct beam_pg_s *pg;     /* the placement group it must run in, or NULL */
    int bundle_index;         /* the bundle asked for; -1 any */
    int bundle;               /* the bundle it got */
    int capture_child_tasks;
    char gpus[BEAM_MAX_GPUS * (BEAM_GPU_ID_LEN + 1)]; /* its GPU ids, comma-separated */
    char token[33];

    struct beam_member_s *member; /* the node it was placed on */
    int running;      /* its worker was started and has not been reported gone */
    long pid;

    beam_port_t *owner;
    beam_port_t *worker;
    uint32_t owner_pid;
    beam_callq_t calls; /* queued and sent, in submission order (calls.h) */
    uint32_t holders, pins;
    int stop_when_idle;
    char *death;
    int init_failed;
    int doomed; /* marked for killing by a sweep */
    int task;          /* a remote function's worker (create_actor "task") */
    char *pool_key;    /* a task's worker shape (python, cwd, env, sys_path); NULL: never pooled */
    uint32_t job;      /* its owner's job */
    int pooled;        /* dead, its worker idle in the task worker pool */
    int retiring;      /* on the stack of pool_retire: not to be freed there */
    int exiting;       /* its worker said it ends after its last result (task_done "exiting") */
    uint32_t blocked;  /* its worker waits in ray.get/ray.wait (nested count) */
    int local_cut;     /* its member takes no more of its results (a kill from there; sentcalls.h) */
    int64_t blocked_cpu; /* the CPU given back while blocked */
    struct beam_actor_s *pending_next;
    UT_hash_handle hh;
} beam_actor_t;

beam_actor_t *beam_actor_find(beam_node_t *node, const char *id);
/* Adds an actor (it takes ownership of spec, class_name and the strings of
 * opts, which it clears, on success only) and schedules it. Returns 0,
 * -EEXIST for a taken id or name (in that namespace), -ENOMEM. */
int beam_actor_create(beam_node_t *node, beam_port_t *owner, const char *id,
                      char *class_name, beam_actor_options_t *opts, beam_actor_spec_t *spec,
                      const beam_demand_t *demand, struct beam_pg_s *pg, int bundle_index,
                      int capture_child_tasks);
/* The live (not dead) actor with this name in namespace ns, or NULL. */
beam_actor_t *beam_actor_find_name(beam_node_t *node, const char *ns, const char *name);
/* Queues a call. Takes ownership of method, of the reference to args_buf
 * (args[0..args_len) lie in it; the `call` push sends them from there) and
 * of refs. The return object must exist; on a dead actor it completes at
 * once with the death. */
void beam_actor_submit(beam_node_t *node, beam_actor_t *a, const char *obj, char *method,
                       beam_buf_t *args_buf, const char *args, size_t args_len, beam_refs_t *refs);
/* The worker waits in ray.get/ray.wait (blocked) or is back (not): as
 * Ray's raylet does for a blocked task, its CPU goes back to its pool while
 * it waits, so the tasks it waits for can run, and is taken back after,
 * even if that oversubscribes the pool for a while. Nests. */
void beam_actor_set_blocked(beam_node_t *node, beam_actor_t *a, int blocked);
/* ray.kill: the worker is killed at once; every call fails. */
void beam_actor_kill(beam_node_t *node, beam_actor_t *a, const char *message);

/* The death of an actor whose placement group was removed, in Ray's words. */
#define BEAM_PG_REMOVED_DEATH                                                                                         \
    "The actor died unexpectedly before finishing this task. The actor is dead because its worker process has "     \
    "died. Worker exit type: INTENDED_SYSTEM_EXIT Worker exit detail: Destroying worker since its placement group "   \
    "was removed."

/* A worker said hello: links it if the token matches. Returns 0 or -EPERM. */
int beam_actor_attach_worker(beam_node_t *node, beam_actor_t *a, beam_port_t *c, const char *token);
/* Sends the worker its init push (after the hello reply). */
void beam_actor_send_init(beam_node_t *node, beam_actor_t *a);
/* The worker finished constructing the instance (ok) or failed (error text). */
void beam_actor_ready(beam_node_t *node, beam_actor_t *a, int ok, const char *error, size_t error_len);
/* The worker finished a call. Takes ownership of the reference to buf (the
 * result data[0..len) lies in it) and of refs (dropped on error too).
 * Returns 0, or -ENOENT if obj is not a call this worker has. */
int beam_actor_task_done(beam_node_t *node, beam_actor_t *a, const char *obj, int status,
                         beam_buf_t *buf, const char *data, size_t len, beam_refs_t *refs);

void beam_actor_pin(beam_node_t *node, beam_actor_t *a);
void beam_actor_unpin(beam_node_t *node, beam_actor_t *a);
void beam_actor_hold(beam_node_t *node, beam_actor_t *a);
void beam_actor_unhold(beam_node_t *node, beam_actor_t *a);

/* A client closed: kills the actors it owns, and its own actor if it was
 * a worker. */
void beam_actors_conn_gone(beam_node_t *node, beam_port_t *c);
/* The driver a worker's work belongs to: the client at the top of its
 * actor's owner chain (NULL if gone); p itself when it is no worker. */
beam_port_t *beam_actors_job_driver(beam_port_t *p);
/* node->hooks.actor_pin: pins (1) or unpins (0) the actor with this id, if any. */
void beam_actor_pin_id(beam_node_t *node, const char *id, int pin);
/* node->hooks.member_in_use: 1 while an actor or a bundle points at m. */
int beam_actors_member_in_use(beam_node_t *node, const struct beam_member_s *m);
/* Tries to start pending actors in order (after resources were freed). */
void beam_actors_schedule(beam_node_t *node);
/* A worker process exited (reported by procs here, or by a member node). */
void beam_actor_worker_exited(beam_node_t *node, const char *actor, long pid, int64_t status, int term_signal);
/* A worker printed a line (already prefixed "(Class pid=N) "): to its owner. */
void beam_actor_worker_output(beam_node_t *node, const char *actor, int stream, const char *text, size_t len);
/* A member node started a worker and says its pid. */
void beam_actor_worker_started(beam_node_t *node, const char *actor, long pid);
/* Kills every actor marked doomed, one at a time (deaths.c marks them): a
 * death can free other records (through the refs its results carried), so
 * the walk restarts after each. */
void beam_actors_kill_doomed(beam_node_t *node, const char *message);
/* A dead actor's local calls stay open (sentcalls.h) while its member may
 * still take its worker's results: the worker is attached and running, and
 * no kill came from that member. */
static inline int beam_actor_local_open(const beam_actor_t *a)
{
    return a->worker && a->running && !a->local_cut;
}
/* Its worker went with its node (no exit will be reported): its grant goes
 * back and the record may be freed. */
void beam_actor_worker_lost(beam_node_t *node, beam_actor_t *a);
/* Frees every record (daemon exit, after the loop has closed all handles). */
void beam_actors_destroy(beam_node_t *node);
const char *beam_actor_state_name(int state);

#endif
