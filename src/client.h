/* client.h — the blocking side of the protocol for programs that are not
 * beamd: connect to a socket, write whole buffers, read one whole frame. */
#ifndef BEAM_CLIENT_H
#define BEAM_CLIENT_H

#include <stddef.h>

#include "beam/codec.h"

/* Connects to the unix socket at path and checks who serves it: the peer's
 * SO_PEERCRED uid must be this process's own or root's, since a client
 * unpickles what its daemon sends. Returns the fd or a negative errno:
 * -EPERM for a peer of another uid, which *peer_uid (when not NULL) is set to. */
int beam_client_connect(const char *path, unsigned *peer_uid);
/* Writes all of buf, retrying on EINTR and short writes. 0 or a negative errno. */
int beam_client_write_all(int fd, const char *buf, size_t len);
/* Reads frames into dec until one is whole; sets frame and len (valid until
 * the next call on dec). Returns 1, 0 on EOF, or a negative errno
 * (-EPROTO when the frame header is bad). */
int beam_client_read_frame(int fd, beam_decoder_t *dec, const char **frame, size_t *len);
/* Where a client looks for its daemon: $BEAM_SOCKET, else the per-user default. */
void beam_client_socket_path(char *buf, size_t n);

#endif
