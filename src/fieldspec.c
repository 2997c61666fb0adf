/* fieldspec.c — the field tables' checker, with no I/O (fieldspec.h). */
#include "fieldspec.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const beam_field_spec_t beam_submit_fields[BEAM_SUBMIT_NFIELDS] = {
    [BEAM_SUBMIT_ACTOR] = BEAM_FIELD_ACTOR_ID("actor", BEAM_F_REQUIRED),
    [BEAM_SUBMIT_OBJ] = BEAM_FIELD_OBJECT_ID("obj", BEAM_F_REQUIRED),
    [BEAM_SUBMIT_METHOD] = BEAM_FIELD("method", BEAM_F_STR, BEAM_F_REQUIRED | BEAM_F_NONUL, .min = 1, .max = 1024,
                                      .bound = "must be a name of 1..1024 bytes"),
    [BEAM_SUBMIT_ARGS] = BEAM_FIELD("args", BEAM_F_BIN, BEAM_F_REQUIRED),
    [BEAM_SUBMIT_PUSH] = BEAM_FIELD("push", BEAM_F_BOOL, 0, .def = 0), /* the result pushed to the caller */
};

void beam_field_cstr(const beam_field_val_t *v, char *out, size_t cap)
{
    snprintf(out, cap, "%.*s", (int)(v->len < cap ? v->len : cap - 1), v->s);
}

int beam_has_nul(const char *s, uint32_t n)
{
    return memchr(s, '\0', n) != NULL;
}

/* The wrong-type error of a spec, written into buf when it is an id's. */
static const char *type_error(const beam_field_spec_t *f, char *buf, size_t cap)
{
    if (f->what)
        return f->what;
    switch (f->type) {
    case BEAM_F_ID:
        /* "a 16-byte", "a 28-byte", "an 18-byte" */
        snprintf(buf, cap, "must be %s %u-byte bin", f->size == 18 || f->size == 8 || f->size == 11 ? "an" : "a",
                 f->size);
        return buf;
    case BEAM_F_IDS: return "must be an array of ids";
    case BEAM_F_BIN: return "must be a bin";
    case BEAM_F_STR: return "must be a str";
    case BEAM_F_INT: return "must be an int";
    case BEAM_F_BOOL: return "must be a bool";
    case BEAM_F_NUMBER: return "must be a number";
    case BEAM_F_ARRAY: return "must be an array";
    case BEAM_F_MAP: return "must be a map";
    case BEAM_F_STRS: return "must be an array of strs";
    }
    return "has the wrong type";
}

/* Reads value o (NULL or nil: absent) by f's type into v, by the codec's
 * one set of type rules (beam_value_*): 0, -ENOENT when absent, or -EINVAL
 * for another type. */
static int read_value(const msgpack_object *o, const beam_field_spec_t *f, beam_field_val_t *v)
{
    int b = 0;
    int rc;
    switch (f->type) {
    case BEAM_F_ID:
        rc = beam_value_id(o, f->size, &v->s);
        if (rc == 0)
            v->len = (uint32_t)f->size;
        return rc;
    case BEAM_F_IDS:
    case BEAM_F_STRS:
    case BEAM_F_ARRAY: return beam_value_array(o, &v->a);
    case BEAM_F_BIN: return beam_value_bin(o, &v->s, &v->len);
    case BEAM_F_STR: return beam_value_str(o, &v->s, &v->len);
    case BEAM_F_INT: return beam_value_int(o, &v->i);
    case BEAM_F_BOOL:
        rc = beam_value_bool(o, &b);
        if (rc == 0)
            v->i = b;
        return rc;
    case BEAM_F_NUMBER: return beam_value_float(o, &v->d);
    case BEAM_F_MAP: return beam_value_map(o, &v->m);
    }
    return -EINVAL;
}

/* Where a row's value lies in what is checked: a map's value under the
 * row's name, or a tuple's (an array's) i-th element. */
typedef const msgpack_object *(*value_at_fn)(const msgpack_object *in, const beam_field_spec_t *f, size_t i);

