/* server.c — the unix socket beamd listens on. */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn.h"
#include "log.h"

/* Makes the socket's parent folder private if it has to create it; an
 * existing folder must belong to us (or root) and not be writable by
 * others without the sticky bit. */
static int prepare_folder(const char *path, char *err, size_t errlen)
{
    char dir[108];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (mkdir(dir, 0700) == 0)
            return 0;
        /* a daemon started at the same time made it first: check it as any */
        if (errno != EEXIST || stat(dir, &st) != 0) {
            snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
            return -1;
        }
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s is not a folder", dir);
        return -1;
    }
    if (st.st_uid != getuid() && st.st_uid != 0) {
        snprintf(err, errlen, "%s belongs to uid %u, not to this daemon's user or root: "
                 "refusing to put the socket there", dir, (unsigned)st.st_uid);
        return -1;
    }
    if ((st.st_mode & 0002) && !(st.st_mode & S_ISVTX)) {
        snprintf(err, errlen, "%s is writable by anyone: refusing to put the socket there", dir);
        return -1;
    }
    return 0;
}

/* Takes the lock that makes one daemon the socket's: an exclusive flock on
 * PATH.lock, held for the daemon's life (the kernel drops it however the
 * daemon ends). Checking, unlinking and binding the path happen under it, so
 * two daemons started at once cannot both bind. The file is never removed:
 * removing it would let a third daemon lock a new file while the second
 * holds the old one. */
static int take_lock(beam_server_t *s, char *err, size_t errlen)
{
    char lock[sizeof s->path + 8];
    snprintf(lock, sizeof lock, "%s.lock", s->path);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open the lock file %s: %s", lock, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            snprintf(err, errlen, "a beamd already serves %s (or is starting there): it holds %s", s->path, lock);
        else
            snprintf(err, errlen, "cannot lock %s: %s", lock, strerror(e));
        return -1;
    }
    s->lock_fd = fd;
    return 0;
}

static void drop_lock(beam_server_t *s)
{
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    s->lock_fd = -1;
}

/* 1 if a daemon answers at path, 0 if not. */
static int someone_listens(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    int rc = connect(fd, (struct sockaddr *)&addr, sizeof addr);
    close(fd);
    return rc == 0;
}

static void on_connection(uv_stream_t *server, int status)
{
    beam_server_t *s = server->data;
    if (status < 0) {
        beam_log(BEAM_LOG_WARN, "accept failed: %s", uv_strerror(status));
        return;
    }
    beam_conn_accept(s->node, server);
}

int beam_server_listen(beam_server_t *s, beam_node_t *node, const char *path, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->node = node;
    s->lock_fd = -1;
    if (strlen(path) >= sizeof s->path) {
        snprintf(err, errlen, "socket path is too long (at most %zu bytes)", sizeof s->path - 1);
        return -1;
    }
    snprintf(s->path, sizeof s->path, "%s", path);
    if (prepare_folder(path, err, errlen) < 0 || take_lock(s, err, errlen) < 0)
        return -1;
    if (someone_listens(path)) {
        /* a daemon that holds no lock (an older beamd) */
        snprintf(err, errlen, "a beamd already answers at %s", path);
        drop_lock(s);
        return -1;
    }
    unlink(path); /* a stale socket from a daemon that died */
    uv_pipe_init(node->loop, &s->pipe, 0);
    s->pipe.data = s;
    mode_t old = umask(0177); /* the socket is born 0600 */
    int rc = uv_pipe_bind(&s->pipe, path);
    umask(old);
    if (rc == 0)
        rc = chmod(path, 0600) == 0 ? 0 : -errno;
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->pipe, 511, on_connection);
    if (rc < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", path, uv_strerror(rc));
        uv_close((uv_handle_t *)&s->pipe, NULL);
        drop_lock(s);
        return -1;
    }
    s->listening = 1;
    return 0;
}

void beam_server_close(beam_server_t *s)
{
    if (!s->listening)
        return;
    s->listening = 0;
    uv_close((uv_handle_t *)&s->pipe, NULL);
    unlink(s->path);
    drop_lock(s); /* after the unlink: the next daemon finds the path free */
}
