/* test_intake.c — the head's reading of a member's local_batch (src/intake.h)
 * with no socket: a remote session on a stand-in link that is never written
 * to, the op table replaced by a recorder. Records are handled in order (a
 * submit's object exists before the frame after it is dispatched), a record
 * for a client that is gone changes nothing, and a malformed record is
 * refused after the ones before it were handled (and none after it), with
 * an error naming its record and field; a submit record is checked by
 * submit's field table, and one whose object id its client did not make is
 * refused. End to end (a member's
 * real batches): tests/python/test_cluster_local.py. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "intake.h"
#include "localresults.h"
#include "shortcut.h"
#include "objects.h"
#include "session.h"

typedef struct fixture_s {
    uv_loop_t loop;
    beam_node_t node;
    char link; /* stands in for the member's link: only its address is used */
    beam_member_t member; /* the client's node (member 2): its index makes the creator part of its ids */
    beam_session_t *client;
    int dispatched;
    char frame[16];
    int obj_existed; /* when the frame was dispatched, the submit's object was there */
} fixture_t;

static fixture_t *the;
static char obj1[BEAM_OBJECT_ID_SIZE], obj2[BEAM_OBJECT_ID_SIZE], actor[BEAM_ACTOR_ID_SIZE];

static void record_dispatch(beam_port_t *c, const char *frame, size_t len, beam_buf_t *buf)
{
    (void)buf;
    assert_ptr_equal(c, &the->client->port);
    assert_true(len < sizeof the->frame);
    memcpy(the->frame, frame, len);
    the->frame[len] = '\0';
    the->dispatched++;
    the->obj_existed = beam_object_find(&the->node, obj1) != NULL;
}

static beam_link_t *link_of(fixture_t *f)
{
    return (beam_link_t *)&f->link;
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (!f || uv_loop_init(&f->loop) != 0)
        return -1;
    the = f;
    f->node.loop = &f->loop;
    f->node.is_head = 1;
    beam_limits_default(&f->node.limits);
    beam_sessions_init(&f->loop, &f->node);
    f->node.hooks.dispatch = record_dispatch;
    f->member.index = 2;
    f->client = beam_session_open_remote(&f->node, link_of(f), &f->member, 5, 100, 0);
    if (!f->client)
        return -1;
    f->client->port.role = BEAM_ROLE_DRIVER; /* (it said hello) */
    /* the client's own ids (the head refuses others' in a submit record) */
    memset(obj1, 1, sizeof obj1);
    memset(obj2, 2, sizeof obj2);
    beam_put_u32be(obj1, 2);
    beam_put_u32be(obj1 + 4, f->client->port.id);
    memset(actor, 3, sizeof actor);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    f->client->remote_closed = 1; /* (nothing to tell the stand-in link) */
    beam_sessions_close_all(&f->node, "the test ends");
    beam_objects_destroy(&f->node);
    uv_close((uv_handle_t *)&f->node.reaper, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f);
    return 0;
}

/* A local call's submit frame body (no header) for obj to the test's actor;
 * the caller frees *buf. */
static const char *submit_body(const char *obj, char **buf, uint32_t *len)
{
    beam_enc_t e;
    size_t n;
    beam_enc_init(&e);
    beam_enc_request(&e, 0, "submit", 6);
    beam_pack_key(&e.pk, "actor");
    beam_pack_bin(&e.pk, actor, BEAM_ACTOR_ID_SIZE);
    beam_pack_key(&e.pk, "obj");
    beam_pack_bin(&e.pk, obj, BEAM_OBJECT_ID_SIZE);
    beam_pack_key(&e.pk, "method");
    beam_pack_str(&e.pk, "add");
    beam_pack_key(&e.pk, "args");
    beam_pack_bin(&e.pk, "", 0);
    beam_localresults_pack_ids(&e.pk, "objects", NULL, 0, BEAM_OBJECT_ID_SIZE);
    beam_localresults_pack_ids(&e.pk, "actors", NULL, 0, BEAM_ACTOR_ID_SIZE);
    assert_int_equal(beam_enc_end(&e, 0), 0);
    *buf = beam_enc_take(&e, &n);
    beam_enc_destroy(&e);
    assert_non_null(*buf);
    *len = (uint32_t)(n - BEAM_FRAME_HEADER);
    return *buf + BEAM_FRAME_HEADER;
}

