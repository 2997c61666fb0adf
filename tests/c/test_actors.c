/* test_actors.c — the actor table (src/actors.h, calls.h, deaths.h) with no
 * socket and no process: clients are test ports (testport.h) and this node's
 * member starts and kills workers through test operations that only record
 * what they were asked. Creation (pending, placed), the call queue of a
 * pending actor, calls sent once the worker is ready, deaths failing every
 * call through the objects' waiters, holders and pins, an owner's end. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors.h"
#include "cluster.h"
#include "deaths.h"
#include "log.h"
#include "objects.h"
#include "placement.h"
#include "testport.h"

#define U BEAM_RES_UNIT

typedef struct fixture_s {
    uv_loop_t loop;
    beam_node_t node;
    tport_t owner, worker;
    int spawns, kills;
    char spawned[BEAM_ACTOR_ID_SIZE], killed[BEAM_ACTOR_ID_SIZE];
    char token[33];
} fixture_t;

static fixture_t *the; /* for the member ops */

static int test_spawn(beam_node_t *node, beam_member_t *m, const beam_spawn_t *s, long *pid)
{
    (void)node;
    (void)m;
    the->spawns++;
    memcpy(the->spawned, s->actor, BEAM_ACTOR_ID_SIZE);
    snprintf(the->token, sizeof the->token, "%s", s->token);
    *pid = 4242;
    return 0;
}

static void test_kill(beam_node_t *node, beam_member_t *m, const char *actor)
{
    (void)node;
    (void)m;
    the->kills++;
    memcpy(the->killed, actor, BEAM_ACTOR_ID_SIZE);
}

static const beam_member_ops_t test_ops = {test_spawn, test_kill};

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (!f || uv_loop_init(&f->loop) != 0)
        return -1;
    the = f;
    beam_node_t *node = &f->node;
    node->loop = &f->loop;
    beam_limits_default(&node->limits);
    node->node_index = 1;
    node->is_head = 1;
    snprintf(node->node_ip, sizeof node->node_ip, "10.0.0.1");
    beam_pool_init(&node->pool);
    if (beam_pool_add(&node->pool, "CPU", 2 * U) < 0 || beam_cluster_init_self(node) < 0)
        return -1;
    node->self->ops = &test_ops;
    node->hooks.actor_pin = beam_actor_pin_id;
    node->hooks.schedule = beam_actors_schedule;
    node->hooks.pg_removed = beam_actors_pg_removed;
    node->hooks.pg_forget = beam_actors_pg_forget;
    node->hooks.member_in_use = beam_actors_member_in_use;
    tport_init(&f->owner, node, 7, BEAM_ROLE_DRIVER);
    tport_init(&f->worker, node, 8, BEAM_ROLE_NONE);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    beam_objects_destroy(&f->node);
    beam_actors_destroy(&f->node);
    beam_pgs_destroy(&f->node);
    beam_cluster_destroy(&f->node);
    beam_pool_destroy(&f->node.pool);
    tport_free_holds(&f->owner);
    tport_free_holds(&f->worker);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    uv_loop_close(&f->loop);
    free(f);
    return 0;
}

static void actor_id(char *id, uint32_t seq)
{
    memset(id, 0, BEAM_ACTOR_ID_SIZE);
    id[3] = 1;
    id[8] = (char)seq;
}

static void obj_id(char *id, uint32_t seq)
{
    memset(id, 0, BEAM_OBJECT_ID_SIZE);
    id[3] = 1;
    id[15] = (char)seq;
}

static char *dup_str(const char *s)
{
    char *p = strdup(s);
    assert_non_null(p);
    return p;
}

