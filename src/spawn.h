/* spawn.h — what a worker process is started with: the one record that
 * the actor table fills, the cluster's member operations carry (to procs on
 * this node, or over a link to a member) and procs reads, and the one
 * freeing of the NULL-terminated string arrays (env, sys_path) it and an
 * actor's spec carry. No I/O. */
#ifndef BEAM_SPAWN_H
#define BEAM_SPAWN_H

#include <stdint.h>

/* Everything a worker is started with. Strings are borrowed for the call. */
typedef struct beam_spawn_s {
    const char *actor;      /* BEAM_ACTOR_ID_SIZE bytes */
    const char *class_name;
    const char *python;
    const char *cwd;
    char *const *env;       /* runtime_env "K=V", NULL-terminated (may be NULL) */
    char *const *sys_path;  /* NULL-terminated (may be NULL) */
    const char *gpus;       /* assigned GPU ids, comma-separated */
    const char *token;
    int noset_cuda;
    uint32_t owner_pid;
} beam_spawn_t;

/* Frees a NULL-terminated array of malloc'd strings and the array (NULL is
 * ignored). */
void beam_strv_free(char **v);

#endif
