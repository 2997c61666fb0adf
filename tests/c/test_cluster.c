/* test_cluster.c — the member table (src/cluster.h) with no link and no
 * process: members join with test operations that record the spawns and
 * kills routed to them; a member's loss reaches the node's hook once; dead
 * records are kept to a bound unless something still points at them. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "log.h"

#define U BEAM_RES_UNIT

typedef struct fixture_s {
    uv_loop_t loop;
    beam_node_t node;
    int spawns, kills, lost;
    beam_member_t *spawned_on, *killed_on, *lost_member;
    char why[64];
    beam_member_t *in_use; /* what the member_in_use hook says is pointed at */
} fixture_t;

static fixture_t *the;

static int test_spawn(beam_node_t *node, beam_member_t *m, const beam_spawn_t *s, long *pid)
{
    (void)node;
    (void)s;
    the->spawns++;
    the->spawned_on = m;
    *pid = 0; /* started remotely: the pid comes later */
    return 0;
}

static void test_kill(beam_node_t *node, beam_member_t *m, const char *actor)
{
    (void)node;
    (void)actor;
    the->kills++;
    the->killed_on = m;
}

static const beam_member_ops_t test_ops = {test_spawn, test_kill, NULL};

static void on_lost(beam_node_t *node, beam_member_t *m, const char *why)
{
    (void)node;
    the->lost++;
    the->lost_member = m;
    snprintf(the->why, sizeof the->why, "%s", why);
}

