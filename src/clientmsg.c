/* clientmsg.c — the link messages about a relayed client (clientmsg.h). */
#include "clientmsg.h"

#include <errno.h>
#include <stdlib.h>

/* [2, op, {vconn, frame?, pid?, uid?}] (a frame when body is set, pid and
 * uid when pid >= 0) sent over l; none without l. */
static int send_client_msg(beam_link_t *l, const char *op, uint32_t vconn, const char *body, size_t len, long pid,
                           unsigned uid)
{
    if (!l)
        return -EPIPE;
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, op, 1 + (body != NULL) + 2 * (pid >= 0));
    beam_pack_key(&enc.pk, "vconn");
    msgpack_pack_uint32(&enc.pk, vconn);
    if (body) {
        beam_pack_key(&enc.pk, "frame");
        beam_pack_bin(&enc.pk, body, len);
    }
    if (pid >= 0) {
        beam_pack_key(&enc.pk, "pid");
        msgpack_pack_int64(&enc.pk, pid);
        beam_pack_key(&enc.pk, "uid");
        msgpack_pack_uint32(&enc.pk, uid);
    }
    beam_enc_end(&enc, 0);
    return beam_link_send_enc(l, &enc);
}

int beam_clientmsg_frame(beam_link_t *l, uint32_t vconn, char *frame, size_t len)
{
    int rc = -EINVAL;
    if (len >= BEAM_FRAME_HEADER)
        rc = send_client_msg(l, "client_frame", vconn, frame + BEAM_FRAME_HEADER, len - BEAM_FRAME_HEADER, -1, 0);
    free(frame);
    return rc;
}

void beam_clientmsg_close(beam_link_t *l, uint32_t vconn)
{
    send_client_msg(l, "close_client", vconn, NULL, 0, -1, 0);
}

void beam_clientmsg_forward(beam_node_t *node, uint32_t vconn, const char *body, size_t len)
{
    send_client_msg(beam_link_up(node), "client_frame", vconn, body ? body : "", len, -1, 0);
}

void beam_clientmsg_open(beam_node_t *node, uint32_t vconn, long pid, unsigned uid)
{
    send_client_msg(beam_link_up(node), "client_open", vconn, NULL, 0, pid < 0 ? 0 : pid, uid);
}

void beam_clientmsg_closed(beam_node_t *node, uint32_t vconn)
{
    send_client_msg(beam_link_up(node), "client_closed", vconn, NULL, 0, -1, 0);
}
