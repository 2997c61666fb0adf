/* notify.c — sd_notify through libsystemd where it was found at build time,
 * else the same datagram written by hand. */
#include "notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#ifdef BEAM_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>

static int notify(const char *state)
{
    return sd_notify(0, state);
}
#else
static int notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 0;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n >= sizeof addr.sun_path)
        return -ENAMETOOLONG;
    memcpy(addr.sun_path, path, n);
    if (addr.sun_path[0] == '@')
        addr.sun_path[0] = '\0'; /* abstract namespace */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    ssize_t rc = sendto(fd, state, strlen(state), 0, (struct sockaddr *)&addr,
                        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n));
    int err = errno;
    close(fd);
    return rc < 0 ? -err : 1;
}
#endif

int beam_notify_ready(const char *status)
{
    char msg[512];
    snprintf(msg, sizeof msg, "READY=1\nSTATUS=%s\nMAINPID=%ld", status, (long)getpid());
    return notify(msg);
}

int beam_notify_stopping(void)
{
    return notify("STOPPING=1");
}
