/* test_actors.c — the actor module (src/actor/actors.h, calls.h) with no
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
#include "log.h"
#include "objects.h"
#include "placement.h"
#include "testport.h"

#define U BEAM_RES_UNIT

typedef struct fixture_s {
    uv_loop_t loop;
    beam_node_t node;
    tport_t owner, worker;
    int spawns, kills, rebinds;
    int spawn_error; /* what the next spawns fail with (0: they start) */
    char rebound_from[BEAM_ACTOR_ID_SIZE], rebound_to[BEAM_ACTOR_ID_SIZE];
    char spawned[BEAM_ACTOR_ID_SIZE], killed[BEAM_ACTOR_ID_SIZE];
    char token[33];
} fixture_t;

static fixture_t *the; /* for the member ops */

static int test_spawn(beam_node_t *node, beam_member_t *m, const beam_spawn_t *s, long *pid)
{
    (void)node;
    (void)m;
    if (the->spawn_error)
        return the->spawn_error;
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

static int test_rebind(beam_node_t *node, beam_member_t *m, const char *from, const char *to,
                       const char *class_name)
{
    (void)node;
    (void)m;
    (void)class_name;
    the->rebinds++;
    memcpy(the->rebound_from, from, BEAM_ACTOR_ID_SIZE);
    memcpy(the->rebound_to, to, BEAM_ACTOR_ID_SIZE);
    return 0;
}

static const beam_member_ops_t test_ops = {test_spawn, test_kill, test_rebind};

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

/* What the actor module shows of a. */
static beam_actor_info_t info(const beam_actor_t *a)
{
    beam_actor_info_t i;
    beam_actor_info(a, &i);
    return i;
}

/* An actor (a task when task is set) asking for cpus CPUs (and gpus GPUs)
 * in group pg (or none), owned by f->owner. */
static beam_actor_t *create_in(fixture_t *f, uint32_t seq, double cpus, double gpus, int detached, int task,
                               beam_pg_t *pg)
{
    char id[BEAM_ACTOR_ID_SIZE];
    actor_id(id, seq);
    beam_actor_options_t opts = {.max_concurrency = 1, .detached = detached, .task = task};
    beam_actor_spec_t spec = {.python = dup_str("python3")};
    beam_demand_t d;
    memset(&d, 0, sizeof d);
    assert_int_equal(beam_demand_add(&d, "CPU", beam_res_units(cpus)), 0);
    if (gpus > 0)
        assert_int_equal(beam_demand_add(&d, "GPU", beam_res_units(gpus)), 0);
    assert_int_equal(beam_actor_create(&f->node, &f->owner.port, id, dup_str("Counter"), &opts, &spec, &d, pg,
                                       -1, 0),
                     0);
    beam_actor_t *a = beam_actor_find(&f->node, id);
    assert_non_null(a);
    return a;
}

/* An actor asking for cpus CPUs (and gpus GPUs), owned by f->owner. */
static beam_actor_t *create(fixture_t *f, uint32_t seq, double cpus, double gpus, int detached)
{
    return create_in(f, seq, cpus, gpus, detached, 0, NULL);
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
    assert_int_equal(info(a).state, BEAM_ACTOR_PENDING);
    assert_ptr_equal(f->node.pending, a);
    assert_int_equal(f->spawns, 0);
    assert_int_equal(info(a).holders, 1); /* the owner's handle */
    assert_int_equal(HASH_COUNT(f->owner.port.held_actors), 1);
    beam_object_t *o1 = submit(f, a, 1), *o2 = submit(f, a, 2);
    assert_int_equal(info(a).queued, 2);
    assert_int_equal(info(a).sent, 0);
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
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_null(f->node.pending);
    assert_int_equal(info(a).queued, 0);
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
    memcpy(id, beam_actor_id(a), sizeof id);
    /* a value in transit carries its handle: pinned through the hook */
    beam_refs_t refs = {.nactors = 1, .actors = malloc(BEAM_ACTOR_ID_SIZE)};
    assert_non_null(refs.actors);
    memcpy(refs.actors, id, BEAM_ACTOR_ID_SIZE);
    beam_refs_pin(&f->node, &refs);
    assert_int_equal(info(a).pins, 1);
    assert_int_equal(beam_port_unhold(&f->owner.port.held_actors, id, sizeof id), 1);
    beam_actor_unhold(&f->node, a);
    assert_int_equal(info(a).holders, 0);
    assert_ptr_equal(beam_actor_find(&f->node, id), a);
    assert_int_not_equal(info(a).state, BEAM_ACTOR_DEAD);
    /* the last pin going ends it (pending: at once) and frees the record */
    beam_refs_unpin(&f->node, &refs);
    assert_null(beam_actor_find(&f->node, id));
    assert_null(f->node.pending);
}

static void test_detached_outlives_its_handles(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 1, 1);
    beam_port_unhold(&f->owner.port.held_actors, beam_actor_id(a), BEAM_ACTOR_ID_SIZE);
    beam_actor_unhold(&f->node, a);
    assert_int_equal(info(a).state, BEAM_ACTOR_PENDING);
    beam_actors_conn_gone(&f->node, &f->owner.port);
    assert_int_equal(info(a).state, BEAM_ACTOR_PENDING);
    beam_actor_kill(&f->node, a, "ray.kill");
    assert_int_equal(beam_actors_count(&f->node), 0); /* dead, unreferenced, not running: freed */
}