/* An actor asking for cpus CPUs (and gpus GPUs), owned by f->owner. */
static beam_actor_t *create(fixture_t *f, uint32_t seq, double cpus, double gpus, int detached)
{
    char id[BEAM_ACTOR_ID_SIZE];
    actor_id(id, seq);
    beam_actor_options_t opts = {.max_concurrency = 1, .detached = detached};
    beam_actor_spec_t spec = {.python = dup_str("python3")};
    beam_demand_t d;
    memset(&d, 0, sizeof d);
    assert_int_equal(beam_demand_add(&d, "CPU", beam_res_units(cpus)), 0);
    if (gpus > 0)
        assert_int_equal(beam_demand_add(&d, "GPU", beam_res_units(gpus)), 0);
    assert_int_equal(beam_actor_create(&f->node, &f->owner.port, id, dup_str("Counter"), &opts, &spec, &d, NULL,
                                       -1, 0),
                     0);
    beam_actor_t *a = beam_actor_find(&f->node, id);
    assert_non_null(a);
    return a;
}

/* A call's return object, held by the owner as dispatch's submit does. */
static beam_object_t *submit(fixture_t *f, beam_actor_t *a, uint32_t seq)
{
    char obj[BEAM_OBJECT_ID_SIZE];
    obj_id(obj, seq);
    beam_object_t *o = beam_object_create(&f->node, obj);
    assert_non_null(o);
    assert_int_equal(beam_port_hold(&f->owner.port.held_objects, obj, sizeof obj), 1);
    beam_object_hold(&f->node, o);
    beam_refs_t refs = {0};
    beam_buf_t *args = beam_buf_wrap(dup_str("args"), 4);
    beam_actor_submit(&f->node, a, obj, dup_str("incr"), args, args->data, 4, &refs);
    return beam_object_find(&f->node, obj);
}

/* The owner waits in ray.get on object seq. */
static void get(fixture_t *f, uint64_t msgid, uint32_t seq)
{
    char obj[BEAM_OBJECT_ID_SIZE];
    obj_id(obj, seq);
    msgpack_object o = {.type = MSGPACK_OBJECT_BIN, .via.bin = {.size = BEAM_OBJECT_ID_SIZE, .ptr = obj}};
    msgpack_object_array ids = {.size = 1, .ptr = &o};
    assert_int_equal(beam_waiter_start(&f->node, &f->owner.port, msgid, BEAM_WAIT_GET, &ids, 0, -1), 0);
}

static void test_pending_actor_queues_its_calls(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 1, 0); /* a GPU this node has not */
    assert_int_equal(a->state, BEAM_ACTOR_PENDING);
    assert_ptr_equal(f->node.pending, a);
    assert_int_equal(f->spawns, 0);
    assert_int_equal(a->holders, 1); /* the owner's handle */
    assert_int_equal(HASH_COUNT(f->owner.port.held_actors), 1);
    beam_object_t *o1 = submit(f, a, 1), *o2 = submit(f, a, 2);
    assert_int_equal(beam_calls_count(a->calls.queue), 2);
    assert_null(a->calls.sent);
    assert_false(o1->ready);
    assert_false(o2->ready);
    assert_int_equal(f->owner.n, 0); /* nothing answered yet */
    assert_int_equal(f->worker.n, 0);
}

static void test_death_fails_queued_calls_through_the_port(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 1, 0);
    beam_object_t *o1 = submit(f, a, 1);
    submit(f, a, 2);
    get(f, 11, 1);
    assert_int_equal(f->owner.n, 0);
    beam_actor_kill(&f->node, a, "killed by the test");
    assert_int_equal(a->state, BEAM_ACTOR_DEAD);
    assert_null(f->node.pending);
    assert_null(a->calls.queue);
    assert_true(o1->ready);
    assert_int_equal(o1->status, BEAM_OBJ_ACTOR_DIED);
    assert_memory_equal(o1->data, "killed by the test", o1->len);
    /* the waiting get is answered through the owner's port */
    assert_int_equal(f->owner.n, 1);
    assert_string_equal(f->owner.op[0], "reply");
    assert_int_equal(f->owner.msgid[0], 11);
    assert_int_equal(f->owner.error[0], 0);
    assert_null(f->owner.port.waiters);
    /* a call on a dead actor completes at once with its death */
    beam_object_t *o3 = submit(f, a, 3);
    assert_true(o3->ready);
    assert_int_equal(o3->status, BEAM_OBJ_ACTOR_DIED);
    assert_int_equal(f->kills, 0); /* no worker ran */
}

