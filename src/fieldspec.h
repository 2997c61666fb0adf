/* fieldspec.h — the field tables of requests, with no I/O: an op names its
 * fields once (name, type, required, bounds) as an array of
 * beam_field_spec_t, and beam_fields_check reads a msgpack map against it
 * (beam_fields_check_tuple an array whose elements are the fields in
 * order, as a local_batch record).
 * dispatch's handlers (request.c: beam_req_fields, which replies) and a
 * member's local calls (shortcut.c) check with the same tables, so a call the
 * member runs is one the head would take. Functions return 0 or a negative
 * errno. */
#ifndef BEAM_FIELDSPEC_H
#define BEAM_FIELDSPEC_H

#include <stddef.h>
#include <stdint.h>

#include "beam/codec.h"
#include "beam/protocol.h"

/* beam_fields_check checks params against a table: first every field's
 * presence and type (in the array's order), then every bound. The first
 * fault is reported as (field name, what is wrong) and nothing is filled
 * further. */
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
    BEAM_F_STRS,   /* array of strs (none holding a NUL with BEAM_F_NONUL); bound: its length */
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
    const msgpack_object_array *a; /* IDS, ARRAY, STRS */
    const msgpack_object_map *m;   /* MAP */
} beam_field_val_t;

/* A spec row for an actor's or an object's id. */
#define BEAM_FIELD_ACTOR_ID(n, fl) BEAM_FIELD((n), BEAM_F_ID, (fl), .size = BEAM_ACTOR_ID_SIZE)
#define BEAM_FIELD_OBJECT_ID(n, fl) BEAM_FIELD((n), BEAM_F_ID, (fl), .size = BEAM_OBJECT_ID_SIZE)

/* Checks params against spec[0..n) and fills out[0..n) (parallel to spec).
 * 0, or -EINVAL with *field and *what naming the fault (what may point into
 * buf, of cap bytes). */
int beam_fields_check(const msgpack_object *params, const beam_field_spec_t *spec, size_t n,
                      beam_field_val_t *out, const char **field, const char **what, char *buf, size_t cap);
/* The same for a tuple: an array of exactly n elements, element i read by
 * spec[i] (its name names it in the fault; nil is absent). 0, or -EINVAL
 * with *field and *what naming the fault; *field NULL when tuple is not an
 * array of n elements. */
int beam_fields_check_tuple(const msgpack_object *tuple, const beam_field_spec_t *spec, size_t n,
                            beam_field_val_t *out, const char **field, const char **what, char *buf, size_t cap);
/* A STR value as a C string in out (cap bytes with its NUL; cut to fit). */
void beam_field_cstr(const beam_field_val_t *v, char *out, size_t cap);
/* 1 if s[0..n) holds a NUL byte. */
int beam_has_nul(const char *s, uint32_t n);

/* submit's fields (the head's op_submit and a member's local calls). */
enum { BEAM_SUBMIT_ACTOR, BEAM_SUBMIT_OBJ, BEAM_SUBMIT_METHOD, BEAM_SUBMIT_ARGS, BEAM_SUBMIT_PUSH, BEAM_SUBMIT_NFIELDS };
extern const beam_field_spec_t beam_submit_fields[BEAM_SUBMIT_NFIELDS];

#endif
