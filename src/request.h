/* request.h — a request's fields as dispatch's handlers read them: each op's
 * field table (name, type, required, bound) and its one checker, the error
 * reply for a bad field, copies of what a handler keeps, and the options of
 * create_actor and pg_create (env, sys_path, resource amounts checked by
 * Ray's rules). A function that takes a request and fails has already
 * replied (bad_request or internal), so the request gets its one reply; the
 * caller just returns. Functions return 0 or a negative errno. */
#ifndef BEAM_REQUEST_H
#define BEAM_REQUEST_H

#include <stdint.h>

#include "actors.h"
#include "fieldspec.h"
#include "port.h"
#include "session.h"
#include "objects.h"
#include "placement.h"
#include "spawn.h"
#include "resources.h"

/* One request being handled: who sent it, the node, its id and its params
 * (which point into the received frame: copy what outlives the handler). */
typedef struct beam_req_s {
    beam_port_t *conn;
    beam_node_t *node;
    uint64_t msgid;
    const msgpack_object *params;
    beam_buf_t *frame_buf; /* the frame's own buffer, or NULL */
} beam_req_t;

/* The longest name or namespace create_actor and get_actor accept. */
#define BEAM_NAME_MAX_LEN 1024

/* Checks r's params against spec[0..n) and fills out[0..n) (parallel to
 * spec). 0, or -EINVAL after replying bad_request. */
int beam_req_fields(beam_req_t *r, const beam_field_spec_t *spec, size_t n, beam_field_val_t *out);
#define BEAM_REQ_FIELDS(r, spec, out) beam_req_fields((r), (spec), sizeof(spec) / sizeof((spec)[0]), (out))

/* Replies bad_request "field 'FIELD' WHAT". */
void beam_req_bad(beam_req_t *r, const char *field, const char *what);

/* Heap copies the caller owns (free): dup_str adds a NUL; dup_bin of 0 bytes
 * still returns a pointer. NULL without memory. */
char *beam_dup_str(const char *s, uint32_t n);
char *beam_dup_bin(const char *s, uint32_t n);

/* A payload bin to keep, as a buffer reference the caller owns: the frame's
 * own buffer when it has one and the payload is most of it (no copy), else a
 * copy. NULL when out of memory. */
beam_buf_t *beam_req_keep_bin(beam_req_t *r, const char *s, uint32_t n);
/* Where a kept payload's bytes are: in the frame's buffer, or the copy's. */
const char *beam_req_kept_data(beam_req_t *r, const beam_buf_t *kept, const char *s);
/* A put's or task_done's value: its payload bin (the field bin) kept, or,
 * when the request names a memfd ("shm_fd" int, "shm_size" int; only from a
 * client that turned shared memory on, and then bin is empty), that memfd
 * adopted (shm.h). *buf gets the reference; *data and *len say where the
 * bytes are. 0, or -1 after replying: store_full (ObjectStoreFullError),
 * denied (the memfd could not be adopted: the client sends it inline),
 * bad_request, internal. */
int beam_req_value(beam_req_t *r, const beam_field_val_t *bin, beam_buf_t **buf, const char **data, size_t *len);
/* The request's "refs" (ids inside a value), into out (caller frees with
 * beam_refs_free). Replies and returns -EINVAL on a bad one. */
int beam_req_refs(beam_req_t *r, beam_refs_t *out);
/* 1 if some object id of ids appears twice, 0 if not, -ENOMEM. */
int beam_has_repeat(const msgpack_object_array *ids);

/* An optional array of str as a NULL-terminated vector the caller frees
 * (beam_strv_free); NULL after replying. */
char **beam_req_str_array(beam_req_t *r, const char *field);
/* runtime_env's env_vars ("env") as "K=V" strings, NULL-terminated; NULL
 * after replying. */
char **beam_req_env(beam_req_t *r);
/* create_actor's request with every field checked, alone and across
 * fields (group and bundle, affinity, spread, class and paths): views into
 * the frame, names copied. Its strings are not yet taken. */
typedef struct beam_actor_req_s {
    const char *id;
    beam_field_val_t class_name, class_data, args, python, cwd;
    char name[BEAM_NAME_MAX_LEN + 1], namespace[BEAM_NAME_MAX_LEN + 1], job_namespace[BEAM_NAME_MAX_LEN + 1];
    int noset_cuda, capture;
    beam_pg_t *pg; /* NULL: none */
    int bundle_index;
    double place_cpus;
    beam_actor_options_t opts; /* its strings NULL */
    beam_demand_t demand;
} beam_actor_req_t;
int beam_req_create_actor(beam_req_t *r, beam_actor_req_t *out);
/* One pg_create bundle: a map of resource name to amount, not all zero. */
int beam_req_bundle(beam_req_t *r, const msgpack_object *o, beam_demand_t *d);

#endif