static void test_owner_gone_kills_its_actors(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 1, 0);
    beam_object_t *o = submit(f, a, 1);
    beam_actors_conn_gone(&f->node, &f->owner.port);
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_non_null(strstr(info(a).death, "owner has died"));
    assert_int_equal(o->status, BEAM_OBJ_ACTOR_DIED);
}

static void test_lifecycle_with_a_worker(void **state)
{
    fixture_t *f = *state;
    const beam_res_entry_t *cpu = beam_pool_find(&f->node.pool, "CPU");
    beam_actor_t *a = create(f, 1, 1, 0, 0);
    /* placed here at once: the member was asked to start its worker */
    assert_int_equal(info(a).state, BEAM_ACTOR_STARTING);
    assert_int_equal(f->spawns, 1);
    assert_memory_equal(f->spawned, beam_actor_id(a), BEAM_ACTOR_ID_SIZE);
    assert_int_equal(info(a).pid, 4242);
    assert_int_equal(cpu->avail, 1 * U);
    beam_object_t *o1 = submit(f, a, 1);
    assert_int_equal(info(a).queued, 1);
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
    assert_int_equal(info(a).state, BEAM_ACTOR_ALIVE);
    assert_int_equal(tport_count(&f->worker, "call"), 1);
    assert_int_equal(info(a).queued, 0);
    beam_object_t *o2 = submit(f, a, 2); /* sent at once now */
    assert_int_equal(tport_count(&f->worker, "call"), 2);
    assert_int_equal(info(a).sent, 2);
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
    beam_actor_worker_exited(&f->node, beam_actor_id(a), 4242, 0, 9);
    assert_int_equal(cpu->avail, 2 * U);
    /* its worker's port ends: the record goes once its handle is dropped */
    beam_actors_conn_gone(&f->node, &f->worker.port);
    assert_null(f->worker.port.actor);
    char id[BEAM_ACTOR_ID_SIZE];
    memcpy(id, beam_actor_id(a), sizeof id);
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
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_non_null(strstr(info(a).death, "connection to beamd closed"));
    assert_int_equal(o->status, BEAM_OBJ_ACTOR_DIED);
    assert_int_equal(f->kills, 1);
}

static void test_next_pending_starts_when_resources_return(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 2, 0, 0);
    beam_actor_t *b = create(f, 2, 1, 0, 0);
    assert_int_equal(info(a).state, BEAM_ACTOR_STARTING);
    assert_int_equal(info(b).state, BEAM_ACTOR_PENDING);
    beam_actor_kill(&f->node, a, "ray.kill");
    assert_int_equal(info(b).state, BEAM_ACTOR_PENDING); /* a's worker still holds them */
    beam_actor_worker_exited(&f->node, beam_actor_id(a), 4242, 0, 9);
    assert_int_equal(info(b).state, BEAM_ACTOR_STARTING);
    assert_int_equal(f->spawns, 2);
}


/* --- every transition of the lifecycle (src/actor/lifecycle.c's table) --- */

/* a's worker says hello and constructs the instance: STARTING -> ALIVE. */
static void start_worker(fixture_t *f, beam_actor_t *a)
{
    assert_int_equal(beam_actor_attach_worker(&f->node, a, &f->worker.port, f->token), 0);
    f->worker.port.role = BEAM_ROLE_WORKER;
    beam_actor_send_init(&f->node, a);
    beam_actor_ready(&f->node, a, 1, NULL, 0);
    assert_int_equal(info(a).state, BEAM_ACTOR_ALIVE);
}

/* The owner drops its handle to a (as its session's release does). */
static void drop_handle(fixture_t *f, beam_actor_t *a)
{
    assert_int_equal(beam_port_unhold(&f->owner.port.held_actors, beam_actor_id(a), BEAM_ACTOR_ID_SIZE), 1);
    beam_actor_unhold(&f->node, a);
}

/* The worker returns call seq's result. */
static void finish(fixture_t *f, beam_actor_t *a, uint32_t seq)
{
    char obj[BEAM_OBJECT_ID_SIZE];
    obj_id(obj, seq);
    beam_buf_t *r = beam_buf_wrap(dup_str("r"), 1);
    assert_int_equal(beam_actor_task_done(&f->node, a, obj, BEAM_OBJ_OK, r, r->data, 1, NULL), 0);
}

static int64_t cpu_free(fixture_t *f)
{
    return beam_pool_find(&f->node.pool, "CPU")->avail;
}

static void test_place_fails_when_the_worker_cannot_start(void **state)
{
    fixture_t *f = *state;
    f->spawn_error = UV_EAGAIN;
    beam_actor_t *a = create(f, 1, 1, 0, 0); /* PENDING -> DEAD */
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_non_null(strstr(info(a).death, "could not be started"));
    assert_int_equal(cpu_free(f), 2 * U);
    assert_null(f->node.pending);
    assert_int_equal(f->spawns, 0);
}

static void test_a_constructor_error_kills_it_while_starting(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 0, 0);
    beam_object_t *o = submit(f, a, 1);
    assert_int_equal(beam_actor_attach_worker(&f->node, a, &f->worker.port, f->token), 0);
    f->worker.port.role = BEAM_ROLE_WORKER;
    beam_actor_ready(&f->node, a, 0, "ValueError: boom", 16); /* STARTING -> DEAD */
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_non_null(strstr(info(a).death, "creation task, ValueError: boom"));
    assert_int_equal(o->status, BEAM_OBJ_ACTOR_INIT_FAILED); /* its own code (PROTOCOL.md) */
    assert_int_equal(f->kills, 1);
    assert_int_equal(cpu_free(f), 1 * U); /* until its worker is gone */
    beam_actor_worker_exited(&f->node, beam_actor_id(a), 4242, 1, 0);
    assert_int_equal(cpu_free(f), 2 * U);
}

