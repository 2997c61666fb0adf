/* dsock.c — a direct-call socket's bytes (dsock.h): the unwritten bytes
 * kept and written as the socket takes them, frames read and parsed. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "dsock.h"

int pb_dsock_init(pb_dsock_t *s, int fd)
{
    memset(s, 0, sizeof *s);
    /* blocking: every send and every read that must not wait says
     * MSG_DONTWAIT; only pump's long waits block (wake_early) */
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
        return -errno;
    beam_limits_default(&s->limits);
    beam_decoder_init(&s->dec, &s->limits);
    pthread_mutex_init(&s->out_lock, NULL);
    s->fd = fd;
    return 0;
}

int pb_dsock_set_rcvtimeo(pb_dsock_t *s, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    if (setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
        return -errno;
    s->rcvtimeo_ms = ms;
    return 0;
}

void pb_dsock_close(pb_dsock_t *s)
{
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    s->ended = 1;
}

void pb_dsock_destroy(pb_dsock_t *s)
{
    pb_dsock_close(s);
    beam_decoder_destroy(&s->dec);
    free(s->out);
    s->out = NULL;
    pthread_mutex_destroy(&s->out_lock);
}

/* ---------- writing ---------- */

/* Writes what the socket takes of the unwritten bytes. out_lock held. */
static void dsock_write_out(pb_dsock_t *s)
{
    while (s->out_off < s->out_len && s->fd >= 0) {
        ssize_t n = send(s->fd, s->out + s->out_off, s->out_len - s->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            s->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        break; /* the peer is gone: what is unwritten is moot */
    }
    s->out_off = s->out_len = 0;
}

/* Room for len more unwritten bytes. out_lock held. 0 or -ENOMEM. */
static int dsock_reserve(pb_dsock_t *s, size_t len)
{
    if (s->out_off > 0) { /* what is unwritten moves to the front */
        memmove(s->out, s->out + s->out_off, s->out_len - s->out_off);
        s->out_len -= s->out_off;
        s->out_off = 0;
    }
    if (s->out_len + len <= s->out_cap)
        return 0;
    size_t cap = s->out_cap ? s->out_cap : 4096;
    while (cap < s->out_len + len)
        cap *= 2;
    char *m = realloc(s->out, cap);
    if (!m)
        return -ENOMEM;
    s->out = m;
    s->out_cap = cap;
    return 0;
}

int pb_dsock_write(pb_dsock_t *s, const struct iovec *iov, int cnt)
{
    size_t total = 0;
    for (int i = 0; i < cnt; i++)
        total += iov[i].iov_len;
    if (s->fd < 0)
        return 0; /* closed: nothing more goes out */
    pthread_mutex_lock(&s->out_lock);
    size_t done = 0;
    if (s->out_off == s->out_len && s->fd >= 0) {
        struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt};
        ssize_t n;
        do
            n = sendmsg(s->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            n = (ssize_t)total; /* the peer is gone: the reader sees the end */
        done = n > 0 ? (size_t)n : 0;
    }
    int rc = 0;
    if (done < total && (rc = dsock_reserve(s, total - done)) == 0) {
        for (int i = 0; i < cnt; i++) {
            size_t len = iov[i].iov_len;
            if (done >= len) {
                done -= len;
                continue;
            }
            memcpy(s->out + s->out_len, (const char *)iov[i].iov_base + done, len - done);
            s->out_len += len - done;
            done = 0;
        }
    }
    pthread_mutex_unlock(&s->out_lock);
    return rc;
}

size_t pb_dsock_flush(pb_dsock_t *s)
{
    pthread_mutex_lock(&s->out_lock);
    dsock_write_out(s);
    size_t left = s->out_len - s->out_off;
    pthread_mutex_unlock(&s->out_lock);
    return left;
}

size_t pb_dsock_unwritten(pb_dsock_t *s)
{
    pthread_mutex_lock(&s->out_lock);
    size_t left = s->out_len - s->out_off;
    pthread_mutex_unlock(&s->out_lock);
    return left;
}

/* ---------- reading ---------- */

/* Takes every whole frame out of the decoder onto *tail, parsed. 0, or -1
 * on a bad frame or no memory (the socket then ends). */
static int dsock_take(pb_dsock_t *s, pb_dframe_t ***tail)
{
    const char *body;
    size_t len;
    int rc;
    while ((rc = beam_decoder_next(&s->dec, &body, &len)) == 1) {
        pb_dframe_t *g = calloc(1, sizeof *g);
        pb_frame_t *f = g ? pb_frame_new(body, len, len) : NULL;
        char err[160];
        if (!f || pb_frame_parse(f, &s->limits, err, sizeof err) < 0 || f->msg.type != BEAM_MSG_PUSH) {
            pb_frame_free(f);
            free(g);
            return -1;
        }
        g->frame = f;
        **tail = g;
        *tail = &g->next;
    }
    return rc < 0 ? -1 : 0;
}

/* One read of what the socket has (flags MSG_DONTWAIT), or of what comes
 * first (0: blocks, at most the receive timeout). 0, 1 when nothing came,
 * -EINTR when a signal cut a blocking read short, or -1 at the socket's
 * end. */
static int dsock_recv(pb_dsock_t *s, int flags)
{
    char *p;
    size_t n;
    if (beam_decoder_space(&s->dec, &p, &n) < 0)
        return -1;
    ssize_t got;
    do
        got = recv(s->fd, p, n, flags);
    while (got < 0 && errno == EINTR && flags);
    if (got > 0) {
        beam_decoder_commit(&s->dec, (size_t)got);
        return 0;
    }
    if (got < 0 && errno == EINTR)
        return -EINTR;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 1;
    return -1;
}

int pb_dsock_pump(pb_dsock_t *s, int wait_ms, pb_dframe_t **head)
{
    pb_dframe_t **tail = head;
    while (*tail)
        tail = &(*tail)->next;
    pb_dframe_t **first_new = tail;
    int first = 1;
    int64_t deadline = wait_ms < 0 ? -1 : pb_now_ns() + (int64_t)wait_ms * 1000000;
    for (;;) {
        if (s->ended || s->fd < 0)
            return 0;
        if (dsock_take(s, &tail) < 0) {
            s->ended = 1;
            return 0;
        }
        if (*first_new)
            return 0;
        int ms = -1;
        if (deadline >= 0) {
            int64_t left = deadline - pb_now_ns();
            ms = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
        }
        if (!first && ms == 0)
            return 0;
        if (s->wake_early && (ms < 0 || (s->rcvtimeo_ms > 0 && ms >= s->rcvtimeo_ms)) && pb_dsock_unwritten(s) == 0) {
            /* A long wait with nothing to write: a blocking recv, not poll.
             * The kernel wakes a reader blocked in recv when its peer takes
             * bytes this end sent (room to write), a wake poll filters out:
             * it comes while the peer is at work on the call, so the result
             * finds this thread awake. On a VM whose idle vCPUs halt,
             * waking a halted one late is most of a call's cost when the
             * two ends run on two CPUs (docs/DESIGN.md, "Direct calls":
             * the early wake). */
            int rc = dsock_recv(s, 0);
            if (rc == -EINTR)
                return -EINTR;
            if (rc < 0) {
                dsock_take(s, &tail);
                s->ended = 1;
                return 0;
            }
            if (rc == 1)
                return 0; /* the receive timeout: a slice ended */
            continue;
        }
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (pb_dsock_unwritten(s) > 0)
            p.events |= POLLOUT;
        int rc;
        if (first && ms == 0) {
            /* no wait: the non-blocking calls say what poll would (the
             * worker reads once its own poll said so: one syscall fewer) */
            p.revents = p.events;
            rc = 1;
        } else {
            rc = poll(&p, 1, ms);
        }
        first = 0;
        if (rc < 0 && errno == EINTR)
            return -EINTR;
        if (rc < 0 || (p.revents & POLLNVAL)) {
            s->ended = 1;
            return 0;
        }
        if (rc == 0)
            continue; /* the deadline: the next turn sees it */
        if (p.revents & POLLOUT)
            pb_dsock_flush(s);
        if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && dsock_recv(s, MSG_DONTWAIT) < 0) {
            dsock_take(s, &tail); /* what came before the end is still delivered */
            s->ended = 1;
            return 0;
        }
    }
}

void pb_dframes_free(pb_dframe_t *head)
{
    while (head) {
        pb_dframe_t *n = head->next;
        pb_frame_free(head->frame);
        free(head);
        head = n;
    }
}