/* A record as shortcut.c writes one: [kind, vconn, frame]. */
static void pack_record(msgpack_packer *pk, int kind, uint64_t vconn, const char *body, uint32_t len)
{
    msgpack_pack_array(pk, 3);
    msgpack_pack_uint8(pk, (uint8_t)kind);
    msgpack_pack_uint64(pk, vconn);
    beam_pack_bin(pk, body, len);
}

/* local_batch's msgs as the head reads them: sbuf holds what the caller
 * packed (an array), parsed into *msgs (freed with msgpack_unpacked_destroy). */
static const msgpack_object_array *parsed(msgpack_sbuffer *sb, msgpack_unpacked *u)
{
    msgpack_unpacked_init(u);
    assert_int_equal(msgpack_unpack_next(u, sb->data, sb->size, NULL), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(u->data.type, MSGPACK_OBJECT_ARRAY);
    return &u->data.via.array;
}

static int batch(fixture_t *f, msgpack_sbuffer *sb, char *err, size_t errlen)
{
    msgpack_unpacked u;
    int rc = beam_intake_batch(&f->node, link_of(f), parsed(sb, &u), err, errlen);
    msgpack_unpacked_destroy(&u);
    return rc;
}

static void test_records_in_order(void **st)
{
    fixture_t *f = *st;
    char *b1, *b2, err[200] = "";
    uint32_t l1, l2;
    const char *s1 = submit_body(obj1, &b1, &l1), *s2 = submit_body(obj2, &b2, &l2);
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 4);
    pack_record(&pk, BEAM_LOCAL_REC_SUBMIT, 5, s1, l1);
    pack_record(&pk, BEAM_LOCAL_REC_FRAME, 5, "done", 4);
    pack_record(&pk, BEAM_LOCAL_REC_SUBMIT, 9, s2, l2); /* (a client the head does not know) */
    pack_record(&pk, BEAM_LOCAL_REC_FRAME, 9, "lost", 4);
    assert_int_equal(batch(f, &sb, err, sizeof err), 0);
    /* the submit was recorded before the frame after it was dispatched */
    assert_int_equal(f->dispatched, 1);
    assert_string_equal(f->frame, "done");
    assert_true(f->obj_existed);
    /* the head knows no such actor: the call's object fails at once, held by its caller */
    beam_object_t *o = beam_object_find(&f->node, obj1);
    assert_non_null(o);
    assert_true(o->ready);
    assert_int_equal(o->status, BEAM_OBJ_ACTOR_DIED);
    assert_int_equal(o->holders, 1);
    assert_null(beam_object_find(&f->node, obj2));
    msgpack_sbuffer_destroy(&sb);
    free(b1);
    free(b2);
}

static void test_bad_records(void **st)
{
    fixture_t *f = *st;
    char *b1, err[200];
    uint32_t l1;
    const char *s1 = submit_body(obj1, &b1, &l1);
    for (int bad = 0; bad < 7; bad++) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 2);
        pack_record(&pk, BEAM_LOCAL_REC_SUBMIT, 5, s1, l1);
        switch (bad) {
        case 0: /* not an array */
            msgpack_pack_uint8(&pk, 1);
            break;
        case 1: /* two fields */
            msgpack_pack_array(&pk, 2);
            msgpack_pack_uint8(&pk, 0);
            msgpack_pack_uint8(&pk, 5);
            break;
        case 2: /* an unknown kind */
            pack_record(&pk, 3, 5, "x", 1);
            break;
        case 3: /* vconn 0 */
            pack_record(&pk, BEAM_LOCAL_REC_FRAME, 0, "x", 1);
            break;
        case 4: /* vconn past 32 bits */
            pack_record(&pk, BEAM_LOCAL_REC_FRAME, (uint64_t)UINT32_MAX + 1, "x", 1);
            break;
        case 5: /* a frame that is a str */
            msgpack_pack_array(&pk, 3);
            msgpack_pack_uint8(&pk, 0);
            msgpack_pack_uint8(&pk, 5);
            beam_pack_str(&pk, "x");
            break;
        default: /* a negative kind */
            msgpack_pack_array(&pk, 3);
            msgpack_pack_int8(&pk, -1);
            msgpack_pack_uint8(&pk, 5);
            beam_pack_bin(&pk, "x", 1);
            break;
        }
        err[0] = '\0';
        assert_int_equal(batch(f, &sb, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "'msgs'"));
        /* the record before the bad one was handled; a frame was never dispatched */
        assert_non_null(beam_object_find(&f->node, obj1));
        assert_int_equal(f->dispatched, 0);
        /* (the next round's submit reuses obj1: let it go) */
        assert_int_equal(beam_port_unhold(&f->client->port.held_objects, obj1, BEAM_OBJECT_ID_SIZE), 1);
        beam_object_unhold(&f->node, beam_object_find(&f->node, obj1));
        assert_null(beam_object_find(&f->node, obj1));
        msgpack_sbuffer_destroy(&sb);
    }
    free(b1);
}