static void test_holders_and_pins_keep_it(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 1, 0);
    char id[BEAM_ACTOR_ID_SIZE];
    memcpy(id, a->id, sizeof id);
    /* a value in transit carries its handle: pinned through the hook */
    beam_refs_t refs = {.nactors = 1, .actors = malloc(BEAM_ACTOR_ID_SIZE)};
    assert_non_null(refs.actors);
    memcpy(refs.actors, id, BEAM_ACTOR_ID_SIZE);
    beam_refs_pin(&f->node, &refs);
    assert_int_equal(a->pins, 1);
    assert_int_equal(beam_port_unhold(&f->owner.port.held_actors, id, sizeof id), 1);
    beam_actor_unhold(&f->node, a);
    assert_int_equal(a->holders, 0);
    assert_ptr_equal(beam_actor_find(&f->node, id), a);
    assert_int_not_equal(a->state, BEAM_ACTOR_DEAD);
    /* the last pin going ends it (pending: at once) and frees the record */
    beam_refs_unpin(&f->node, &refs);
    assert_null(beam_actor_find(&f->node, id));
    assert_null(f->node.pending);
}

static void test_detached_outlives_its_handles(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 1, 1);
    beam_port_unhold(&f->owner.port.held_actors, a->id, BEAM_ACTOR_ID_SIZE);
    beam_actor_unhold(&f->node, a);
    assert_int_equal(a->state, BEAM_ACTOR_PENDING);
    beam_actors_conn_gone(&f->node, &f->owner.port);
    assert_int_equal(a->state, BEAM_ACTOR_PENDING);
    beam_actor_kill(&f->node, a, "ray.kill");
    assert_null(f->node.actors); /* dead, unreferenced, not running: freed */
}

static void test_owner_gone_kills_its_actors(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 1, 0);
    beam_object_t *o = submit(f, a, 1);
    beam_actors_conn_gone(&f->node, &f->owner.port);
    assert_int_equal(a->state, BEAM_ACTOR_DEAD);
    assert_non_null(strstr(a->death, "owner has died"));
    assert_int_equal(o->status, BEAM_OBJ_ACTOR_DIED);
}