static void test_transitions_from_the_wrong_state_change_nothing(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 1, 0); /* PENDING: a GPU this node has not */
    beam_actor_ready(&f->node, a, 1, NULL, 0);
    assert_int_equal(info(a).state, BEAM_ACTOR_PENDING);
    assert_int_equal(beam_actor_attach_worker(&f->node, a, &f->worker.port, f->token), -EPERM);
    beam_actor_t *b = create(f, 2, 1, 0, 0);
    start_worker(f, b);
    beam_actor_ready(&f->node, b, 0, "late", 4); /* ALIVE: no second construction */
    assert_int_equal(info(b).state, BEAM_ACTOR_ALIVE);
    beam_actor_kill(&f->node, b, "first");
    beam_actor_kill(&f->node, b, "second"); /* DEAD: dies once */
    assert_string_equal(info(b).death, "first");
    assert_int_equal(f->kills, 1);
    beam_actor_ready(&f->node, b, 1, NULL, 0);
    assert_int_equal(info(b).state, BEAM_ACTOR_DEAD);
    assert_string_equal(beam_actor_state_name(BEAM_ACTOR_POOLED), "DEAD");
}

/* Issue 10's bug 1: the last handle of a PENDING actor dropped cancels it
 * once (it was freed twice). */
static void test_pending_release_cancels_it_once(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 1, 0);
    beam_object_t *o = submit(f, a, 1);
    drop_handle(f, a); /* its queued call keeps it pending */
    assert_int_equal(info(a).state, BEAM_ACTOR_PENDING);
    beam_actor_kill(&f->node, a, "ray.kill");
    assert_int_equal(o->status, BEAM_OBJ_ACTOR_DIED);
    assert_int_equal(beam_actors_count(&f->node), 0);
    beam_actor_t *b = create(f, 2, 1, 1, 0);
    drop_handle(f, b); /* no call: cancelled at once, freed once */
    assert_int_equal(beam_actors_count(&f->node), 0);
    assert_null(f->node.pending);
}

/* The lifecycle test's find: a queued call that carries its own actor's
 * handle holds the last pin; the death failing it must not free the record
 * under its walk. */
static void test_an_owners_sweep_survives_a_death_that_frees_another(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 0, 0), *b = create(f, 2, 2, 0, 0), *c = create(f, 3, 0.5, 0, 1);
    assert_int_equal(info(b).state, BEAM_ACTOR_PENDING); /* no worker: its death frees it */
    /* a's queued call carries b's handle: b is kept by that pin alone */
    char obj[BEAM_OBJECT_ID_SIZE];
    obj_id(obj, 1);
    beam_object_t *o = beam_object_create(&f->node, obj);
    assert_non_null(o);
    assert_int_equal(beam_port_hold(&f->owner.port.held_objects, obj, sizeof obj), 1);
    beam_object_hold(&f->node, o);
    beam_refs_t refs = {.nactors = 1, .actors = malloc(BEAM_ACTOR_ID_SIZE)};
    assert_non_null(refs.actors);
    memcpy(refs.actors, beam_actor_id(b), BEAM_ACTOR_ID_SIZE);
    beam_buf_t *args = beam_buf_wrap(dup_str("args"), 4);
    beam_actor_submit(&f->node, a, obj, dup_str("incr"), args, args->data, 4, &refs);
    drop_handle(f, b);
    assert_int_equal(info(b).pins, 1);
    assert_int_equal(beam_actors_count(&f->node), 3);
    /* the owner's end: a dies, its call's failure frees b's record
     * mid-sweep; c, detached, lives on */
    beam_actors_conn_gone(&f->node, &f->owner.port);
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_int_equal(info(c).state, BEAM_ACTOR_STARTING);
    assert_int_equal(beam_actors_count(&f->node), 2); /* a (its worker still running) and c; b freed */
}

static void test_death_while_a_queued_call_holds_its_own_handle(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 1, 0);
    char obj[BEAM_OBJECT_ID_SIZE];
    obj_id(obj, 1);
    beam_object_t *o = beam_object_create(&f->node, obj);
    assert_non_null(o);
    assert_int_equal(beam_port_hold(&f->owner.port.held_objects, obj, sizeof obj), 1);
    beam_object_hold(&f->node, o);
    beam_refs_t refs = {.nactors = 1, .actors = malloc(BEAM_ACTOR_ID_SIZE)};
    assert_non_null(refs.actors);
    memcpy(refs.actors, beam_actor_id(a), BEAM_ACTOR_ID_SIZE);
    beam_buf_t *args = beam_buf_wrap(dup_str("args"), 4);
    beam_actor_submit(&f->node, a, obj, dup_str("incr"), args, args->data, 4, &refs);
    assert_int_equal(info(a).pins, 1);
    drop_handle(f, a);
    assert_int_equal(info(a).state, BEAM_ACTOR_PENDING);
    beam_actor_kill(&f->node, a, "ray.kill"); /* the call's failure unpins the last pin */
    assert_int_equal(beam_object_find(&f->node, obj)->status, BEAM_OBJ_ACTOR_DIED);
    assert_int_equal(beam_actors_count(&f->node), 0);
}

