/* actors.h — the actor module (src/actor/), its whole contract: the actor
 * table, each actor's lifecycle as a state machine (creating it, waiting for
 * resources, starting its worker through its member's operations, relaying
 * its output, its calls in submission order, its death), the sweeps of the
 * table by cause (a group removed, a member lost, a client gone, the daemon
 * stopping), the head's record of the calls a member ran itself, and the
 * task worker pool. beam_actor_t is opaque: other modules ask for
 * transitions and read an actor through beam_actor_info. */
#ifndef BEAM_ACTORS_H
#define BEAM_ACTORS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "node.h"
#include "objects.h"
#include "port.h"
#include "spec.h"

/* An actor's lifecycle (docs/DESIGN.md, "One actor's life"): the states,
 * and the transitions between them in lifecycle.c's table. */
typedef enum beam_actor_state_e {
    BEAM_ACTOR_PENDING = 0, /* waiting for resources */
    BEAM_ACTOR_STARTING,    /* resources held, its worker started (or taken from the pool), not constructed */
    BEAM_ACTOR_ALIVE,       /* constructed: calls go to its worker as they come */
    BEAM_ACTOR_RESTARTING,  /* its worker died with restarts left: the old worker ends, then PENDING again */
    BEAM_ACTOR_DEAD,        /* its calls fail with its death; its worker may still be ending */
    BEAM_ACTOR_POOLED,      /* a task done: dead to its callers, its worker idle in the task pool */
    BEAM_ACTOR_NSTATES
} beam_actor_state_t;

/* The actor record: opaque outside src/actor/. */
typedef struct beam_actor_s beam_actor_t;

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
    int max_restarts;     /* times its worker's death restarts it (Ray's max_restarts; -1 without end) */
    int max_task_retries; /* times a call its dead worker had is sent again (-1 without end) */
} beam_actor_options_t;

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
/* ray.kill(no_restart=False): the worker is killed at once and the actor
 * restarts if it has restarts left (its calls sent meanwhile as on a
 * worker's death), else dies as beam_actor_kill. One with no worker yet
 * (PENDING, RESTARTING with restarts left) is left to start. */
void beam_actor_kill_restart(beam_node_t *node, beam_actor_t *a, const char *message);

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
/* Frees every record (daemon exit, after the loop has closed all handles). */
void beam_actors_destroy(beam_node_t *node);
/* Ray's name of a state (POOLED is DEAD to Ray). */
const char *beam_actor_state_name(beam_actor_state_t state);
/* Ray's name of a's state: a restarted actor not yet constructed again
 * (PENDING, STARTING) is RESTARTING to Ray until it is ALIVE. */
const char *beam_actor_ray_state(const beam_actor_t *a);

/* --- reading an actor --- */

const char *beam_actor_id(const beam_actor_t *a); /* BEAM_ACTOR_ID_SIZE bytes */
const char *beam_actor_class_name(const beam_actor_t *a);
/* Its calls fail (DEAD or POOLED). */
int beam_actor_is_dead(const beam_actor_t *a);
/* A remote function's worker (its creations outlive it). */
int beam_actor_is_task(const beam_actor_t *a);
/* The member it was placed on, or NULL. */
struct beam_member_s *beam_actor_member(const beam_actor_t *a);

/* What the views and the tests read of an actor (all borrowed from it,
 * valid until the table changes). */
typedef struct beam_actor_info_s {
    const char *hex;
    const char *class_name;
    const char *name;      /* "" when anonymous */
    const char *namespace; /* "" when anonymous */
    int detached;
    beam_actor_state_t state;
    long pid;              /* 0 unless its worker runs */
    int running;           /* its worker process runs */
    int attached;          /* its worker is connected */
    const struct beam_member_s *member; /* NULL before it is placed */
    const struct beam_pg_s *pg;
    const beam_pool_t *pool;   /* with grant: NULL unless it holds resources */
    const beam_grant_t *grant;
    uint32_t queued, sent; /* calls not yet sent, and sent not yet done */
    uint32_t holders, pins;
    uint32_t restarts;     /* times it was restarted */
    const char *death;     /* "" while alive */
} beam_actor_info_t;
void beam_actor_info(const beam_actor_t *a, beam_actor_info_t *out);
/* The table in no particular order: first, then next until NULL. Changing
 * the table (a death, a free) ends a walk. */
beam_actor_t *beam_actors_first(beam_node_t *node);
beam_actor_t *beam_actors_next(beam_actor_t *a);
size_t beam_actors_count(const beam_node_t *node);

/* --- the worker's reports --- */

/* Its worker says it ends after this result (task_done "exiting"): it is
 * never pooled. */
void beam_actor_worker_exiting(beam_actor_t *a);

/* --- sweeps by cause (sweeps.c; wired as node hooks) --- */

/* Its placement group was removed: kills every actor placed in it. */
void beam_actors_pg_removed(beam_node_t *node, struct beam_pg_s *pg);
/* The removed group's record is about to be freed: no actor keeps pointing
 * at it (any not dead yet dies as in beam_actors_pg_removed). */
void beam_actors_pg_forget(beam_node_t *node, struct beam_pg_s *pg);
/* Every actor placed on member m dies with message; their workers went
 * with it. */
void beam_actors_member_lost(beam_node_t *node, struct beam_member_s *m, const char *message);
/* Kills every worker (daemon exit); their handles close in later loop turns. */
void beam_actors_stop_all(beam_node_t *node);

/* --- the calls a member ran itself (localcalls.c) ---
 * The head's record of the submit records of a member's `local_batch`
 * (docs/DESIGN.md, "Calls that stay on a member"): recorded as sent, never
 * sent again, so a death fails them as any call. A dead actor's local calls
 * stay open while its member may still take the worker's result, and fail
 * when it can take no more: the worker's exit, its connection's end, a kill
 * from that member, or the member lost. So a result a local caller got is
 * the one the head holds. */

/* A call on obj that a client on member m already had written to a's worker
 * there: recorded as sent. Takes refs. A call that cannot be the member's
 * (a's worker is not there, or not ready) fails at once. */
void beam_actor_submit_sent(beam_node_t *node, beam_actor_t *a, const struct beam_member_s *m, const char *obj,
                            beam_refs_t *refs);
/* A client on member m kills a: if a's worker is there, that member takes
 * none of a's results after this message (call before the kill). */
void beam_actor_cut_local(beam_node_t *node, beam_actor_t *a, const struct beam_member_s *m);
/* a's member can take no more of its results (call before the actor table
 * hears of it): a dead actor's open local calls fail now. */
void beam_actor_close_local(beam_node_t *node, beam_actor_t *a);

#endif