/* A port's sends recorded (the stand-in link is never written to). */
static int sent;
static char sent_text[512];

static int rec_send(beam_port_t *p, char *buf, size_t len)
{
    (void)p;
    size_t n = len < sizeof sent_text - 1 ? len : sizeof sent_text - 1;
    memcpy(sent_text, buf, n);
    for (size_t i = 0; i < n; i++)
        if (!sent_text[i])
            sent_text[i] = ' '; /* (the frame is searched as text) */
    sent_text[n] = '\0';
    sent++;
    free(buf);
    return 0;
}

static int rec_closing(const beam_port_t *p)
{
    (void)p;
    return 0;
}

static const beam_port_ops_t rec_ops = {.send = rec_send, .closing = rec_closing};

/* A record's submit is checked as a client's is: an object id the client
 * did not make (its creator part is not its member's index and its
 * connection) is refused, nothing made; its own is taken. */
static void test_another_clients_id_refused(void **st)
{
    fixture_t *f = *st;
    const beam_port_ops_t *ops = f->client->port.ops;
    f->client->port.ops = &rec_ops;
    char theirs[BEAM_OBJECT_ID_SIZE], *b1, *b2, err[200] = "";
    uint32_t l1, l2;
    memcpy(theirs, obj1, sizeof theirs);
    beam_put_u32be(theirs + 4, f->client->port.id + 1); /* another connection on the same member */
    const char *s1 = submit_body(theirs, &b1, &l1), *s2 = submit_body(obj1, &b2, &l2);
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 1);
    pack_record(&pk, BEAM_LOCAL_REC_SUBMIT, 5, s1, l1);
    assert_int_equal(batch(f, &sb, err, sizeof err), 0);
    assert_null(beam_object_find(&f->node, theirs));
    assert_int_equal(sent, 1);
    assert_non_null(strstr(sent_text, "bad_request"));
    assert_non_null(strstr(sent_text, "'obj'"));
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_array(&pk, 1);
    pack_record(&pk, BEAM_LOCAL_REC_SUBMIT, 5, s2, l2);
    assert_int_equal(batch(f, &sb, err, sizeof err), 0);
    assert_non_null(beam_object_find(&f->node, obj1));
    msgpack_sbuffer_destroy(&sb);
    free(b1);
    free(b2);
    f->client->port.ops = ops;
}

/* Each record is read by its field table: a malformed one is refused with
 * an error naming the record, its field and what is wrong; the records
 * before it were handled, none after it. */