static const msgpack_object *by_name(const msgpack_object *map, const beam_field_spec_t *f, size_t i)
{
    (void)i;
    return beam_map_get(map, f->name);
}

static const msgpack_object *by_position(const msgpack_object *tuple, const beam_field_spec_t *f, size_t i)
{
    (void)f;
    return &tuple->via.array.ptr[i];
}

/* 1 when a present value lies outside its spec's bounds. */
static int out_of_bounds(const beam_field_spec_t *f, const beam_field_val_t *v)
{
    int64_t x;
    switch (f->type) {
    case BEAM_F_INT: x = v->i; break;
    case BEAM_F_BIN:
    case BEAM_F_STR:
        if ((f->flags & BEAM_F_NONUL) && beam_has_nul(v->s, v->len))
            return 1;
        x = v->len;
        break;
    case BEAM_F_IDS:
    case BEAM_F_STRS:
    case BEAM_F_ARRAY: x = v->a->size; break;
    case BEAM_F_MAP: x = v->m->size; break;
    default: return 0;
    }
    return x < f->min || x > f->max;
}

/* beam_fields_check's and beam_fields_check_tuple's one checker: each row's
 * value found in `in` by value_at. */
static int check(const msgpack_object *in, value_at_fn value_at, const beam_field_spec_t *spec, size_t n,
                 beam_field_val_t *out, const char **field, const char **what, char *buf, size_t cap)
{
    for (size_t i = 0; i < n; i++) {
        const beam_field_spec_t *f = &spec[i];
        beam_field_val_t *v = &out[i];
        memset(v, 0, sizeof *v);
        v->s = "";
        v->i = f->def;
        int rc = read_value(value_at(in, f, i), f, v);
        if (rc != 0 && (rc != -ENOENT || (f->flags & BEAM_F_REQUIRED))) {
            *field = f->name;
            *what = rc == -ENOENT ? "is required" : type_error(f, buf, cap);
            return -EINVAL;
        }
        if (rc == 0) {
            v->present = 1;
        } else { /* absent: the defaults again (a failed read may have written) */
            v->s = "";
            v->len = 0;
            v->i = f->def;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const beam_field_spec_t *f = &spec[i];
        const beam_field_val_t *v = &out[i];
        if (!v->present)
            continue;
        if (f->type == BEAM_F_IDS)
            for (uint32_t j = 0; j < v->a->size; j++) {
                const msgpack_object *o = &v->a->ptr[j];
                if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != f->size) {
                    snprintf(buf, cap, "must hold %u-byte bin object ids", f->size);
                    *field = f->name;
                    *what = buf;
                    return -EINVAL;
                }
            }
        if (f->type == BEAM_F_STRS)
            for (uint32_t j = 0; j < v->a->size; j++) {
                const msgpack_object *o = &v->a->ptr[j];
                if (o->type != MSGPACK_OBJECT_STR ||
                    ((f->flags & BEAM_F_NONUL) && beam_has_nul(o->via.str.ptr, o->via.str.size))) {
                    *field = f->name;
                    *what = type_error(f, buf, cap);
                    return -EINVAL;
                }
            }
        if (f->bound && out_of_bounds(f, v)) {
            *field = f->name;
            *what = f->bound;
            return -EINVAL;
        }
    }
    return 0;
}

int beam_fields_check(const msgpack_object *params, const beam_field_spec_t *spec, size_t n,
                      beam_field_val_t *out, const char **field, const char **what, char *buf, size_t cap)
{
    return check(params, by_name, spec, n, out, field, what, buf, cap);
}

int beam_fields_check_tuple(const msgpack_object *tuple, const beam_field_spec_t *spec, size_t n,
                            beam_field_val_t *out, const char **field, const char **what, char *buf, size_t cap)
{
    if (tuple->type != MSGPACK_OBJECT_ARRAY || tuple->via.array.size != n) {
        snprintf(buf, cap, "must be an array of %zu elements", n);
        *field = NULL;
        *what = buf;
        return -EINVAL;
    }
    return check(tuple, by_position, spec, n, out, field, what, buf, cap);
}