static void test_an_unreferenced_actor_ends_once_its_calls_are_done(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 0, 0);
    start_worker(f, a);
    submit(f, a, 1);
    drop_handle(f, a);
    assert_int_equal(info(a).state, BEAM_ACTOR_ALIVE);
    finish(f, a, 1); /* ALIVE -> DEAD */
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_non_null(strstr(info(a).death, "all references"));
    assert_int_equal(f->kills, 1);
}

/* A task done and unreferenced: RETIRE (ALIVE -> POOLED); the next task of
 * its shape PLACEs on its worker through the member's rebind, and the
 * pooled record LEAVEs (POOLED -> DEAD) and is freed. */
static void test_a_task_worker_retires_into_the_pool_and_is_reused(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *t1 = create_in(f, 1, 1, 0, 0, 1, NULL);
    char id1[BEAM_ACTOR_ID_SIZE];
    memcpy(id1, beam_actor_id(t1), sizeof id1);
    start_worker(f, t1);
    submit(f, t1, 1);
    drop_handle(f, t1);
    finish(f, t1, 1);
    assert_int_equal(info(t1).state, BEAM_ACTOR_POOLED);
    assert_true(info(t1).running && info(t1).attached);
    assert_int_equal(cpu_free(f), 2 * U); /* its grant is back */
    assert_int_equal(f->kills, 0);
    beam_actor_t *t2 = create_in(f, 2, 1, 0, 0, 1, NULL);
    assert_int_equal(info(t2).state, BEAM_ACTOR_STARTING);
    assert_int_equal(f->spawns, 1); /* no new process */
    assert_int_equal(f->rebinds, 1);
    assert_memory_equal(f->rebound_from, id1, BEAM_ACTOR_ID_SIZE);
    assert_memory_equal(f->rebound_to, beam_actor_id(t2), BEAM_ACTOR_ID_SIZE);
    assert_ptr_equal(f->worker.port.actor, t2);
    assert_int_equal(tport_count(&f->worker, "init"), 2);
    assert_null(beam_actor_find(&f->node, id1));
    beam_actor_ready(&f->node, t2, 1, NULL, 0);
    assert_int_equal(info(t2).state, BEAM_ACTOR_ALIVE);
}

static void test_a_pooled_worker_that_exits_leaves_the_pool(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *t1 = create_in(f, 1, 1, 0, 0, 1, NULL);
    start_worker(f, t1);
    drop_handle(f, t1); /* idle: retires at once */
    assert_int_equal(info(t1).state, BEAM_ACTOR_POOLED);
    beam_actor_worker_exited(&f->node, beam_actor_id(t1), 4242, 0, 9); /* POOLED -> DEAD */
    assert_int_equal(info(t1).state, BEAM_ACTOR_DEAD);
    beam_actor_t *t2 = create_in(f, 2, 1, 0, 0, 1, NULL);
    assert_int_equal(f->rebinds, 0); /* not taken: a new worker */
    assert_int_equal(f->spawns, 2);
    assert_int_equal(info(t2).state, BEAM_ACTOR_STARTING);
    beam_actors_conn_gone(&f->node, &f->worker.port); /* its connection ends: the record goes */
    assert_int_equal(beam_actors_count(&f->node), 1);
}

static void test_the_drivers_end_kills_its_pooled_workers(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *t1 = create_in(f, 1, 1, 0, 0, 1, NULL);
    start_worker(f, t1);
    drop_handle(f, t1);
    assert_int_equal(info(t1).state, BEAM_ACTOR_POOLED);
    beam_actors_conn_gone(&f->node, &f->owner.port);
    assert_int_equal(f->kills, 1);
    assert_memory_equal(f->killed, beam_actor_id(t1), BEAM_ACTOR_ID_SIZE);
}

static void test_a_worker_that_exits_after_its_result_is_never_pooled(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *t1 = create_in(f, 1, 1, 0, 0, 1, NULL);
    start_worker(f, t1);
    beam_actor_worker_exiting(t1);
    drop_handle(f, t1);
    assert_int_equal(info(t1).state, BEAM_ACTOR_DEAD);
    assert_int_equal(f->kills, 1);
}

/* --- the sweeps by cause --- */

static void test_a_removed_group_kills_its_actors_and_is_forgotten(void **state)
{
    fixture_t *f = *state;
    beam_demand_t b;
    memset(&b, 0, sizeof b);
    assert_int_equal(beam_demand_add(&b, "CPU", 1 * U), 0);
    char gid[BEAM_PG_ID_SIZE] = {0, 0, 0, 1, 0, 0, 0, 7};
    assert_int_equal(beam_pg_create(&f->node, NULL, gid, NULL, BEAM_PG_PACK, &b, 1, 0), 0);
    beam_pg_t *pg = beam_pg_find(&f->node, gid);
    assert_non_null(pg);
    beam_actor_t *a = create_in(f, 1, 1, 0, 0, 0, pg);
    beam_actor_t *other = create(f, 2, 1, 0, 0);
    assert_int_equal(info(a).state, BEAM_ACTOR_STARTING);
    assert_ptr_equal(info(a).pg, pg);
    beam_pg_remove(&f->node, pg, NULL, 0);
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_string_equal(info(a).death, BEAM_PG_REMOVED_DEATH);
    assert_int_equal(info(other).state, BEAM_ACTOR_STARTING);
    beam_actor_worker_exited(&f->node, beam_actor_id(a), 4242, 0, 9);
    assert_int_equal(cpu_free(f), 1 * U); /* the bundle is back; other holds the rest */
    beam_actors_pg_forget(&f->node, pg); /* (placement's hook when the record goes) */
    assert_null(info(a).pg);
}

