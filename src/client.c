/* client.c — blocking socket I/O for beamctl and _beam. */
#define _GNU_SOURCE
#include "client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* The peer's uid, when it is one this process may trust: its own, or
 * root's (root can read any process's memory anyway). 0, or -EPERM. */
static int check_peer(int fd, unsigned *peer_uid)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return -errno;
    if (peer_uid)
        *peer_uid = (unsigned)cred.uid;
    return cred.uid == getuid() || cred.uid == 0 ? 0 : -EPERM;
}

int beam_client_connect(const char *path, unsigned *peer_uid)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return -ENAMETOOLONG;
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    while (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        if (errno == EINTR)
            continue;
        int err = errno;
        close(fd);
        return -err;
    }
    int rc = check_peer(fd, peer_uid);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int beam_client_write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

int beam_client_read_frame(int fd, beam_decoder_t *dec, const char **frame, size_t *len)
{
    char buf[65536];
    for (;;) {
        int rc = beam_decoder_next(dec, frame, len);
        if (rc == 1)
            return 1;
        if (rc < 0)
            return -EPROTO;
        ssize_t n = read(fd, buf, sizeof buf);
        if (n == 0)
            return 0;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (beam_decoder_feed(dec, buf, (size_t)n) < 0)
            return -ENOMEM;
    }
}

void beam_client_socket_path(char *buf, size_t n)
{
    const char *env = getenv("BEAM_SOCKET");
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        return;
    }
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    if (xdg && *xdg && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid())
        snprintf(buf, n, "%s/beam/beamd.sock", xdg);
    else
        snprintf(buf, n, "/tmp/beam-%u/beamd.sock", (unsigned)getuid());
}
