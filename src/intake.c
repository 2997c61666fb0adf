/* intake.c — on the head, a member's client frames and the records of its
 * local calls (intake.h). */
#include "intake.h"

#include <errno.h>
#include <stdio.h>

#include "actors.h"
#include "boards.h"
#include "cluster.h"
#include "fieldspec.h"
#include "shortcut.h"
#include "objects.h"
#include "session.h"

void beam_intake_frame(beam_node_t *node, beam_link_t *l, uint32_t vconn, const char *body, uint32_t len)
{
    beam_session_t *c = beam_session_find_remote(node, l, vconn);
    if (!c)
        return; /* closed meanwhile */
    if (len > node->limits.max_frame) {
        /* the member's limit let it through; the head's does not */
        beam_port_reply_error(&c->port, 0, "too_large", "protocol error: frame length %u is over the head's limit of %u",
                              len, node->limits.max_frame);
        beam_session_close(c, "a frame over the head's limit");
        return;
    }
    if (node->hooks.dispatch)
        node->hooks.dispatch(&c->port, body, len, NULL);
}

/* A submit (body) of remote client c that its member already wrote to the
 * actor's worker there: checked by submit's own field table (the one the
 * head's op_submit and the member's local calls read it by), and recorded
 * as sent (the head never needs its args, which the member leaves out). */
static void local_submit(beam_node_t *node, beam_session_t *c, const char *body, uint32_t len)
{
    beam_msg_t msg;
    char err[200];
    beam_field_val_t v[BEAM_SUBMIT_NFIELDS];
    const char *field, *what;
    beam_refs_t refs = {0};
    if (beam_msg_parse(body, len, &node->limits, &msg, err, sizeof err) < 0) {
        beam_port_reply_error(&c->port, 0, "bad_request", "protocol error: %s", err);
        return;
    }
    if (msg.type != BEAM_MSG_REQUEST || !beam_str_eq(msg.op, msg.op_len, "submit") ||
        c->port.role == BEAM_ROLE_NONE) {
        beam_port_reply_error(&c->port, msg.msgid, "bad_request", "a local call must be a submit after hello");
        goto cleanup;
    }
    if (beam_fields_check(&msg.params, beam_submit_fields, BEAM_SUBMIT_NFIELDS, v, &field, &what, err,
                          sizeof err) < 0) {
        beam_port_reply_error(&c->port, msg.msgid, "bad_request", "field '%s' %s", field, what);
        goto cleanup;
    }
    if (beam_refs_parse(&msg.params, &refs, err, sizeof err) < 0) {
        beam_port_reply_error(&c->port, msg.msgid, "bad_request", "%s", err);
        goto cleanup;
    }
    const char *actor = v[BEAM_SUBMIT_ACTOR].s, *obj = v[BEAM_SUBMIT_OBJ].s;
    if (!beam_id_made_by(obj, c->port.member->index, c->port.id)) { /* (its member checked it too) */
        beam_port_reply_error(&c->port, msg.msgid, "bad_request",
                              "field 'obj' must be an object id this client made (" BEAM_ID_NOT_OWN ")");
        goto cleanup;
    }
    beam_object_t *o = beam_object_create(node, obj);
    beam_actor_t *a = beam_actor_find(node, actor);
    if (!o) {
        beam_port_reply_error(&c->port, msg.msgid, "exists", "object id is already in use");
        goto cleanup;
    }
    if (beam_port_hold(&c->port.held_objects, obj, BEAM_OBJECT_ID_SIZE) == 1)
        beam_object_hold(node, o);
    if (a)
        beam_actor_submit_sent(node, a, c->port.member, obj, &refs);
    else
        beam_object_fail(node, o, BEAM_OBJ_ACTOR_DIED,
                         "The actor died unexpectedly before finishing this task: beamd knows no such actor "
                         "(it ended and was forgotten, or never existed).");
    beam_port_reply_empty(&c->port, msg.msgid);
cleanup:
    beam_refs_free(&refs);
    beam_msg_destroy(&msg);
}

/* A record of local_batch: [kind, vconn, frame] (localbatch.h writes them). */
enum { REC_KIND, REC_VCONN, REC_FRAME, REC_NFIELDS };
static const beam_field_spec_t record_fields[REC_NFIELDS] = {
    [REC_KIND] = BEAM_FIELD("kind", BEAM_F_INT, BEAM_F_REQUIRED, .min = BEAM_LOCAL_REC_FRAME,
                            .max = BEAM_LOCAL_REC_BOARD, .bound = "must be 0 (a frame), 1 (a submit) or 2 (a board)"),
    [REC_VCONN] = BEAM_FIELD("vconn", BEAM_F_INT, BEAM_F_REQUIRED, .min = 1, .max = UINT32_MAX,
                             .bound = "is out of range (1..4294967295)"),
    [REC_FRAME] = BEAM_FIELD("frame", BEAM_F_BIN, BEAM_F_REQUIRED),
};

/* A board record of remote client c, a worker: its direct calls as its
 * member read them; the calls started since the last one are local calls
 * too (the member ran them). One of another length is ignored. */
static void local_board(beam_node_t *node, beam_session_t *c, const char *frame, uint32_t len)
{
    if (len != BEAM_BOARD_COUNTS_BYTES || !c->port.actor)
        return;
    beam_board_counts_t now = beam_boards_unpack_counts(frame);
    node->local_calls += beam_boards_report(node, &c->port, beam_actor_id(c->port.actor), now);
}

int beam_intake_batch(beam_node_t *node, beam_link_t *l, const msgpack_object_array *msgs, char *err,
                      size_t errlen)
{
    beam_field_val_t v[REC_NFIELDS];
    const char *field, *what;
    char buf[64];
    for (uint32_t i = 0; i < msgs->size; i++) {
        if (beam_fields_check_tuple(&msgs->ptr[i], record_fields, REC_NFIELDS, v, &field, &what, buf,
                                    sizeof buf) < 0) {
            if (field)
                snprintf(err, errlen, "a local_batch with a bad 'msgs' (record %u's '%s' %s)", i, field, what);
            else
                snprintf(err, errlen, "a local_batch with a bad 'msgs' (record %u %s: [kind, vconn, frame])", i,
                         what);
            return -EINVAL;
        }
        uint32_t vconn = (uint32_t)v[REC_VCONN].i;
        beam_session_t *c;
        if (v[REC_KIND].i == BEAM_LOCAL_REC_FRAME)
            beam_intake_frame(node, l, vconn, v[REC_FRAME].s, v[REC_FRAME].len);
        else if (!(c = beam_session_find_remote(node, l, vconn)) || beam_port_closing(&c->port))
            continue;
        else if (v[REC_KIND].i == BEAM_LOCAL_REC_SUBMIT)
            local_submit(node, c, v[REC_FRAME].s, v[REC_FRAME].len);
        else
            local_board(node, c, v[REC_FRAME].s, v[REC_FRAME].len);
    }
    return 0;
}
