/* test_client.c — the blocking client's connect (src/client.h): a daemon
 * of this process's own uid is accepted, one of another uid is refused with
 * -EPERM and its uid (the peer check), a missing socket is its errno. The
 * other uid is played by a forked child that drops to uid 64123 (root only;
 * skipped otherwise). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"

#define OTHER_UID 64123

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/beam-client-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    return chmod(dir, 01777); /* sticky, as /tmp: the other uid binds in it too */
}

static int remove_dir(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/d.sock", dir);
    unlink(path);
    return rmdir(dir);
}

/* A listening unix socket at path (the fd). */
static int listen_at(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 4) != 0)
        return -1;
    return fd;
}

static void test_own_daemon_is_accepted(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/d.sock", dir);
    int lfd = listen_at(path);
    assert_true(lfd >= 0);
    unsigned peer = UINT_MAX;
    int fd = beam_client_connect(path, &peer);
    assert_true(fd >= 0);
    assert_int_equal(peer, getuid());
    close(fd);
    close(lfd);
}

static void test_missing_socket_is_its_errno(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/none.sock", dir);
    assert_int_equal(beam_client_connect(path, NULL), -ENOENT);
}

static void test_another_uid_is_refused(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    char path[128];
    snprintf(path, sizeof path, "%s/d.sock", dir);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(ready[0]);
        if (setgroups(0, NULL) != 0 || setgid(OTHER_UID) != 0 || setuid(OTHER_UID) != 0)
            _exit(1);
        int lfd = listen_at(path);
        if (lfd < 0 || write(ready[1], "r", 1) != 1)
            _exit(2);
        pause(); /* until the test kills it */
        _exit(0);
    }
    close(ready[1]);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    unsigned peer = UINT_MAX;
    int fd = beam_client_connect(path, &peer);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    assert_int_equal(fd, -EPERM);
    assert_int_equal(peer, OTHER_UID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_own_daemon_is_accepted, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_missing_socket_is_its_errno, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_another_uid_is_refused, make_dir, remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
