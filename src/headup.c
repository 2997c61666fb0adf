/* headup.c — on the head, a member's client frames and the records of its
 * local calls (headup.h). */
#include "headup.h"

#include <errno.h>
#include <stdio.h>

#include "actors.h"
#include "cluster.h"
#include "local.h"
#include "objects.h"
#include "session.h"

void beam_headup_frame(beam_node_t *node, beam_link_t *l, uint32_t vconn, const char *body, uint32_t len)
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
 * actor's worker there: checked, and recorded as sent (the head never needs
 * its args, which the member leaves out). */
static void local_submit(beam_node_t *node, beam_session_t *c, const char *body, uint32_t len)
{
    beam_msg_t msg;
    char err[200] = "a local call must be a submit after hello";
    const char *actor, *obj;
    beam_refs_t refs = {0};
    if (beam_msg_parse(body, len, &node->limits, &msg, err, sizeof err) < 0) {
        beam_port_reply_error(&c->port, 0, "bad_request", "protocol error: %s", err);
        return;
    }
    if (msg.type != BEAM_MSG_REQUEST || !beam_str_eq(msg.op, msg.op_len, "submit") ||
        c->port.role == BEAM_ROLE_NONE || beam_field_id(&msg.params, "actor", BEAM_ACTOR_ID_SIZE, &actor) != 0 ||
        beam_field_id(&msg.params, "obj", BEAM_OBJECT_ID_SIZE, &obj) != 0 ||
        beam_refs_parse(&msg.params, &refs, err, sizeof err) < 0) {
        beam_port_reply_error(&c->port, msg.msgid, "bad_request", "%s", err);
        goto cleanup;
    }
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

int beam_headup_batch(beam_node_t *node, beam_link_t *l, const msgpack_object_array *msgs, char *err,
                      size_t errlen)
{
    for (uint32_t i = 0; i < msgs->size; i++) {
        const msgpack_object *e = &msgs->ptr[i];
        const msgpack_object *f = e->type == MSGPACK_OBJECT_ARRAY && e->via.array.size == 3 ? e->via.array.ptr : NULL;
        if (!f || f[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER || f[0].via.u64 > BEAM_LOCAL_REC_SUBMIT ||
            f[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER || f[1].via.u64 == 0 || f[1].via.u64 > UINT32_MAX ||
            f[2].type != MSGPACK_OBJECT_BIN) {
            snprintf(err, errlen, "a local_batch with a bad 'msgs' (it must be an array of [kind 0 or 1, vconn, "
                                  "frame bin])");
            return -EINVAL;
        }
        uint32_t vconn = (uint32_t)f[1].via.u64;
        const char *body = f[2].via.bin.ptr;
        uint32_t len = f[2].via.bin.size;
        beam_session_t *c;
        if (f[0].via.u64 == BEAM_LOCAL_REC_FRAME)
            beam_headup_frame(node, l, vconn, body, len);
        else if ((c = beam_session_find_remote(node, l, vconn)) && !beam_port_closing(&c->port))
            local_submit(node, c, body, len);
    }
    return 0;
}