static void test_a_lost_member_takes_its_actors(void **state)
{
    fixture_t *f = *state;
    char nid[BEAM_NODE_ID_SIZE];
    memset(nid, 0x42, sizeof nid);
    beam_pool_t pool;
    beam_pool_init(&pool);
    assert_int_equal(beam_pool_add(&pool, "CPU", 4 * U), 0);
    beam_member_t *m = beam_cluster_add(&f->node, nid, "10.0.0.2", "m", "/tmp/m", &pool, &test_ops, NULL);
    beam_pool_destroy(&pool);
    assert_non_null(m);
    f->owner.port.member = m; /* placed on its owner's node */
    beam_actor_t *a = create(f, 1, 1, 0, 0);
    f->owner.port.member = f->node.self;
    beam_actor_t *here = create(f, 2, 1, 0, 0);
    assert_ptr_equal(info(a).member, m);
    assert_int_equal(beam_pool_find(m->pool, "CPU")->avail, 3 * U);
    beam_object_t *o = submit(f, a, 1);
    beam_actors_member_lost(&f->node, m, "The actor died because its node has died.");
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_false(info(a).running); /* no exit will come: its grant is back */
    assert_int_equal(beam_pool_find(m->pool, "CPU")->avail, 4 * U);
    assert_int_equal(o->status, BEAM_OBJ_ACTOR_DIED);
    assert_int_equal(info(here).state, BEAM_ACTOR_STARTING);
}

static void test_stopping_kills_every_actor(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 0, 0), *b = create(f, 2, 1, 1, 0);
    beam_actors_stop_all(&f->node);
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_int_equal(info(b).state, BEAM_ACTOR_DEAD);
    assert_non_null(strstr(info(a).death, "shutting down"));
    assert_int_equal(f->kills, 1); /* only a had a worker */
}

/* --- the calls a member ran itself --- */

/* A return object for call seq, held by the owner. */
static void make_obj(fixture_t *f, uint32_t seq, char *obj)
{
    obj_id(obj, seq);
    beam_object_t *o = beam_object_create(&f->node, obj);
    assert_non_null(o);
    assert_int_equal(beam_port_hold(&f->owner.port.held_objects, obj, BEAM_OBJECT_ID_SIZE), 1);
    beam_object_hold(&f->node, o);
}

static void test_local_calls_stay_open_until_the_member_takes_no_more(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 0, 0);
    char o1[BEAM_OBJECT_ID_SIZE], o2[BEAM_OBJECT_ID_SIZE], o3[BEAM_OBJECT_ID_SIZE];
    make_obj(f, 1, o1);
    beam_refs_t none = {0};
    beam_actor_submit_sent(&f->node, a, f->node.self, o1, &none); /* not ready there: lost */
    assert_int_equal(beam_object_find(&f->node, o1)->status, BEAM_OBJ_LOST);
    start_worker(f, a);
    make_obj(f, 2, o2);
    beam_actor_submit_sent(&f->node, a, f->node.self, o2, &none);
    assert_int_equal(info(a).sent, 1);
    assert_int_equal(tport_count(&f->worker, "call"), 0); /* never sent again */
    beam_actor_kill(&f->node, a, "killed elsewhere");
    assert_false(beam_object_find(&f->node, o2)->ready); /* its member may still take the result */
    make_obj(f, 3, o3);
    beam_actor_submit_sent(&f->node, a, f->node.self, o3, &none); /* open: recorded too */
    assert_int_equal(info(a).sent, 2);
    beam_actor_close_local(&f->node, a); /* the worker's exit, its end, or the member lost */
    assert_int_equal(beam_object_find(&f->node, o2)->status, BEAM_OBJ_ACTOR_DIED);
    assert_int_equal(beam_object_find(&f->node, o3)->status, BEAM_OBJ_ACTOR_DIED);
    assert_int_equal(info(a).sent, 0);
}

static void test_a_kill_from_the_member_cuts_its_local_calls(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create(f, 1, 1, 0, 0);
    start_worker(f, a);
    char o1[BEAM_OBJECT_ID_SIZE];
    make_obj(f, 1, o1);
    beam_refs_t none = {0};
    beam_actor_submit_sent(&f->node, a, f->node.self, o1, &none);
    beam_actor_cut_local(&f->node, a, f->node.self);
    assert_false(beam_object_find(&f->node, o1)->ready); /* alive: the call goes on */
    beam_actor_kill(&f->node, a, "ray.kill from there");
    assert_int_equal(beam_object_find(&f->node, o1)->status, BEAM_OBJ_ACTOR_DIED);
}

/* --- restarts (max_restarts, max_task_retries): RESTART and RESCHEDULE --- */

/* An actor of 1 CPU that restarts max_restarts times, each call it had
 * sent again max_task_retries times (-1: without end); task: a task's. */
