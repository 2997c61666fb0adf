/* intake.h — on the head, what a member sends up for its clients (layer 5,
 * called by the head's switch in relay.c): each `client_frame` into the op
 * table (node->hooks.dispatch) on that client's remote session, and the
 * records of a `local_batch`, the member's local calls (docs/DESIGN.md,
 * "Calls that stay on a member"): a local call's submit, checked and
 * recorded as sent (src/actor/localcalls.c) without being sent again, and a local
 * call's result, its worker's frame (each record [kind, vconn, frame], the
 * kinds shortcut.h's). Records are handled in the order the member made them,
 * as if each had come alone. */
#ifndef BEAM_INTAKE_H
#define BEAM_INTAKE_H

#include <stddef.h>
#include <stdint.h>

#include "beam/codec.h"
#include "link.h"
#include "node.h"

/* The frame body (len bytes) of remote client vconn on member link l, into
 * dispatch (nothing if the client is gone; a frame over the head's limit
 * closes that client). */
void beam_intake_frame(beam_node_t *node, beam_link_t *l, uint32_t vconn, const char *body, uint32_t len);

/* local_batch's msgs from member link l, each record in order, each read
 * by its field table ([kind, vconn, frame]: an int 0 or 1, an int
 * 1..UINT32_MAX, a bin) before it is handled: 0, or -EINVAL with what is
 * wrong in err, naming the record and its field (the records before it
 * were handled, none after it; the caller closes the link). */
int beam_intake_batch(beam_node_t *node, beam_link_t *l, const msgpack_object_array *msgs, char *err,
                      size_t errlen);

#endif
