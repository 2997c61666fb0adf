/* clientmsg.h — the link messages about a relayed client (docs/PROTOCOL.md,
 * "The cluster link"): client_open, client_frame and client_closed from a
 * member, client_frame and close_client from the head. They are relay's
 * vocabulary, encoded here once for the sessions that send them (session.c:
 * a member's relayed clients, the head's remote ones), relay.c and localresults.c;
 * the link (link.h) carries them as it carries any message, knowing none.
 * A message for a link that is gone, or not up, is dropped. */
#ifndef BEAM_CLIENTMSG_H
#define BEAM_CLIENTMSG_H

#include <stddef.h>
#include <stdint.h>

#include "link.h"
#include "node.h"

/* head: a frame (header and body, malloc'd, taken) for remote client vconn:
 * 0, or a negative errno (beam_link_send_enc's; -EINVAL: not a frame). */
int beam_clientmsg_frame(beam_link_t *link, uint32_t vconn, char *frame, size_t len);
/* head: tell the member to close its client vconn */
void beam_clientmsg_close(beam_link_t *link, uint32_t vconn);
/* member: a frame body from local client vconn, for the head (body NULL: empty) */
void beam_clientmsg_forward(beam_node_t *node, uint32_t vconn, const char *body, size_t len);
/* member: a local client came (its peer credentials) or went */
void beam_clientmsg_open(beam_node_t *node, uint32_t vconn, long pid, unsigned uid);
void beam_clientmsg_closed(beam_node_t *node, uint32_t vconn);

#endif