static beam_actor_t *create_restartable(fixture_t *f, uint32_t seq, int max_restarts, int max_task_retries, int task)
{
    char id[BEAM_ACTOR_ID_SIZE];
    actor_id(id, seq);
    beam_actor_options_t opts = {
        .max_concurrency = 1, .task = task, .max_restarts = max_restarts, .max_task_retries = max_task_retries};
    beam_actor_spec_t spec = {.python = dup_str("python3"), .args = dup_str("ctor"), .args_len = 4};
    beam_demand_t d;
    memset(&d, 0, sizeof d);
    assert_int_equal(beam_demand_add(&d, "CPU", 1 * U), 0);
    assert_int_equal(beam_actor_create(&f->node, &f->owner.port, id, dup_str("Counter"), &opts, &spec, &d, NULL,
                                       -1, 0),
                     0);
    beam_actor_t *a = beam_actor_find(&f->node, id);
    assert_non_null(a);
    return a;
}

/* Its worker process is SIGKILLed: its exit, then its connection's end. */
static void worker_killed(fixture_t *f, beam_actor_t *a)
{
    beam_actor_worker_exited(&f->node, beam_actor_id(a), 4242, 0, 9);
    beam_actors_conn_gone(&f->node, &f->worker.port);
}

/* RESTART (ALIVE -> RESTARTING) on its worker's exit, RESCHEDULE
 * (RESTARTING -> PENDING -> STARTING) once its connection ended too; the
 * call it was running fails with ActorUnavailableError's status, and so does
 * a call made before the new instance is constructed (max_task_retries 0, as
 * Ray 2.43); the last restart spent, it dies. */
static void test_a_worker_death_with_restarts_left_restarts_it(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create_restartable(f, 1, 1, 0, 0);
    start_worker(f, a);
    char old_token[33];
    memcpy(old_token, f->token, sizeof old_token);
    beam_object_t *o1 = submit(f, a, 1);
    assert_int_equal(info(a).sent, 1);
    beam_actor_worker_exited(&f->node, beam_actor_id(a), 4242, 0, 9);
    assert_int_equal(info(a).state, BEAM_ACTOR_RESTARTING);
    assert_string_equal(beam_actor_ray_state(a), "RESTARTING");
    assert_int_equal(info(a).restarts, 1);
    assert_int_equal(f->kills, 0); /* it exited by itself */
    assert_true(o1->ready);
    assert_int_equal(o1->status, BEAM_OBJ_ACTOR_UNAVAILABLE);
    assert_memory_equal(o1->data, info(a).hex, 32); /* "<actor hex> <text>" (PROTOCOL.md) */
    beam_object_t *o2 = submit(f, a, 2); /* max_task_retries 0: refused at once while it restarts, as Ray */
    assert_true(o2->ready);
    assert_int_equal(o2->status, BEAM_OBJ_ACTOR_UNAVAILABLE);
    assert_int_equal(info(a).queued, 0);
    assert_int_equal(cpu_free(f), 1 * U); /* until its old worker is gone */
    assert_int_equal(f->spawns, 1);
    beam_actors_conn_gone(&f->node, &f->worker.port); /* RESTARTING -> PENDING -> STARTING */
    assert_int_equal(info(a).state, BEAM_ACTOR_STARTING);
    assert_string_equal(beam_actor_ray_state(a), "RESTARTING"); /* to Ray until ALIVE again */
    assert_int_equal(f->spawns, 2);
    assert_memory_equal(f->spawned, beam_actor_id(a), BEAM_ACTOR_ID_SIZE);
    assert_string_not_equal(f->token, old_token); /* the old worker's token opens nothing */
    assert_int_equal(cpu_free(f), 1 * U);
    assert_int_equal(submit(f, a, 4)->status, BEAM_OBJ_ACTOR_UNAVAILABLE); /* not constructed yet */
    start_worker(f, a); /* constructed again from its spec */
    assert_string_equal(beam_actor_ray_state(a), "ALIVE");
    beam_object_t *o5 = submit(f, a, 5);
    assert_int_equal(info(a).sent, 1);
    finish(f, a, 5);
    assert_int_equal(o5->status, BEAM_OBJ_OK);
    /* its last restart spent: the next death is for good */
    beam_object_t *o3 = submit(f, a, 3);
    worker_killed(f, a);
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_int_equal(o3->status, BEAM_OBJ_ACTOR_DIED);
    assert_int_equal(f->spawns, 2);
    assert_int_equal(cpu_free(f), 2 * U);
}

/* max_task_retries: the call its dead worker had is sent again to the new
 * one (its args kept), while it has retries left; a connection's end
 * restarts it as an exit does. */
static void test_a_call_with_retries_left_is_sent_again(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create_restartable(f, 1, -1, 1, 0);
    start_worker(f, a);
    beam_object_t *o1 = submit(f, a, 1), *o2 = submit(f, a, 2);
    assert_int_equal(tport_count(&f->worker, "call"), 2);
    beam_actors_conn_gone(&f->node, &f->worker.port); /* its end first: the process is killed */
    assert_int_equal(info(a).state, BEAM_ACTOR_RESTARTING);
    assert_int_equal(f->kills, 1);
    assert_false(o1->ready);
    assert_int_equal(info(a).queued, 2); /* back in the queue, in order */
    beam_object_t *o3 = submit(f, a, 3); /* with retries: waits for the new instance */
    assert_false(o3->ready);
    assert_int_equal(info(a).queued, 3);
    beam_actor_worker_exited(&f->node, beam_actor_id(a), 4242, 0, 9);
    assert_int_equal(info(a).state, BEAM_ACTOR_STARTING);
    start_worker(f, a);
    assert_int_equal(tport_count(&f->worker, "call"), 5);
    finish(f, a, 1);
    assert_int_equal(o1->status, BEAM_OBJ_OK);
    finish(f, a, 3);
    assert_int_equal(o3->status, BEAM_OBJ_OK);
    /* o2's one retry is spent: the next death fails it, the actor restarts (-1) */
    worker_killed(f, a);
    assert_int_equal(o2->status, BEAM_OBJ_ACTOR_UNAVAILABLE);
    assert_int_equal(info(a).state, BEAM_ACTOR_STARTING);
    assert_int_equal(info(a).restarts, 2);
    worker_killed(f, a); /* dies while starting: restarts again, without end */
    assert_int_equal(info(a).restarts, 3);
    assert_int_equal(info(a).state, BEAM_ACTOR_STARTING);
}

