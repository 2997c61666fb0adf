/* internal.h — the actor record and the functions the files of the actor
 * module share (src/actor/: table.c, the records; lifecycle.c, the
 * transitions and the task worker pool, above it; requests.c, sweeps.c and
 * localcalls.c, above both). Included by those files only (scripts/check_layers.py
 * enforces it): everyone else sees beam_actor_t as opaque (actors.h). */
#ifndef BEAM_ACTOR_INTERNAL_H
#define BEAM_ACTOR_INTERNAL_H

/* The death of an actor no handle names any more once its calls are done
 * (Ray's text), whichever of its ends finds it so. */
#define BEAM_ACTOR_UNREFERENCED "The actor is dead because all references to the actor were removed."

#include <stdio.h>
#include <uthash.h>

#include "actors.h"
#include "calls.h"
#include "spec.h"

struct beam_actor_s {
    char id[BEAM_ACTOR_ID_SIZE];
    char hex[2 * BEAM_ACTOR_ID_SIZE + 1];
    beam_actor_state_t state; /* changed by beam__actor_move only (lifecycle.c) */
    char *class_name;
    char *name;
    char *namespace;     /* of the name; NULL when anonymous */
    char *job_namespace; /* given to the worker in init */
    int detached;
    int max_concurrency;
    int spread;
    int has_affinity, affinity_soft;
    char affinity[BEAM_NODE_ID_SIZE];
    int task;       /* a remote function's worker (create_actor "task") */
    uint32_t job;   /* its owner's job */
    char *pool_key; /* a task's worker shape (python, cwd, env, sys_path); NULL: never pooled (lifecycle.c's pool) */
    int death_status; /* what its calls fail with: BEAM_OBJ_ACTOR_DIED, _UNSCHEDULABLE, _INIT_FAILED, _WORKER_CRASHED */
    int max_restarts;     /* -1: without end (lifecycle.c, RESTART) */
    uint32_t restarts;    /* times restarted so far */
    int max_task_retries; /* -1: without end (calls.h, beam_callq_retry_sent) */
    char *death;
    beam_actor_spec_t spec; /* freed once constructed (kept while it may restart), or at death */
    beam_callq_t calls;     /* queued and sent, in submission order (calls.h) */

    /* its resources (lifecycle.c): held from placing until its worker is
     * gone, or until it goes into the pool */
    beam_demand_t demand;
    beam_grant_t grant;
    int has_grant;
    beam_pool_t *pool;    /* where the grant came from: the node's or a bundle's */
    struct beam_pg_s *pg; /* the placement group it must run in, or NULL */
    int bundle_index;     /* the bundle asked for; -1 any */
    int bundle;           /* the bundle it got */
    int capture_child_tasks;
    char gpus[BEAM_MAX_GPUS * (BEAM_GPU_ID_LEN + 1)]; /* its GPU ids, comma-separated */
    uint32_t blocked;     /* its worker waits in ray.get/ray.wait (nested count) */
    int64_t blocked_cpu;  /* the CPU given back while blocked */
    struct beam_member_s *member; /* the node it was placed on */

    /* its worker: the process (running from its start until its exit is
     * reported) and its connection (from its hello until its end) */
    char token[33];
    int exiting; /* its worker said it ends on purpose (task_done "exiting"): no restart */
    int running;
    long pid;
    beam_port_t *worker;

    /* who keeps it (requests.c) */
    beam_port_t *owner;
    uint32_t owner_pid;
    uint32_t holders, pins;
    int stop_when_idle; /* unreferenced: it ends once its calls are done */

    int local_cut; /* its member takes no more of its results (localcalls.c) */
    struct beam_actor_s *pending_next;
    UT_hash_handle hh;
};

/* The lifecycle's transitions (the table in lifecycle.c and docs/DESIGN.md). */
typedef enum beam__actor_transition_e {
    BEAM_ACTOR_PLACE,  /* PENDING -> STARTING: resources taken, its worker started or taken from the pool */
    BEAM_ACTOR_READY,  /* STARTING -> ALIVE: the instance is constructed */
    BEAM_ACTOR_DIE,    /* PENDING, STARTING, ALIVE, RESTARTING -> DEAD */
    BEAM_ACTOR_RESTART,    /* STARTING, ALIVE -> RESTARTING: its worker died with restarts left */
    BEAM_ACTOR_RESCHEDULE, /* RESTARTING -> PENDING: the old worker is gone, its resources asked for again */
    BEAM_ACTOR_RETIRE, /* ALIVE -> POOLED: a task done and unreferenced, its worker kept */
    BEAM_ACTOR_LEAVE,  /* POOLED -> DEAD: its worker taken by another task, or gone */
    BEAM_ACTOR_NTRANSITIONS
} beam__actor_transition_t;