static void test_lifecycle_with_a_worker(void **state)
{
    fixture_t *f = *state;
    const beam_res_entry_t *cpu = beam_pool_find(&f->node.pool, "CPU");
    beam_actor_t *a = create(f, 1, 1, 0, 0);
    /* placed here at once: the member was asked to start its worker */
    assert_int_equal(a->state, BEAM_ACTOR_STARTING);
    assert_int_equal(f->spawns, 1);
    assert_memory_equal(f->spawned, a->id, BEAM_ACTOR_ID_SIZE);
    assert_int_equal(a->pid, 4242);
    assert_int_equal(cpu->avail, 1 * U);
    beam_object_t *o1 = submit(f, a, 1);
    assert_int_equal(beam_calls_count(a->calls.queue), 1);
    /* a worker with the wrong token is refused; the right one attaches */
    assert_int_equal(beam_actor_attach_worker(&f->node, a, &f->worker.port, "nope"), -EPERM);
    assert_int_equal(beam_actor_attach_worker(&f->node, a, &f->worker.port, f->token), 0);
    assert_ptr_equal(f->worker.port.actor, a);
    assert_int_equal(f->worker.port.job, f->owner.port.job);
    f->worker.port.role = BEAM_ROLE_WORKER;
    beam_actor_send_init(&f->node, a);
    assert_int_equal(tport_count(&f->worker, "init"), 1);
    assert_int_equal(tport_count(&f->worker, "call"), 0);
    /* constructed: the queue goes out in order */
    beam_actor_ready(&f->node, a, 1, NULL, 0);
    assert_int_equal(a->state, BEAM_ACTOR_ALIVE);
    assert_int_equal(tport_count(&f->worker, "call"), 1);
    assert_null(a->calls.queue);
    beam_object_t *o2 = submit(f, a, 2); /* sent at once now */
    assert_int_equal(tport_count(&f->worker, "call"), 2);
    assert_int_equal(beam_calls_count(a->calls.sent), 2);
    /* results */
    get(f, 21, 1);
    beam_buf_t *one = beam_buf_wrap(dup_str("one"), 3);
    assert_int_equal(beam_actor_task_done(&f->node, a, o1->id, BEAM_OBJ_OK, one, one->data, 3, NULL), 0);
    assert_true(o1->ready);
    assert_int_equal(tport_count(&f->owner, "reply"), 1);
    char other[BEAM_OBJECT_ID_SIZE];
    obj_id(other, 99);
    beam_buf_t *x = beam_buf_wrap(dup_str("x"), 1);
    assert_int_equal(beam_actor_task_done(&f->node, a, other, BEAM_OBJ_OK, x, x->data, 1, NULL), -ENOENT);
    /* killed: the worker is killed through the member, its call fails */
    beam_actor_kill(&f->node, a, "ray.kill");
    assert_int_equal(f->kills, 1);
    assert_true(o2->ready);
    assert_int_equal(o2->status, BEAM_OBJ_ACTOR_DIED);
    assert_int_equal(cpu->avail, 1 * U); /* held until the worker is gone */
    beam_actor_worker_exited(&f->node, a->id, 4242, 0, 9);
    assert_int_equal(cpu->avail, 2 * U);
    /* its worker's port ends: the record goes once its handle is dropped */
    beam_actors_conn_gone(&f->node, &f->worker.port);
    assert_null(f->worker.port.actor);
    char id[BEAM_ACTOR_ID_SIZE];
    memcpy(id, a->id, sizeof id);
    beam_port_unhold(&f->owner.port.held_actors, id, sizeof id);
    beam_actor_unhold(&f->node, a);
    assert_null(beam_actor_find(&f->node, id));
}

static void test_worker_port_gone_kills_the_actor(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 0, 0);
    assert_int_equal(beam_actor_attach_worker(&f->node, a, &f->worker.port, f->token), 0);
    f->worker.port.role = BEAM_ROLE_WORKER;
    beam_actor_ready(&f->node, a, 1, NULL, 0);
    beam_object_t *o = submit(f, a, 1);
    assert_int_equal(tport_count(&f->worker, "call"), 1);
    beam_actors_conn_gone(&f->node, &f->worker.port);
    assert_int_equal(a->state, BEAM_ACTOR_DEAD);
    assert_non_null(strstr(a->death, "connection to beamd closed"));
    assert_int_equal(o->status, BEAM_OBJ_ACTOR_DIED);
    assert_int_equal(f->kills, 1);
}

static void test_next_pending_starts_when_resources_return(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 2, 0, 0);
    beam_actor_t *b = create(f, 2, 1, 0, 0);
    assert_int_equal(a->state, BEAM_ACTOR_STARTING);
    assert_int_equal(b->state, BEAM_ACTOR_PENDING);
    beam_actor_kill(&f->node, a, "ray.kill");
    assert_int_equal(b->state, BEAM_ACTOR_PENDING); /* a's worker still holds them */
    beam_actor_worker_exited(&f->node, a->id, 4242, 0, 9);
    assert_int_equal(b->state, BEAM_ACTOR_STARTING);
    assert_int_equal(f->spawns, 2);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
    beam_log_set_level(BEAM_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        T(test_pending_actor_queues_its_calls),
        T(test_death_fails_queued_calls_through_the_port),
        T(test_holders_and_pins_keep_it),
        T(test_detached_outlives_its_handles),
        T(test_owner_gone_kills_its_actors),
        T(test_lifecycle_with_a_worker),
        T(test_worker_port_gone_kills_the_actor),
        T(test_next_pending_starts_when_resources_return),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