/* ray.kill(no_restart=False) restarts one with restarts left and kills one
 * without; ray.kill() kills for good; one not started yet is left to start. */
static void test_kill_restarts_only_when_asked_and_allowed(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create_restartable(f, 1, 1, 0, 0);
    start_worker(f, a);
    beam_object_t *o1 = submit(f, a, 1);
    beam_actor_kill_restart(&f->node, a, "killed, to restart");
    assert_int_equal(info(a).state, BEAM_ACTOR_RESTARTING);
    assert_int_equal(f->kills, 1);
    assert_int_equal(o1->status, BEAM_OBJ_ACTOR_UNAVAILABLE);
    worker_killed(f, a);
    assert_int_equal(info(a).state, BEAM_ACTOR_STARTING);
    beam_actor_kill_restart(&f->node, a, "no restart left"); /* STARTING, spent: dies */
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_int_equal(f->kills, 2);
    worker_killed(f, a);
    beam_actor_t *b = create_restartable(f, 2, -1, 0, 0);
    start_worker(f, b);
    beam_actor_kill(&f->node, b, "ray.kill"); /* no_restart=True */
    assert_int_equal(info(b).state, BEAM_ACTOR_DEAD);
    worker_killed(f, b);
    assert_int_equal(f->spawns, 3);
    create_restartable(f, 3, -1, 0, 0);
    create_restartable(f, 4, -1, 0, 0);
    beam_actor_t *e = create_restartable(f, 5, -1, 0, 0); /* the two CPUs are taken */
    assert_int_equal(info(e).state, BEAM_ACTOR_PENDING);
    beam_actor_kill_restart(&f->node, e, "pending");
    assert_int_equal(info(e).state, BEAM_ACTOR_PENDING);
    assert_int_equal(info(e).restarts, 0);
}

/* A death while RESTARTING is for good (DIE from RESTARTING): its queue
 * fails, its grant goes back once the old worker is gone. */
static void test_a_kill_while_restarting_kills_it(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create_restartable(f, 1, 3, 1, 0);
    start_worker(f, a);
    beam_actor_worker_exited(&f->node, beam_actor_id(a), 4242, 0, 9);
    assert_int_equal(info(a).state, BEAM_ACTOR_RESTARTING);
    beam_object_t *o = submit(f, a, 1); /* queued: it has retries */
    assert_false(o->ready);
    beam_actor_kill(&f->node, a, "ray.kill");
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_int_equal(o->status, BEAM_OBJ_ACTOR_DIED);
    assert_int_equal(cpu_free(f), 2 * U);
    beam_actors_conn_gone(&f->node, &f->worker.port);
    assert_int_equal(f->spawns, 1); /* never started again */
}

/* A task is a one-call actor with max_restarts = max_task_retries =
 * max_retries: its call runs again on a new worker; with none left its
 * worker's death fails it with WorkerCrashedError's status. */
static void test_a_task_whose_worker_dies_is_retried_then_crashes(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *t = create_restartable(f, 1, 1, 1, 1);
    start_worker(f, t);
    beam_object_t *o = submit(f, t, 1);
    drop_handle(f, t); /* as RemoteFunction.remote does */
    worker_killed(f, t);
    assert_false(o->ready);
    assert_int_equal(info(t).state, BEAM_ACTOR_STARTING);
    start_worker(f, t);
    worker_killed(f, t);
    assert_true(o->ready);
    assert_int_equal(o->status, BEAM_OBJ_WORKER_CRASHED);
    assert_int_equal(f->spawns, 2);
}

/* An end on purpose (its worker's task_done said "exiting":
 * __ray_terminate__, sys.exit()) is not restarted, nor a worker its member
 * could not start (worker_exit with pid 0, status 127), which would fail
 * again at once. */
static void test_an_end_on_purpose_or_a_failed_start_is_not_restarted(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create_restartable(f, 1, -1, 0, 0);
    start_worker(f, a);
    beam_actor_worker_exiting(a);
    worker_killed(f, a);
    assert_int_equal(info(a).state, BEAM_ACTOR_DEAD);
    assert_int_equal(info(a).restarts, 0);
    beam_actor_t *b = create_restartable(f, 2, -1, 0, 0);
    assert_int_equal(info(b).state, BEAM_ACTOR_STARTING);
    beam_actor_worker_exited(&f->node, beam_actor_id(b), 0, 127, 0);
    assert_int_equal(info(b).state, BEAM_ACTOR_DEAD);
    assert_non_null(strstr(info(b).death, "could not be started"));
    assert_int_equal(f->spawns, 2);
}

