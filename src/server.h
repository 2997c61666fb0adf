/* server.h — the listening unix socket: where it lives, its folder and mode,
 * and handing accepted connections to conn. */
#ifndef BEAM_SERVER_H
#define BEAM_SERVER_H

#include <stddef.h>
#include <uv.h>

#include "node.h"

typedef struct beam_server_s {
    uv_pipe_t pipe;
    beam_node_t *node;
    char path[108];
    int lock_fd; /* holds the exclusive flock on path + ".lock" */
    int listening;
} beam_server_t;

/* Makes the socket's folder (0700) if missing, locks path + ".lock" (flock,
 * held until beam_server_close or exit: a second daemon on the same path
 * fails here), refuses a path where a daemon already answers, replaces a
 * stale socket, binds with mode 0600, listens.
 * Returns 0 or -1 with a message in err. */
int beam_server_listen(beam_server_t *s, beam_node_t *node, const char *path, char *err, size_t errlen);
/* Stops listening and removes the socket file. */
void beam_server_close(beam_server_t *s);

#endif