static int in_use(beam_node_t *node, const beam_member_t *m)
{
    (void)node;
    return m == the->in_use;
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (!f || uv_loop_init(&f->loop) != 0)
        return -1;
    the = f;
    f->node.loop = &f->loop;
    f->node.node_index = 1;
    snprintf(f->node.node_ip, sizeof f->node.node_ip, "10.0.0.1");
    memset(f->node.node_id, 0xaa, BEAM_NODE_ID_SIZE);
    beam_pool_init(&f->node.pool);
    f->node.hooks.member_lost = on_lost;
    f->node.hooks.member_in_use = in_use;
    f->node.self_ops = &test_ops; /* (beamd's are procs, wired in hooks.c) */
    if (beam_cluster_init_self(&f->node) < 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    beam_cluster_destroy(&f->node);
    beam_pool_destroy(&f->node.pool);
    uv_loop_close(&f->loop);
    free(f);
    return 0;
}

static beam_member_t *join(fixture_t *f, unsigned char tag)
{
    char id[BEAM_NODE_ID_SIZE];
    memset(id, tag, sizeof id);
    beam_pool_t pool;
    beam_pool_init(&pool);
    assert_int_equal(beam_pool_add(&pool, "CPU", 4 * U), 0);
    beam_member_t *m = beam_cluster_add(&f->node, id, "10.0.0.9", "host", "/tmp/s", &pool, &test_ops, NULL);
    beam_pool_destroy(&pool); /* taken: empty now */
    return m;
}

static void test_self_is_member_one(void **state)
{
    fixture_t *f = *state;
    beam_member_t *self = f->node.self;
    assert_non_null(self);
    assert_int_equal(self->index, 1);
    assert_true(self->local && self->alive && self->is_head);
    assert_ptr_equal(self->pool, &f->node.pool);
    assert_non_null(self->ops); /* node->self_ops */
    assert_int_equal(beam_cluster_count(&f->node), 1);
    /* the head itself is never lost */
    beam_cluster_member_lost(&f->node, self, "no");
    assert_true(self->alive);
    assert_int_equal(f->lost, 0);
}

static void test_join_find_and_list(void **state)
{
    fixture_t *f = *state;
    beam_member_t *a = join(f, 1), *b = join(f, 2);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(a->index, 2);
    assert_int_equal(b->index, 3);
    assert_ptr_equal(a->pool, &a->own_pool);
    assert_non_null(beam_pool_find(a->pool, "CPU"));
    assert_ptr_equal(beam_cluster_find(&f->node, 3), b);
    assert_null(beam_cluster_find(&f->node, 9));
    char id[BEAM_NODE_ID_SIZE];
    memset(id, 2, sizeof id);
    assert_ptr_equal(beam_cluster_find_id(&f->node, id), b);
    beam_member_t *alive[4];
    assert_int_equal(beam_cluster_alive(&f->node, alive, 4), 3);
    assert_ptr_equal(alive[0], f->node.self);
    assert_ptr_equal(alive[2], b);
    assert_int_equal(beam_cluster_alive(&f->node, alive, 2), 2);
}

static void test_spawn_and_kill_go_through_the_member(void **state)
{
    fixture_t *f = *state;
    beam_member_t *a = join(f, 1);
    char actor[BEAM_ACTOR_ID_SIZE] = {0};
    beam_spawn_t s = {.actor = actor, .class_name = "C", .python = "python3", .gpus = "", .token = "t"};
    long pid = -1;
    assert_int_equal(beam_cluster_spawn(&f->node, a, &s, &pid), 0);
    assert_int_equal(pid, 0);
    assert_int_equal(f->spawns, 1);
    assert_ptr_equal(f->spawned_on, a);
    beam_cluster_kill(&f->node, a, actor);
    assert_int_equal(f->kills, 1);
    assert_ptr_equal(f->killed_on, a);
    beam_cluster_kill(&f->node, NULL, actor); /* placed nowhere: nothing */
    assert_int_equal(f->kills, 1);
}

static void test_loss_reaches_the_hook_once(void **state)
{
    fixture_t *f = *state;
    beam_member_t *a = join(f, 1);
    beam_cluster_member_lost(&f->node, a, "heartbeat timeout");
    assert_false(a->alive);
    assert_string_equal(a->death, "heartbeat timeout");
    assert_int_equal(f->lost, 1);
    assert_ptr_equal(f->lost_member, a);
    assert_string_equal(f->why, "heartbeat timeout");
    beam_cluster_member_lost(&f->node, a, "again");
    assert_int_equal(f->lost, 1);
    /* a dead member starts and kills nothing */
    char actor[BEAM_ACTOR_ID_SIZE] = {0};
    beam_spawn_t s = {.actor = actor, .class_name = "C", .python = "python3", .gpus = "", .token = "t"};
    long pid;
    assert_int_equal(beam_cluster_spawn(&f->node, a, &s, &pid), UV_EHOSTUNREACH);
    beam_cluster_kill(&f->node, a, actor);
    assert_int_equal(f->spawns, 0);
    assert_int_equal(f->kills, 0);
    beam_member_t *alive[4];
    assert_int_equal(beam_cluster_alive(&f->node, alive, 4), 1);
    assert_int_equal(beam_cluster_count(&f->node), 2); /* kept for the tables */
}

static void test_dead_records_are_bounded_unless_referenced(void **state)
{
    fixture_t *f = *state;
    beam_member_t *first = join(f, 1), *second = join(f, 2);
    first->clients = 1;  /* a client still on it */
    f->in_use = second;  /* an actor or a bundle still on it */
    beam_cluster_member_lost(&f->node, first, "gone");
    beam_cluster_member_lost(&f->node, second, "gone");
    for (int i = 0; i < BEAM_MAX_DEAD_MEMBERS + 8; i++) {
        beam_member_t *m = join(f, (unsigned char)(3 + i));
        assert_non_null(m);
        beam_cluster_member_lost(&f->node, m, "gone");
    }
    join(f, 200); /* a join prunes */
    size_t dead = 0;
    for (beam_member_t *m = f->node.members; m; m = m->next)
        dead += !m->alive;
    assert_int_equal(dead, BEAM_MAX_DEAD_MEMBERS);
    assert_ptr_equal(beam_cluster_find(&f->node, first->index), first);
    assert_ptr_equal(beam_cluster_find(&f->node, second->index), second);
    assert_null(beam_cluster_find(&f->node, 4)); /* the oldest unreferenced went */
}

static void test_full_cluster_refuses(void **state)
{
    fixture_t *f = *state;
    for (int i = 1; i < BEAM_MAX_MEMBERS; i++)
        assert_non_null(join(f, (unsigned char)i));
    assert_null(join(f, 0xfe));
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
    beam_log_set_level(BEAM_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        T(test_self_is_member_one),
        T(test_join_find_and_list),
        T(test_spawn_and_kill_go_through_the_member),
        T(test_loss_reaches_the_hook_once),
        T(test_dead_records_are_bounded_unless_referenced),
        T(test_full_cluster_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
