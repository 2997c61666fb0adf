/* spec.h — what create_actor asked for (the class, the constructor's args,
 * the worker's environment), the shape that makes task workers
 * interchangeable in the pool, and the `init` push that hands it all to the
 * worker. Knows objects (the refs the spec pins) and ports. */
#ifndef BEAM_SPEC_H
#define BEAM_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "node.h"
#include "objects.h"
#include "port.h"
#include "resources.h"
#include "spawn.h"

/* What create_actor asked for; freed once the worker is constructed. */
typedef struct beam_actor_spec_s {
    char *class_data;
    size_t class_len;
    char *args;
    size_t args_len;
    beam_refs_t refs;
    char **env;       /* "K=V" strings from runtime_env, NULL-terminated */
    char **sys_path;  /* NULL-terminated */
    char *python;
    char *cwd;
    int noset_cuda;
    /* CPU units that must be free where it is placed but are not held (Ray's
     * default actor: 1 CPU to be placed, 0 to run) */
    int64_t place_cpu;
} beam_actor_spec_t;

/* What the init push says beyond the spec (all borrowed). */
typedef struct beam_init_s {
    const char *actor;      /* BEAM_ACTOR_ID_SIZE bytes */
    const char *class_name;
    const char *name;       /* NULL: anonymous */
    const char *pg;         /* its group's id, or NULL */
    int bundle;
    int capture_child_tasks;
    const char *job_namespace;
    int max_concurrency;
    const beam_pool_t *pool; /* where its grant came from (GPU ids) */
    const beam_grant_t *grant;
} beam_init_t;

/* Frees what spec holds (unpinning its refs) and clears it. */
void beam_spec_free(beam_node_t *node, beam_actor_spec_t *spec);
/* The shape a task's worker is started with (python, cwd, noset_cuda, env,
 * sys_path) as a C string: workers of one shape (and one job) are
 * interchangeable, and two shapes that differ in any part (whatever bytes
 * their strings hold) never share a key. malloc'd; NULL when out of
 * memory. */
char *beam_spec_pool_key(const beam_actor_spec_t *spec);
/* Sends the worker its `init` push. */
void beam_spec_send_init(beam_port_t *worker, const beam_actor_spec_t *spec, const beam_init_t *init);

#endif
