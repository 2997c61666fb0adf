/* spec.c — an actor's spec: freeing it, its pool shape, its init push. */
#include "spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void beam_spec_free(beam_node_t *node, beam_actor_spec_t *spec)
{
    free(spec->class_data);
    free(spec->args);
    beam_refs_unpin(node, &spec->refs);
    beam_strv_free(spec->env);
    beam_strv_free(spec->sys_path);
    free(spec->python);
    free(spec->cwd);
    memset(spec, 0, sizeof *spec);
}

/* The bytes key_part writes for s: its tag, its length's digits, ':'. */
static size_t part_len(const char *s)
{
    return 1 + 20 + 1 + strlen(s);
}

/* Appends s to the key as tag, its length, ':' and its bytes ("p7:python3"):
 * with the lengths no two shapes make one key, whatever bytes the strings
 * hold (an env value may hold any byte but NUL). */
static void key_part(char *key, size_t cap, size_t *at, char tag, const char *s)
{
    *at += (size_t)snprintf(key + *at, cap - *at, "%c%zu:%s", tag, strlen(s), s);
}

char *beam_spec_pool_key(const beam_actor_spec_t *spec)
{
    const char *cwd = spec->cwd ? spec->cwd : "";
    size_t n = part_len(spec->python) + part_len(cwd) + 3; /* "n0" or "n1", and the NUL */
    for (char **p = spec->env; p && *p; p++)
        n += part_len(*p);
    for (char **p = spec->sys_path; p && *p; p++)
        n += part_len(*p);
    char *key = malloc(n);
    if (!key)
        return NULL;
    size_t at = 0;
    key_part(key, n, &at, 'p', spec->python);
    key_part(key, n, &at, 'c', cwd);
    at += (size_t)snprintf(key + at, n - at, "n%d", spec->noset_cuda != 0);
    for (char **p = spec->env; p && *p; p++)
        key_part(key, n, &at, 'e', *p);
    for (char **p = spec->sys_path; p && *p; p++)
        key_part(key, n, &at, 's', *p);
    return key;
}

void beam_spec_send_init(beam_port_t *worker, const beam_actor_spec_t *spec, const beam_init_t *in)
{
    beam_enc_t enc;
    size_t npath = 0;
    for (char **p = spec->sys_path; p && *p; p++)
        npath++;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "init", 14);
    beam_pack_key(&enc.pk, "actor");
    beam_pack_bin(&enc.pk, in->actor, BEAM_ACTOR_ID_SIZE);
    beam_pack_key(&enc.pk, "class_name");
    beam_pack_str(&enc.pk, in->class_name);
    beam_pack_key(&enc.pk, "class_data");
    beam_pack_bin(&enc.pk, spec->class_data, spec->class_len);
    beam_pack_key(&enc.pk, "args");
    beam_pack_bin(&enc.pk, spec->args, spec->args_len);
    beam_pack_key(&enc.pk, "sys_path");
    msgpack_pack_array(&enc.pk, npath);
    for (char **p = spec->sys_path; p && *p; p++)
        beam_pack_str(&enc.pk, *p);
    beam_pack_key(&enc.pk, "cwd");
    beam_pack_str(&enc.pk, spec->cwd ? spec->cwd : "");
    beam_pack_key(&enc.pk, "gpu_ids");
    msgpack_pack_array(&enc.pk, in->grant->ngpus);
    for (int i = 0; i < in->grant->ngpus; i++)
        beam_pack_str(&enc.pk, in->pool->gpu_ids[in->grant->gpu_index[i]]);
    beam_pack_key(&enc.pk, "name");
    beam_pack_str(&enc.pk, in->name ? in->name : "");
    beam_pack_key(&enc.pk, "placement_group");
    if (in->pg)
        beam_pack_bin(&enc.pk, in->pg, BEAM_PG_ID_SIZE);
    else
        msgpack_pack_nil(&enc.pk);
    beam_pack_key(&enc.pk, "bundle_index");
    msgpack_pack_int(&enc.pk, in->bundle);
    beam_pack_key(&enc.pk, "capture_child_tasks");
    if (in->capture_child_tasks)
        msgpack_pack_true(&enc.pk);
    else
        msgpack_pack_false(&enc.pk);
    beam_pack_key(&enc.pk, "namespace");
    beam_pack_str(&enc.pk, in->job_namespace ? in->job_namespace : "");
    beam_pack_key(&enc.pk, "max_concurrency");
    msgpack_pack_int(&enc.pk, in->max_concurrency);
    /* what it holds, for get_runtime_context().get_assigned_resources() */
    beam_pack_key(&enc.pk, "resources");
    msgpack_pack_map(&enc.pk, in->grant->taken.n);
    for (size_t i = 0; i < in->grant->taken.n; i++) {
        beam_pack_str(&enc.pk, in->grant->taken.name[i]);
        msgpack_pack_double(&enc.pk, (double)in->grant->taken.amount[i] / BEAM_RES_UNIT);
    }
    beam_enc_end(&enc, 0);
    beam_port_send_enc(worker, &enc);
}