static void test_malformed_record_is_named(void **st)
{
    fixture_t *f = *st;
    static const struct {
        const char *err;
    } cases[] = {
        {"(record 1's 'kind' must be 0 (a frame), 1 (a submit) or 2 (a board))"},
        {"(record 1's 'kind' must be 0 (a frame), 1 (a submit) or 2 (a board))"},
        {"(record 1's 'kind' must be an int)"},
        {"(record 1's 'vconn' is out of range (1..4294967295))"},
        {"(record 1's 'vconn' is out of range (1..4294967295))"},
        {"(record 1's 'vconn' must be an int)"},
        {"(record 1's 'frame' must be a bin)"},
        {"(record 1's 'frame' is required)"},
        {"(record 1 must be an array of 3 elements: [kind, vconn, frame])"},
        {"(record 1 must be an array of 3 elements: [kind, vconn, frame])"},
        {"(record 1 must be an array of 3 elements: [kind, vconn, frame])"},
    };
    for (size_t bad = 0; bad < sizeof cases / sizeof cases[0]; bad++) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        char err[200] = "";
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 3);
        pack_record(&pk, BEAM_LOCAL_REC_FRAME, 5, "one", 3);
        switch (bad) {
        case 0: pack_record(&pk, 3, 5, "x", 1); break;
        case 1:
            msgpack_pack_array(&pk, 3);
            msgpack_pack_int8(&pk, -1);
            msgpack_pack_uint8(&pk, 5);
            beam_pack_bin(&pk, "x", 1);
            break;
        case 2: /* a kind that is a str */
            msgpack_pack_array(&pk, 3);
            beam_pack_str(&pk, "0");
            msgpack_pack_uint8(&pk, 5);
            beam_pack_bin(&pk, "x", 1);
            break;
        case 3: pack_record(&pk, BEAM_LOCAL_REC_FRAME, 0, "x", 1); break;
        case 4: pack_record(&pk, BEAM_LOCAL_REC_FRAME, (uint64_t)UINT32_MAX + 1, "x", 1); break;
        case 5: /* a vconn that is a float */
            msgpack_pack_array(&pk, 3);
            msgpack_pack_uint8(&pk, 0);
            msgpack_pack_double(&pk, 5.0);
            beam_pack_bin(&pk, "x", 1);
            break;
        case 6:
            msgpack_pack_array(&pk, 3);
            msgpack_pack_uint8(&pk, 0);
            msgpack_pack_uint8(&pk, 5);
            beam_pack_str(&pk, "x");
            break;
        case 7: /* a nil frame */
            msgpack_pack_array(&pk, 3);
            msgpack_pack_uint8(&pk, 0);
            msgpack_pack_uint8(&pk, 5);
            msgpack_pack_nil(&pk);
            break;
        case 8: /* not an array */
            beam_pack_bin(&pk, "x", 1);
            break;
        case 9: /* four fields */
            msgpack_pack_array(&pk, 4);
            msgpack_pack_uint8(&pk, 0);
            msgpack_pack_uint8(&pk, 5);
            beam_pack_bin(&pk, "x", 1);
            msgpack_pack_uint8(&pk, 0);
            break;
        default: /* an empty record */
            msgpack_pack_array(&pk, 0);
            break;
        }
        pack_record(&pk, BEAM_LOCAL_REC_FRAME, 5, "three", 5);
        f->dispatched = 0;
        assert_int_equal(batch(f, &sb, err, sizeof err), -EINVAL);
        if (!strstr(err, cases[bad].err))
            fail_msg("case %zu: the error is \"%s\"", bad, err);
        assert_non_null(strstr(err, "a local_batch with a bad 'msgs'"));
        /* the record before it was handled, the one after it was not */
        assert_int_equal(f->dispatched, 1);
        assert_string_equal(f->frame, "one");
        msgpack_sbuffer_destroy(&sb);
    }
}

/* A submit record whose submit misses a field its table requires: the
 * client is answered bad_request naming the field, nothing is made, and
 * the batch goes on (the member's link is not at fault for its client's
 * frame). */
static void test_submit_checked_by_its_table(void **st)
{
    fixture_t *f = *st;
    const beam_port_ops_t *ops = f->client->port.ops;
    f->client->port.ops = &rec_ops;
    sent = 0;
    beam_enc_t e;
    size_t n;
    beam_enc_init(&e);
    beam_enc_request(&e, 4, "submit", 3); /* no method */
    beam_pack_key(&e.pk, "actor");
    beam_pack_bin(&e.pk, actor, BEAM_ACTOR_ID_SIZE);
    beam_pack_key(&e.pk, "obj");
    beam_pack_bin(&e.pk, obj1, BEAM_OBJECT_ID_SIZE);
    beam_pack_key(&e.pk, "args");
    beam_pack_bin(&e.pk, "", 0);
    assert_int_equal(beam_enc_end(&e, 0), 0);
    char *frame = beam_enc_take(&e, &n);
    beam_enc_destroy(&e);
    assert_non_null(frame);
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char err[200] = "";
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    pack_record(&pk, BEAM_LOCAL_REC_SUBMIT, 5, frame + BEAM_FRAME_HEADER, (uint32_t)(n - BEAM_FRAME_HEADER));
    pack_record(&pk, BEAM_LOCAL_REC_FRAME, 5, "after", 5);
    assert_int_equal(batch(f, &sb, err, sizeof err), 0);
    assert_int_equal(sent, 1);
    assert_non_null(strstr(sent_text, "bad_request"));
    assert_non_null(strstr(sent_text, "field 'method' is required"));
    assert_null(beam_object_find(&f->node, obj1));
    assert_int_equal(f->dispatched, 1);
    assert_string_equal(f->frame, "after");
    msgpack_sbuffer_destroy(&sb);
    free(frame);
    f->client->port.ops = ops;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_records_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_another_clients_id_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_record_is_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_submit_checked_by_its_table, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
