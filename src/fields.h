/* fields.h — a request's fields as dispatch's handlers read them: the error
 * reply for a bad field, copies of what a handler keeps, id lists, timeouts,
 * and the options of create_actor and pg_create (names, env, sys_path,
 * resource amounts checked by Ray's rules). A function that takes a request
 * and fails has already replied (bad_request or internal), so the request
 * gets its one reply; the caller just returns. */
#ifndef BEAM_FIELDS_H
#define BEAM_FIELDS_H

#include <stdint.h>

#include "actors.h"
#include "port.h"
#include "session.h"
#include "objects.h"
#include "procs.h"
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

/* Replies bad_request "field 'FIELD' WHAT". */
void beam_req_bad(beam_req_t *r, const char *field, const char *what);
/* Reports a field error from a beam_field_* code and returns -1, else 0
 * (absent is fine unless required). */
int beam_req_check(beam_req_t *r, int rc, const char *field, const char *what, int required);

/* Heap copies the caller owns (free): dup_str adds a NUL; dup_bin of 0 bytes
 * still returns a pointer. NULL without memory. */
char *beam_dup_str(const char *s, uint32_t n);
char *beam_dup_bin(const char *s, uint32_t n);
/* 1 if s[0..n) holds a NUL byte. */
int beam_has_nul(const char *s, uint32_t n);

/* The request's "refs" (ids inside a value), into out (caller frees with
 * beam_refs_free). Replies and returns -1 on a bad one. */
int beam_req_refs(beam_req_t *r, beam_refs_t *out);
/* A required array of 28-byte object ids (points into the frame). */
int beam_req_id_list(beam_req_t *r, const char *field, const msgpack_object_array **ids);
/* "timeout_ms": -1 (forever, the default) or >= 0. */
int beam_req_timeout(beam_req_t *r, int64_t *ms);
/* 1 if some object id of ids appears twice, 0 if not, -1 without memory. */
int beam_has_repeat(const msgpack_object_array *ids);

/* An optional array of str as a NULL-terminated vector the caller frees
 * (beam_strv_free); NULL after replying. */
char **beam_req_str_array(beam_req_t *r, const char *field);
/* runtime_env's env_vars ("env") as "K=V" strings, NULL-terminated; NULL
 * after replying. */
char **beam_req_env(beam_req_t *r);
/* Adds a map of resource name to amount to d, naming field in errors.
 * Amounts are checked as Ray does (beam_res_amount); a name given twice is
 * refused, never summed. For `resources=` (plain) CPU, GPU, memory and
 * object_store_memory are refused, as Ray refuses them there. */
int beam_req_resource_map(beam_req_t *r, const char *field, const msgpack_object_map *m, beam_demand_t *d,
                          int plain);
/* num_cpus, num_gpus, memory and resources= as one demand (d is cleared). */
int beam_req_demand(beam_req_t *r, beam_demand_t *d);
/* A str field of at most BEAM_NAME_MAX_LEN bytes without NUL, copied into
 * out (NUL-terminated); absent is "" unless required. */
int beam_req_name(beam_req_t *r, const char *field, char out[BEAM_NAME_MAX_LEN + 1], int required);
/* create_actor's scheduling options beyond the placement group: lifetime,
 * concurrency and node affinity. */
int beam_req_actor_options(beam_req_t *r, beam_actor_options_t *o);
/* One pg_create bundle: a map of resource name to amount, not all zero. */
int beam_req_bundle(beam_req_t *r, const msgpack_object *o, beam_demand_t *d);

#endif