/* Moves a along transition t; t must start from a's state (asserted). */
void beam__actor_move(beam_actor_t *a, beam__actor_transition_t t);
/* DEAD or POOLED: its calls fail. */
static inline int beam__actor_dead(const beam_actor_t *a)
{
    return a->state == BEAM_ACTOR_DEAD || a->state == BEAM_ACTOR_POOLED;
}
/* Restarting, as Ray counts it: from its worker's death until the new
 * instance is constructed (RESTARTING, then PENDING and STARTING again). */
static inline int beam__actor_restarting(const beam_actor_t *a)
{
    return a->state == BEAM_ACTOR_RESTARTING ||
           (a->restarts && (a->state == BEAM_ACTOR_PENDING || a->state == BEAM_ACTOR_STARTING));
}
/* What a call refused or lost to a restart fails with (status
 * BEAM_OBJ_ACTOR_UNAVAILABLE): "<hex> The actor is temporarily unavailable:
 * <why>" (docs/PROTOCOL.md), written into buf. */
static inline const char *beam__actor_unavailable(const beam_actor_t *a, const char *why, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s The actor is temporarily unavailable: %s", a->hex, why);
    return buf;
}
/* Nothing is queued or sent. */
static inline int beam__actor_idle(const beam_actor_t *a)
{
    return beam_callq_idle(&a->calls);
}

/* A dead actor's local calls stay open (localcalls.c) while its member may
 * still take its worker's results: the worker is attached and running, and
 * no kill came from that member. */
static inline int beam__actor_local_open(const beam_actor_t *a)
{
    return a->worker && a->running && !a->local_cut;
}

/* lifecycle.c */
/* a (new, PENDING) waits for resources, after those already waiting, and
 * the table is scheduled. */
void beam__actor_wait(beam_node_t *node, beam_actor_t *a);
/* The death (transition DIE): every call fails, the worker is killed, the
 * grant goes back once it is gone; may free a (ends in beam__actor_maybe_free). */
void beam__actor_die(beam_node_t *node, beam_actor_t *a, const char *message);
/* Its worker died unexpectedly (its exit, its connection's end): it
 * restarts if it has restarts left, else dies with message (may free a). */
void beam__actor_worker_died(beam_node_t *node, beam_actor_t *a, const char *message);
/* A RESTARTING actor whose old worker is gone (exit reported, connection
 * ended) asks for its resources again (transition RESCHEDULE); else nothing. */
void beam__actor_maybe_reschedule(beam_node_t *node, beam_actor_t *a);
/* Gives the actor's resources back where they came from. */
void beam__actor_release_grant(beam_node_t *node, beam_actor_t *a);
/* Its worker went with its node (no exit will be reported): its grant goes
 * back and the record may be freed. */
void beam__actor_worker_lost(beam_node_t *node, beam_actor_t *a);

/* table.c */
/* Frees a if it is dead and nothing keeps it (holder, pin, worker). */
void beam__actor_maybe_free(beam_node_t *node, beam_actor_t *a);
/* Who inherits what a task's worker c created (NULL if none). */
beam_port_t *beam__actor_task_heir(beam_port_t *c);
/* Every live actor owned by from passes to heir. */
void beam__actors_hand_down(beam_node_t *node, beam_port_t *from, beam_port_t *heir);

/* lifecycle.c: the task worker pool */
/* a is done and unreferenced: its worker goes into the pool (0) or a must
 * die (-1). a is not freed here. */
int beam__actor_pool_retire(beam_node_t *node, beam_actor_t *a);
/* Starts b on an idle pooled worker of its shape: 0, or -1 if none. */
int beam__actor_pool_start(beam_node_t *node, beam_actor_t *b);
/* The job's driver is gone: its idle pooled workers are killed. */
void beam__actors_pool_drop_job(beam_node_t *node, uint32_t job);

#endif
