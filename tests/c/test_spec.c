/* test_spec.c — an actor's spec (src/spec.h) with no socket: its pool key
 * (one shape one key; a key per shape whatever bytes its strings hold, so a
 * pooled worker is never reused for another environment), its free (every
 * allocation, the objects and actors it pinned let go, the spec cleared and
 * safe to free again) and the `init` push as the worker reads it (parsed
 * back: each field, GPU ids by the pool's names, resources in whole units). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objects.h"
#include "spec.h"

#define U BEAM_RES_UNIT

/* --- building specs --- */

static char *dup_str(const char *s)
{
    char *p = strdup(s);
    assert_non_null(p);
    return p;
}

/* A malloc'd NULL-terminated copy of the n strings of s. */
static char **strv(const char *const *s, size_t n)
{
    char **v = calloc(n + 1, sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = dup_str(s[i]);
    return v;
}

/* A spec of the shape given (cwd may be NULL; env and path n strings each). */
static void spec_init(beam_actor_spec_t *s, const char *python, const char *cwd, int noset_cuda,
                      const char *const *env, size_t nenv, const char *const *path, size_t npath)
{
    memset(s, 0, sizeof *s);
    s->python = dup_str(python);
    s->cwd = cwd ? dup_str(cwd) : NULL;
    s->noset_cuda = noset_cuda;
    s->env = nenv ? strv(env, nenv) : NULL;
    s->sys_path = npath ? strv(path, npath) : NULL;
}

static char *key_of(const beam_actor_spec_t *s)
{
    char *k = beam_spec_pool_key(s);
    assert_non_null(k);
    return k;
}

/* 1 when the two specs' keys are the same. */
static int same_key(const beam_actor_spec_t *a, const beam_actor_spec_t *b)
{
    char *ka = key_of(a), *kb = key_of(b);
    int same = strcmp(ka, kb) == 0;
    free(ka);
    free(kb);
    return same;
}

static beam_node_t *new_node(void)
{
    beam_node_t *node = calloc(1, sizeof *node);
    assert_non_null(node);
    beam_limits_default(&node->limits);
    return node;
}

/* --- the pool key --- */

static const char *const ENV[] = {"A=1", "B=2"};
static const char *const PATH[] = {"/srv/app", "/srv/lib"};

static void test_key_one_shape_one_key(void **state)
{
    (void)state;
    beam_node_t *node = new_node();
    beam_actor_spec_t a, b;
    spec_init(&a, "/usr/bin/python3", "/srv", 0, ENV, 2, PATH, 2);
    spec_init(&b, "/usr/bin/python3", "/srv", 0, ENV, 2, PATH, 2);
    /* what a task runs is not its worker's shape: another class, other
     * args and another placement CPU take the same worker */
    b.class_data = dup_str("another class");
    b.class_len = 13;
    b.args = dup_str("other args");
    b.args_len = 10;
    b.place_cpu = U;
    assert_true(same_key(&a, &b));
    /* no cwd is the daemon's own, as an empty one */
    beam_actor_spec_t c, d;
    spec_init(&c, "py", NULL, 1, NULL, 0, NULL, 0);
    spec_init(&d, "py", "", 1, NULL, 0, NULL, 0);
    assert_true(same_key(&c, &d));
    beam_spec_free(node, &a);
    beam_spec_free(node, &b);
    beam_spec_free(node, &c);
    beam_spec_free(node, &d);
    free(node);
}

static void test_key_each_part_counts(void **state)
{
    (void)state;
    beam_node_t *node = new_node();
    beam_actor_spec_t base, other;
    static const char *const env_changed[] = {"A=1", "B=3"};
    static const char *const env_more[] = {"A=1", "B=2", "C="};
    static const char *const path_changed[] = {"/srv/app", "/srv/lib2"};
    spec_init(&base, "/usr/bin/python3", "/srv", 0, ENV, 2, PATH, 2);
    for (int part = 0; part < 8; part++) {
        switch (part) {
        case 0: spec_init(&other, "/usr/bin/python3.11", "/srv", 0, ENV, 2, PATH, 2); break;
        case 1: spec_init(&other, "/usr/bin/python3", "/srv/x", 0, ENV, 2, PATH, 2); break;
        case 2: spec_init(&other, "/usr/bin/python3", "/srv", 1, ENV, 2, PATH, 2); break;
        case 3: spec_init(&other, "/usr/bin/python3", "/srv", 0, env_changed, 2, PATH, 2); break;
        case 4: spec_init(&other, "/usr/bin/python3", "/srv", 0, env_more, 3, PATH, 2); break;
        case 5: spec_init(&other, "/usr/bin/python3", "/srv", 0, ENV, 1, PATH, 2); break;
        case 6: spec_init(&other, "/usr/bin/python3", "/srv", 0, ENV, 2, path_changed, 2); break;
        default: spec_init(&other, "/usr/bin/python3", "/srv", 0, ENV, 2, NULL, 0); break;
        }
        if (same_key(&base, &other))
            fail_msg("part %d changed and the key did not", part);
        beam_spec_free(node, &other);
    }
    beam_spec_free(node, &base);
    free(node);
}

/* Shapes whose parts, joined, are the same bytes: a separator byte inside a
 * string (an env value may hold any byte but NUL) must not make a second
 * shape's key, or a pooled worker started with one environment runs a task
 * that asked for another. */
static void test_key_unambiguous(void **state)
{
    (void)state;
    beam_node_t *node = new_node();
    static const char *const one_var[] = {"A=1\x1e" "B=2"}, *const two_vars[] = {"A=1", "B=2"};
    static const char *const env_with_path[] = {"A=1\x1d/srv"}, *const env_only[] = {"A=1"};
    static const char *const path_only[] = {"/srv"};
    static const char *const same_text[] = {"X=1"};
    struct {
        beam_actor_spec_t a, b;
    } pairs[5];
    /* one variable whose value holds the env separator, or two variables */
    spec_init(&pairs[0].a, "py", "", 0, one_var, 1, NULL, 0);
    spec_init(&pairs[0].b, "py", "", 0, two_vars, 2, NULL, 0);
    /* an env value holding the sys_path separator, or a sys_path entry */
    spec_init(&pairs[1].a, "py", "", 0, env_with_path, 1, NULL, 0);
    spec_init(&pairs[1].b, "py", "", 0, env_only, 1, path_only, 1);
    /* the interpreter's path holding the field separator, or the cwd */
    spec_init(&pairs[2].a, "a\x1f" "b", "", 0, NULL, 0, NULL, 0);
    spec_init(&pairs[2].b, "a", "b\x1f", 0, NULL, 0, NULL, 0);
    /* the same string as an env entry or as a sys_path entry */
    spec_init(&pairs[3].a, "py", "", 0, same_text, 1, NULL, 0);
    spec_init(&pairs[3].b, "py", "", 0, NULL, 0, same_text, 1);
    /* a digit moved between cwd and noset_cuda */
    spec_init(&pairs[4].a, "py", "/srv1", 0, NULL, 0, NULL, 0);
    spec_init(&pairs[4].b, "py", "/srv", 1, NULL, 0, NULL, 0);
    for (int i = 0; i < 5; i++) {
        if (same_key(&pairs[i].a, &pairs[i].b))
            fail_msg("pair %d: two shapes share a key", i);
        beam_spec_free(node, &pairs[i].a);
        beam_spec_free(node, &pairs[i].b);
    }
    free(node);
}

/* Long and many strings: the key holds each whole (ASan and valgrind watch
 * its buffer's size). */
static void test_key_long_parts(void **state)
{
    (void)state;
    beam_node_t *node = new_node();
    enum { N = 64, LEN = 3000 };
    char *big[N];
    size_t total = 0;
    for (int i = 0; i < N; i++) {
        big[i] = malloc(LEN + 1);
        assert_non_null(big[i]);
        memset(big[i], 'a' + i % 26, LEN);
        big[i][0] = 'K';
        big[i][1] = '=';
        big[i][LEN] = '\0';
        total += LEN;
    }
    beam_actor_spec_t a, b;
    spec_init(&a, "py", "/srv", 1, (const char *const *)big, N, (const char *const *)big, N);
    spec_init(&b, "py", "/srv", 1, (const char *const *)big, N, (const char *const *)big, N - 1);
    char *k = key_of(&a);
    assert_true(strlen(k) > 2 * total);
    for (int i = 0; i < N; i++)
        assert_non_null(strstr(k, big[i]));
    free(k);
    assert_false(same_key(&a, &b));
    beam_spec_free(node, &a);
    beam_spec_free(node, &b);
    for (int i = 0; i < N; i++)
        free(big[i]);
    free(node);
}

/* --- freeing --- */

static int actor_pins; /* the node's actor_pin hook: +1 pin, -1 unpin */
static char pinned_actor[BEAM_ACTOR_ID_SIZE];

static void count_actor_pin(beam_node_t *node, const char *actor, int pin)
{
    (void)node;
    assert_memory_equal(actor, pinned_actor, BEAM_ACTOR_ID_SIZE);
    actor_pins += pin ? 1 : -1;
}

static void test_free_lets_go(void **state)
{
    (void)state;
    beam_node_t *node = new_node();
    node->hooks.actor_pin = count_actor_pin;
    memset(pinned_actor, 7, sizeof pinned_actor);
    actor_pins = 0;
    /* a ready value only the spec keeps, a pending one, and an id no
     * object has (a value already gone) */
    char ready[BEAM_OBJECT_ID_SIZE], pending[BEAM_OBJECT_ID_SIZE], gone[BEAM_OBJECT_ID_SIZE];
    memset(ready, 1, sizeof ready);
    memset(pending, 2, sizeof pending);
    memset(gone, 3, sizeof gone);
    beam_object_t *r = beam_object_create(node, ready), *p = beam_object_create(node, pending);
    assert_non_null(r);
    assert_non_null(p);

    beam_actor_spec_t s;
    static const char *const env[] = {"A=1"}, *const path[] = {"/p"};
    spec_init(&s, "py", "/srv", 0, env, 1, path, 1);
    s.class_data = dup_str("cls");
    s.class_len = 3;
    s.args = dup_str("args");
    s.args_len = 4;
    s.refs.nobjs = 3;
    s.refs.objs = malloc(3 * BEAM_OBJECT_ID_SIZE);
    s.refs.nactors = 1;
    s.refs.actors = malloc(BEAM_ACTOR_ID_SIZE);
    assert_non_null(s.refs.objs);
    assert_non_null(s.refs.actors);
    memcpy(s.refs.objs, ready, BEAM_OBJECT_ID_SIZE);
    memcpy(s.refs.objs + BEAM_OBJECT_ID_SIZE, pending, BEAM_OBJECT_ID_SIZE);
    memcpy(s.refs.objs + 2 * BEAM_OBJECT_ID_SIZE, gone, BEAM_OBJECT_ID_SIZE);
    memcpy(s.refs.actors, pinned_actor, BEAM_ACTOR_ID_SIZE);
    beam_refs_pin(node, &s.refs);
    assert_int_equal(r->pins, 1);
    assert_int_equal(p->pins, 1);
    assert_int_equal(actor_pins, 1);
    /* the value arrives while the spec pins it: kept for it */
    beam_object_complete(node, r, 0, dup_str("value"), 5, NULL);
    assert_ptr_equal(beam_object_find(node, ready), r);

    beam_spec_free(node, &s);
    /* the ready value had no one else: it went with the spec's pin */
    assert_null(beam_object_find(node, ready));
    /* the pending one stays (its call is to come), unpinned */
    assert_ptr_equal(beam_object_find(node, pending), p);
    assert_int_equal(p->pins, 0);
    assert_int_equal(actor_pins, 0);
    /* cleared: nothing left to free, and freeing it again is harmless */
    beam_actor_spec_t zero;
    memset(&zero, 0, sizeof zero);
    assert_memory_equal(&s, &zero, sizeof s);
    beam_spec_free(node, &s);
    assert_int_equal(actor_pins, 0);
    beam_objects_destroy(node);
    free(node);
}

/* --- the init push --- */

/* A port that keeps the last frame it is sent. */
typedef struct keep_s {
    beam_port_t port;
    int sent;
    char *frame;
    size_t len;
} keep_t;

static int keep_send(beam_port_t *p, char *buf, size_t len)
{
    keep_t *k = (keep_t *)p;
    free(k->frame);
    k->frame = buf;
    k->len = len;
    k->sent++;
    return 0;
}

static int keep_closing(const beam_port_t *p)
{
    (void)p;
    return 0;
}

static const beam_port_ops_t keep_ops = {.send = keep_send, .closing = keep_closing};

/* The frame k was sent, parsed: an `init` push (its params in msg). */
static void parse_init(keep_t *k, beam_msg_t *msg)
{
    char err[160];
    assert_int_equal(k->sent, 1);
    assert_true(k->len > BEAM_FRAME_HEADER);
    if (beam_msg_parse(k->frame + BEAM_FRAME_HEADER, k->len - BEAM_FRAME_HEADER, &k->port.node->limits, msg,
                       err, sizeof err) != 0)
        fail_msg("the init push does not parse: %s", err);
    assert_int_equal(msg->type, BEAM_MSG_PUSH);
    assert_true(beam_str_eq(msg->op, msg->op_len, "init"));
}

static void assert_str_field(const msgpack_object *params, const char *key, const char *want)
{
    const char *s;
    uint32_t n;
    assert_int_equal(beam_field_str(params, key, &s, &n), 0);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(s, want, n);
}

static void assert_bin_field(const msgpack_object *params, const char *key, const char *want, uint32_t len)
{
    const char *s;
    uint32_t n;
    assert_int_equal(beam_field_bin(params, key, &s, &n), 0);
    assert_int_equal(n, len);
    assert_memory_equal(s, want, len);
}

/* The str array params[key] is exactly want[0..n). */
static void assert_strs_field(const msgpack_object *params, const char *key, const char *const *want, size_t n)
{
    const msgpack_object_array *a;
    assert_int_equal(beam_field_array(params, key, &a), 0);
    assert_int_equal(a->size, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(a->ptr[i].type, MSGPACK_OBJECT_STR);
        assert_true(beam_str_eq(a->ptr[i].via.str.ptr, a->ptr[i].via.str.size, want[i]));
    }
}

static void test_init_push(void **state)
{
    (void)state;
    beam_node_t *node = new_node();
    keep_t k = {.port = {.ops = &keep_ops, .node = node}};
    beam_actor_spec_t s;
    spec_init(&s, "py", NULL, 0, NULL, 0, PATH, 2);
    s.class_len = 13;
    s.class_data = malloc(s.class_len);
    assert_non_null(s.class_data);
    memcpy(s.class_data, "pickled\0class", s.class_len);
    s.args = dup_str("");
    s.args_len = 0;
    /* a pool of four named GPUs; the grant holds the third and the first,
     * in that order, and 1.5 CPU */
    beam_pool_t pool;
    beam_pool_init(&pool);
    static const char *const gpu_names[] = {"GPU-a", "GPU-b", "GPU-c", "GPU-d"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(beam_pool_add_gpu(&pool, gpu_names[i]), 0);
    beam_grant_t grant;
    memset(&grant, 0, sizeof grant);
    assert_int_equal(beam_demand_add(&grant.taken, "CPU", 3 * U / 2), 0);
    assert_int_equal(beam_demand_add(&grant.taken, "GPU", 2 * U), 0);
    grant.ngpus = 2;
    grant.gpu_index[0] = 2;
    grant.gpu_index[1] = 0;
    grant.gpu_units[0] = grant.gpu_units[1] = U;
    char actor[BEAM_ACTOR_ID_SIZE];
    memset(actor, 0x5a, sizeof actor);
    beam_init_t in = {.actor = actor, .class_name = "Worker", .bundle = -1, .max_concurrency = 4,
                      .pool = &pool, .grant = &grant};

    /* anonymous, in no group, no namespace */
    beam_spec_send_init(&k.port, &s, &in);
    beam_msg_t msg;
    parse_init(&k, &msg);
    const msgpack_object *p = &msg.params;
    assert_int_equal(p->via.map.size, 14);
    assert_bin_field(p, "actor", actor, BEAM_ACTOR_ID_SIZE);
    assert_str_field(p, "class_name", "Worker");
    assert_bin_field(p, "class_data", "pickled\0class", 13);
    assert_bin_field(p, "args", "", 0);
    assert_strs_field(p, "sys_path", PATH, 2);
    assert_str_field(p, "cwd", "");
    static const char *const held[] = {"GPU-c", "GPU-a"};
    assert_strs_field(p, "gpu_ids", held, 2); /* the devices' names, in the grant's order */
    assert_str_field(p, "name", "");
    const msgpack_object *pg = beam_map_get(p, "placement_group");
    assert_non_null(pg);
    assert_int_equal(pg->type, MSGPACK_OBJECT_NIL);
    int64_t i;
    int b;
    assert_int_equal(beam_field_int(p, "bundle_index", &i), 0);
    assert_int_equal(i, -1);
    assert_int_equal(beam_field_bool(p, "capture_child_tasks", &b), 0);
    assert_false(b);
    assert_str_field(p, "namespace", "");
    assert_int_equal(beam_field_int(p, "max_concurrency", &i), 0);
    assert_int_equal(i, 4);
    /* what it holds, in Ray's units: 1.5 CPU, 2 GPU */
    const msgpack_object_map *res;
    assert_int_equal(beam_field_map(p, "resources", &res), 0);
    assert_int_equal(res->size, 2);
    const msgpack_object *res_obj = beam_map_get(beam_map_get(p, "resources"), "CPU");
    assert_non_null(res_obj);
    assert_true(res_obj->type == MSGPACK_OBJECT_FLOAT64 || res_obj->type == MSGPACK_OBJECT_FLOAT32);
    assert_true(res_obj->via.f64 == 1.5);
    res_obj = beam_map_get(beam_map_get(p, "resources"), "GPU");
    assert_non_null(res_obj);
    assert_true(res_obj->via.f64 == 2.0);
    beam_msg_destroy(&msg);

    /* named, in a group's bundle 2, with a namespace and a cwd, no GPU */
    char gid[BEAM_PG_ID_SIZE];
    memset(gid, 0x33, sizeof gid);
    free(s.cwd);
    s.cwd = dup_str("/srv");
    beam_grant_t cpu_only;
    memset(&cpu_only, 0, sizeof cpu_only);
    assert_int_equal(beam_demand_add(&cpu_only.taken, "CPU", U), 0);
    in.name = "counter";
    in.pg = gid;
    in.bundle = 2;
    in.capture_child_tasks = 1;
    in.job_namespace = "ns";
    in.grant = &cpu_only;
    k.sent = 0;
    beam_spec_send_init(&k.port, &s, &in);
    parse_init(&k, &msg);
    p = &msg.params;
    assert_str_field(p, "name", "counter");
    assert_bin_field(p, "placement_group", gid, BEAM_PG_ID_SIZE);
    assert_int_equal(beam_field_int(p, "bundle_index", &i), 0);
    assert_int_equal(i, 2);
    assert_int_equal(beam_field_bool(p, "capture_child_tasks", &b), 0);
    assert_true(b);
    assert_str_field(p, "namespace", "ns");
    assert_str_field(p, "cwd", "/srv");
    assert_strs_field(p, "gpu_ids", NULL, 0);
    beam_msg_destroy(&msg);

    free(k.frame);
    beam_pool_destroy(&pool);
    beam_spec_free(node, &s);
    free(node);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_one_shape_one_key),
        cmocka_unit_test(test_key_each_part_counts),
        cmocka_unit_test(test_key_unambiguous),
        cmocka_unit_test(test_key_long_parts),
        cmocka_unit_test(test_free_lets_go),
        cmocka_unit_test(test_init_push),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
