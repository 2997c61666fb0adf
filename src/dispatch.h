/* dispatch.h — the op table: checks each request's fields and routes it to
 * the module that owns it. Routing by an id's home node lives here. */
#ifndef BEAM_DISPATCH_H
#define BEAM_DISPATCH_H

#include <stddef.h>

struct beam_port_s;
struct beam_buf_s;

/* Handles one frame from conn: the one entry of every client's requests
 * (node->hooks.dispatch, wired in hooks.c). A frame that is not a valid
 * message gets an `error` push and closes the connection; a bad request
 * gets an error reply. buf: the buffer of its own the frame came in (frame
 * lies in it), or NULL: a payload that is most of the frame is then kept by
 * reference to buf rather than copied. buf stays the caller's. */
void beam_dispatch(struct beam_port_s *conn, const char *frame, size_t len, struct beam_buf_s *buf);

#endif
