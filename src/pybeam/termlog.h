/* termlog.h — writing what beamd relays for the terminal: a worker's log
 * line to fd 1 or 2 as the worker wrote it, a daemon error to fd 2. Each
 * line goes out in one writev, so lines from several threads do not mix.
 * No GIL needed; nothing is kept. */
#ifndef PYBEAM_TERMLOG_H
#define PYBEAM_TERMLOG_H

#include "beam/codec.h"

/* A `log` push ({stream, text}): text and a newline to fd 1 (stream 1) or
 * 2 (anything else). A push without text is ignored. */
void pb_termlog_line(const beam_msg_t *msg);

/* An `error` push ({message}): "beam: beamd reported: <message>" to fd 2. */
void pb_termlog_error(const beam_msg_t *msg);

#endif
