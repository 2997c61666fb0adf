/* fields.h — a request's fields as dispatch's handlers read them: each op's
 * field table (name, type, required, bound) and its one checker, the error
 * reply for a bad field, copies of what a handler keeps, and the options of
 * create_actor and pg_create (env, sys_path, resource amounts checked by
 * Ray's rules). A function that takes a request and fails has already
 * replied (bad_request or internal), so the request gets its one reply; the
 * caller just returns. Functions return 0 or a negative errno. */
#ifndef BEAM_FIELDS_H
#define BEAM_FIELDS_H

#include <stdint.h>

#include "actors.h"
#include "port.h"
#include "session.h"
#include "objects.h"
#include "placement.h"
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

/* --- a request's fields as a table ---
 * Each op names its fields once, as a static array of beam_field_spec_t, and
 * beam_req_fields checks a request against it: first every field's presence
 * and type (in the array's order), then every bound. The first fault gets
 * bad_request "field 'NAME' WHAT" and nothing is filled further. */
typedef enum {
    BEAM_F_ID,     /* bin of exactly .size bytes */
    BEAM_F_IDS,    /* array of bins of exactly .size bytes */
    BEAM_F_BIN,    /* bin; bound: its length */
    BEAM_F_STR,    /* str; bound: its length (and no NUL with BEAM_F_NONUL) */
    BEAM_F_INT,    /* int; bound: its value */
    BEAM_F_BOOL,   /* bool */
    BEAM_F_NUMBER, /* int or float */
    BEAM_F_ARRAY,  /* array; bound: its length */
    BEAM_F_MAP,    /* map; bound: its length */
} beam_field_type_t;

#define BEAM_F_REQUIRED 1u /* absent (or nil) is "is required" */
#define BEAM_F_NONUL 2u    /* a str or bin holding a NUL byte is out of bounds */

typedef struct beam_field_spec_s {
    const char *name;
    beam_field_type_t type;
    unsigned flags;      /* BEAM_F_REQUIRED | BEAM_F_NONUL */
    uint32_t size;       /* ID, IDS: the bytes of one id */
    int64_t def;         /* INT, BOOL: the value when absent */
    int64_t min, max;    /* checked only when bound is set */
    const char *bound;   /* the error outside min..max (or holding NUL) */
    const char *what;    /* the error for a wrong type; NULL: the type's own */
} beam_field_spec_t;

/* One row of a table: BEAM_FIELD("obj", BEAM_F_ID, BEAM_F_REQUIRED, .size = 28). */
#define BEAM_FIELD(n, t, fl, ...) {.name = (n), .type = (t), .flags = (fl), __VA_ARGS__}

/* A name or namespace: a str of at most BEAM_NAME_MAX_LEN bytes without NUL. */
#define BEAM_FIELD_NAME(n, fl)                                                                                      \
    BEAM_FIELD((n), BEAM_F_STR, (fl) | BEAM_F_NONUL, .max = BEAM_NAME_MAX_LEN,                                      \
               .bound = "must be a str of at most 1024 bytes without NUL")

/* One checked field: views into the request (copy what outlives it). */
typedef struct beam_field_val_s {
    int present;
    const char *s; /* ID, BIN, STR ("" when absent) */
    uint32_t len;
    int64_t i;     /* INT, BOOL (the spec's def when absent) */
    double d;      /* NUMBER (0 when absent) */
    const msgpack_object_array *a; /* IDS, ARRAY */
    const msgpack_object_map *m;   /* MAP */
} beam_field_val_t;

/* Checks r's params against spec[0..n) and fills out[0..n) (parallel to
 * spec). 0, or -EINVAL after replying bad_request. */
int beam_req_fields(beam_req_t *r, const beam_field_spec_t *spec, size_t n, beam_field_val_t *out);
#define BEAM_REQ_FIELDS(r, spec, out) beam_req_fields((r), (spec), sizeof(spec) / sizeof((spec)[0]), (out))
/* A STR value as a C string in out (cap bytes with its NUL; cut to fit). */
void beam_field_cstr(const beam_field_val_t *v, char *out, size_t cap);

/* Replies bad_request "field 'FIELD' WHAT". */
void beam_req_bad(beam_req_t *r, const char *field, const char *what);

/* Heap copies the caller owns (free): dup_str adds a NUL; dup_bin of 0 bytes
 * still returns a pointer. NULL without memory. */
char *beam_dup_str(const char *s, uint32_t n);
char *beam_dup_bin(const char *s, uint32_t n);
/* 1 if s[0..n) holds a NUL byte. */
int beam_has_nul(const char *s, uint32_t n);

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