/* Its node lost: an actor with restarts left restarts on a live node, as
 * Ray's GCS restarts it (the others die, test_a_lost_member_takes_its_actors). */
static void test_a_lost_members_restartable_actor_restarts_elsewhere(void **state)
{
    fixture_t *f = *state;
    char nid[BEAM_NODE_ID_SIZE];
    memset(nid, 0x43, sizeof nid);
    beam_pool_t pool;
    beam_pool_init(&pool);
    assert_int_equal(beam_pool_add(&pool, "CPU", 4 * U), 0);
    beam_member_t *m = beam_cluster_add(&f->node, nid, "10.0.0.3", "m", "/tmp/m", &pool, &test_ops, NULL);
    beam_pool_destroy(&pool);
    assert_non_null(m);
    f->owner.port.member = m; /* placed on its owner's node */
    beam_actor_t *a = create_restartable(f, 1, 1, 1, 0);
    f->owner.port.member = f->node.self;
    assert_ptr_equal(info(a).member, m);
    beam_object_t *o = submit(f, a, 1); /* queued: it is not constructed yet */
    beam_cluster_member_lost(&f->node, m, "gone"); /* (no hook here: the sweep is called below) */
    beam_actors_member_lost(&f->node, m, "The actor died because its node has died.");
    assert_int_equal(info(a).state, BEAM_ACTOR_STARTING);
    assert_ptr_equal(info(a).member, f->node.self);
    assert_int_equal(info(a).restarts, 1);
    assert_int_equal(f->spawns, 2);
    assert_int_equal(beam_pool_find(m->pool, "CPU")->avail, 4 * U);
    assert_int_equal(cpu_free(f), 1 * U);
    assert_false(o->ready);
}

/* A restart keeps a member's local calls open while that member may still
 * take the old worker's results (they cannot be sent again: the head never
 * had their args), and fails them with status 6 once the old worker is gone;
 * a call of the head's is sent again to the new worker (max_task_retries). */
static void test_a_restart_keeps_local_calls_open_until_the_old_worker_is_gone(void **state)
{
    fixture_t *f = *state;
    beam_actor_t *a = create_restartable(f, 1, 1, -1, 0);
    start_worker(f, a);
    char o1[BEAM_OBJECT_ID_SIZE], o2[BEAM_OBJECT_ID_SIZE];
    beam_refs_t none = {0};
    make_obj(f, 1, o1);
    beam_actor_submit_sent(&f->node, a, f->node.self, o1, &none);
    beam_object_t *o3 = submit(f, a, 3);
    assert_int_equal(tport_count(&f->worker, "call"), 1);
    beam_actor_kill_restart(&f->node, a, "killed from the head, to restart");
    assert_int_equal(info(a).state, BEAM_ACTOR_RESTARTING);
    assert_false(beam_object_find(&f->node, o1)->ready); /* its member may still take the result */
    assert_false(o3->ready);
    assert_int_equal(info(a).queued, 1); /* o3, to be sent again */
    make_obj(f, 2, o2);
    beam_actor_submit_sent(&f->node, a, f->node.self, o2, &none); /* ran there before the member saw it */
    assert_int_equal(info(a).sent, 2);
    worker_killed(f, a); /* RESTARTING -> PENDING -> STARTING */
    assert_int_equal(beam_object_find(&f->node, o1)->status, BEAM_OBJ_ACTOR_UNAVAILABLE);
    assert_int_equal(beam_object_find(&f->node, o2)->status, BEAM_OBJ_ACTOR_UNAVAILABLE);
    assert_int_equal(info(a).state, BEAM_ACTOR_STARTING);
    start_worker(f, a);
    assert_int_equal(tport_count(&f->worker, "call"), 2);
    finish(f, a, 3);
    assert_int_equal(o3->status, BEAM_OBJ_OK);
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
        T(test_place_fails_when_the_worker_cannot_start),
        T(test_a_constructor_error_kills_it_while_starting),
        T(test_transitions_from_the_wrong_state_change_nothing),
        T(test_pending_release_cancels_it_once),
        T(test_death_while_a_queued_call_holds_its_own_handle),
        T(test_an_owners_sweep_survives_a_death_that_frees_another),
        T(test_an_unreferenced_actor_ends_once_its_calls_are_done),
        T(test_a_task_worker_retires_into_the_pool_and_is_reused),
        T(test_a_pooled_worker_that_exits_leaves_the_pool),
        T(test_the_drivers_end_kills_its_pooled_workers),
        T(test_a_worker_that_exits_after_its_result_is_never_pooled),
        T(test_a_removed_group_kills_its_actors_and_is_forgotten),
        T(test_a_lost_member_takes_its_actors),
        T(test_stopping_kills_every_actor),
        T(test_local_calls_stay_open_until_the_member_takes_no_more),
        T(test_a_kill_from_the_member_cuts_its_local_calls),
        T(test_a_worker_death_with_restarts_left_restarts_it),
        T(test_a_call_with_retries_left_is_sent_again),
        T(test_kill_restarts_only_when_asked_and_allowed),
        T(test_a_kill_while_restarting_kills_it),
        T(test_a_task_whose_worker_dies_is_retried_then_crashes),
        T(test_an_end_on_purpose_or_a_failed_start_is_not_restarted),
        T(test_a_lost_members_restartable_actor_restarts_elsewhere),
        T(test_a_restart_keeps_local_calls_open_until_the_old_worker_is_gone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
