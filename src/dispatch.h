/* dispatch.h — the op table: checks each request's fields and routes it to
 * the module that owns it. Routing by an id's home node lives here. */
#ifndef BEAM_DISPATCH_H
#define BEAM_DISPATCH_H

#include <stddef.h>

struct beam_port_s;

/* Handles one frame from a client (node->hooks.dispatch). A frame that is
 * not a valid message gets an `error` push and closes the client; a bad
 * request gets an error reply. A closing client's frames are dropped. */
void beam_dispatch(struct beam_port_s *conn, const char *frame, size_t len);

#endif
