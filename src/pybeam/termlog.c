/* termlog.c — log and error pushes written to the terminal. */
#include <errno.h>
#include <stdio.h>
#include <sys/uio.h>
#include <unistd.h>

#include "iov.h"
#include "termlog.h"

/* Writes both parts whole, retrying on EINTR and short writes; gives up
 * quietly when the fd is gone (the terminal closed). */
static void termlog_write(int fd, const char *a, size_t alen, const char *b, size_t blen)
{
    struct iovec iov[2] = {{(void *)a, alen}, {(void *)b, blen}};
    struct iovec *v = iov;
    int cnt = 2;
    while (cnt > 0) {
        ssize_t w = writev(fd, v, cnt);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        pb_iov_consume(&v, &cnt, (size_t)w);
    }
}

void pb_termlog_line(const beam_msg_t *msg)
{
    int64_t stream = 2;
    const char *text;
    uint32_t len;
    beam_field_int(&msg->params, "stream", &stream);
    if (beam_field_str(&msg->params, "text", &text, &len) != 0)
        return;
    termlog_write(stream == 1 ? 1 : 2, text, len, "\n", 1);
}

void pb_termlog_error(const beam_msg_t *msg)
{
    const char *text;
    uint32_t len;
    if (beam_field_str(&msg->params, "message", &text, &len) != 0)
        return;
    const char prefix[] = "beam: beamd reported: ";
    char line[1200];
    int n = snprintf(line, sizeof line, "%s%.*s", prefix, (int)(len < 1100 ? len : 1100), text);
    termlog_write(2, line, (size_t)n, "\n", 1);
}
