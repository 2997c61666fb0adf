/* wire.c — sending, reading, filing and waiting on the connection to beamd. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "iov.h"
#include "termlog.h"
#include "wire.h"

int pb_wire_init(pb_client_t *c)
{
    c->stage = malloc(PB_STAGE_SIZE);
    return c->stage ? 0 : -ENOMEM;
}

void pb_wire_destroy(pb_client_t *c)
{
    free(c->stage);
    c->stage = NULL;
    pb_frame_free(c->partial);
    c->partial = NULL;
}

/* ---------- sending ---------- */

int pb_send_nogil(pb_client_t *c, const char *buf, size_t len)
{
    pthread_mutex_lock(&c->send_lock);
    int rc = beam_client_write_all(c->fd, buf, len);
    pthread_mutex_unlock(&c->send_lock);
    return rc;
}

int pb_send(pb_client_t *c, const char *buf, size_t len)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pb_send_nogil(c, buf, len);
    Py_END_ALLOW_THREADS
    return rc;
}

#define WIRE_IOV_MAX 1024 /* Linux's UIO_MAXIOV */

/* sendmsg until all of iov is out (IOV_MAX pieces at a time). */
static int wire_sendv_nogil(int fd, struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)(cnt < WIRE_IOV_MAX ? cnt : WIRE_IOV_MAX)};
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        pb_iov_consume(&iov, &cnt, (size_t)n);
    }
    return 0;
}

int pb_sendv(pb_client_t *c, struct iovec *iov, int cnt)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->send_lock);
    rc = wire_sendv_nogil(c->fd, iov, cnt);
    pthread_mutex_unlock(&c->send_lock);
    Py_END_ALLOW_THREADS
    return rc;
}

void pb_mark_closed(pb_client_t *c, const char *reason)
{
    if (reason && !c->close_reason[0])
        snprintf(c->close_reason, sizeof c->close_reason, "%s", reason);
    c->closed = 1;
}

/* ---------- reading ---------- */

/* Frames read whole by one pb_read_once, in arrival order. */
typedef struct wire_batch_s {
    pb_frame_t *head, *tail;
} wire_batch_t;

static void wire_batch_add(wire_batch_t *b, pb_frame_t *f)
{
    f->next = NULL;
    if (b->tail)
        b->tail->next = f;
    else
        b->head = f;
    b->tail = f;
}

/* Takes the frames out of the stage's len bytes: each whole one is copied
 * into a frame of its own; one whose body is still arriving becomes
 * c->partial, holding what came; a partial header stays at the stage's
 * start. 0, or -EPROTO / -ENOMEM with the reason in err. */
static int wire_cut(pb_client_t *c, size_t len, wire_batch_t *out, char *err, size_t errlen)
{
    size_t pos = 0;
    while (len - pos >= BEAM_FRAME_HEADER) {
        uint32_t n;
        char why[80];
        if (beam_frame_header(c->stage + pos, c->limits.max_frame, &n, why, sizeof why) < 0) {
            snprintf(err, errlen, "bad frame header from beamd: %s", why); /* the decoder's rule (decoder.h) */
            return -EPROTO;
        }
        size_t body = len - pos - BEAM_FRAME_HEADER;
        size_t take = body < n ? body : n;
        pb_frame_t *f = pb_frame_new(c->stage + pos + BEAM_FRAME_HEADER, take, n);
        if (!f) {
            snprintf(err, errlen, "out of memory reading from beamd");
            return -ENOMEM;
        }
        pos += BEAM_FRAME_HEADER + take;
        if (take < n) {
            c->partial = f;
            break;
        }
        wire_batch_add(out, f);
    }
    c->stage_len = len - pos;
    if (c->stage_len)
        memmove(c->stage, c->stage + pos, c->stage_len);
    return 0;
}

/* Files one parsed frame (owned by the caller until filed). c->lock held. */
static void wire_file(pb_client_t *c, pb_frame_t *f)
{
    beam_msg_t *msg = &f->msg;
    if (msg->type == BEAM_MSG_REPLY) {
        for (pb_slot_t *s = c->slots; s; s = s->next)
            if (s->msgid == msg->msgid && !s->reply) {
                s->reply = f;
                return;
            }
    } else if (msg->type == BEAM_MSG_PUSH) {
        int is_log = beam_str_eq(msg->op, msg->op_len, "log");
        if (!is_log && beam_str_eq(msg->op, msg->op_len, "result")) {
            /* a submit's result: into the table, never the push queue */
            const char *id, *data = NULL;
            uint32_t len = 0;
            int64_t st;
            int status = beam_field_int(&msg->params, "status", &st) == 0 && st >= 0 && st <= INT32_MAX &&
                                 beam_field_bin(&msg->params, "data", &data, &len) == 0
                             ? (int)st
                             : -1;
            if (beam_field_id(&msg->params, "obj", BEAM_OBJECT_ID_SIZE, &id) == 0 &&
                pb_results_file(&c->results, id, f, status, data, len) == 0) {
                /* kept as bytes alone: the parse's memory goes now (data and
                 * id point into the frame's bytes, not into it) */
                beam_msg_destroy(msg);
                f->parsed = 0;
                return;
            }
            /* (one not expected, or released meanwhile, is dropped) */
        } else if (is_log && !c->queue_logs) {
            pb_termlog_line(msg);
        } else if (!is_log && beam_str_eq(msg->op, msg->op_len, "error")) {
            pb_termlog_error(msg);
        } else {
            if (c->push_tail)
                c->push_tail->next = f;
            else
                c->push_head = f;
            c->push_tail = f;
            return;
        }
    }
    pb_frame_free(f);
}

/* One read (flags: MSG_DONTWAIT, or 0 to block up to the socket's receive
 * timeout), its frames filed. *got: 1 when bytes came or the connection
 * ended, 0 when nothing did. 0 or a negative errno (pb_read_once). */
static int wire_read(pb_client_t *c, int flags, int *got)
{
    char *dst;
    size_t room;
    if (c->partial) {
        dst = c->partial->data + c->partial->have;
        room = c->partial->len - c->partial->have;
    } else {
        dst = c->stage + c->stage_len;
        room = PB_STAGE_SIZE - c->stage_len;
    }
    ssize_t n;
    do
        n = recv(c->fd, dst, room, flags);
    while (n < 0 && errno == EINTR && flags);
    *got = !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
    if (!*got)
        return 0; /* (a signal: the waiter looks at Python's handlers) */
    int rc = 0;
    char err[200] = "";
    wire_batch_t batch = {NULL, NULL};
    if (n == 0) {
        snprintf(err, sizeof err, "beamd closed the connection");
        rc = -EPIPE;
    } else if (n < 0) {
        snprintf(err, sizeof err, "the connection to beamd failed");
        rc = -errno;
    } else if (c->partial) {
        c->partial->have += (size_t)n;
        if (c->partial->have == c->partial->len) {
            wire_batch_add(&batch, c->partial);
            c->partial = NULL;
        }
    } else {
        rc = wire_cut(c, c->stage_len + (size_t)n, &batch, err, sizeof err);
    }
    /* parse outside the lock: the waiters need it only to file */
    for (pb_frame_t *f = batch.head; f && rc == 0; f = f->next) {
        char perr[160];
        if (pb_frame_parse(f, &c->limits, perr, sizeof perr) < 0) {
            snprintf(err, sizeof err, "bad frame from beamd: %s", perr);
            rc = -EPROTO;
        }
    }
    pthread_mutex_lock(&c->lock);
    for (pb_frame_t *f = batch.head, *next; f; f = next) {
        next = f->next;
        f->next = NULL;
        if (rc == 0)
            wire_file(c, f);
        else
            pb_frame_free(f);
    }
    if (rc < 0)
        pb_mark_closed(c, err);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int pb_read_once(pb_client_t *c)
{
    int got;
    return wire_read(c, MSG_DONTWAIT, &got);
}

void pb_kick_background(pb_client_t *c)
{
    uint64_t one = 1;
    ssize_t r = write(c->wake_fd, &one, sizeof one);
    (void)r;
}

/* ---------- waiting ---------- */

int pb_deadline_from(PyObject *timeout, int64_t *deadline)
{
    *deadline = 0;
    if (timeout == Py_None)
        return 0;
    double t = PyFloat_AsDouble(timeout);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    *deadline = pb_now_ns() + (int64_t)(t * 1e9);
    return 0;
}

PyObject *pb_conn_error(pb_client_t *c)
{
    pthread_mutex_lock(&c->lock);
    PyErr_Format(PyExc_ConnectionError, "beam: not connected to beamd (%s)",
                 c->close_reason[0] ? c->close_reason : "connection closed");
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int pb_wait_for(pb_client_t *c, int (*pred)(pb_client_t *, void *), void *arg, int64_t deadline)
{
    int is_main = PyGILState_Check() && _PyOS_IsMainThread();
    int drained = 0; /* at the deadline, what the socket holds was read once */
    for (;;) {
        int done = 0, timed_out = 0;
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&c->lock);
        c->fg_waiters++;
        for (;;) {
            if (pred(c, arg) || c->closed) {
                done = 1;
                break;
            }
            int64_t now = pb_now_ns(), until = deadline;
            if (deadline && now >= deadline) {
                if (!drained && !c->reading) {
                    /* what already came counts (a timeout of 0 on a value
                     * that is there): one read without waiting, then look */
                    drained = 1;
                    c->reading = 1;
                    pthread_mutex_unlock(&c->lock);
                    pb_read_once(c);
                    pthread_mutex_lock(&c->lock);
                    c->reading = 0;
                    pthread_cond_broadcast(&c->cond);
                    continue;
                }
                timed_out = 1;
                break;
            }
            if (is_main && (!until || until > now + PB_RCVTIMEO_MS * 1000000LL))
                until = now + PB_RCVTIMEO_MS * 1000000LL;
            if (!c->reading) {
                /* lead: read the socket ourselves, in one blocking recv
                 * (the socket's receive timeout, PB_RCVTIMEO_MS, is the
                 * main thread's periodic wake) unless the deadline comes
                 * sooner: then a poll with it */
                c->reading = 1;
                pthread_mutex_unlock(&c->lock);
                int ms = until ? (int)((until - now + 999999) / 1000000) : -1;
                int n = 0;
                if (c->rcvtimeo && (ms < 0 || ms >= PB_RCVTIMEO_MS)) {
                    wire_read(c, 0, &n);
                } else {
                    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
                    n = poll(&pfd, 1, ms);
                    if (n > 0)
                        pb_read_once(c);
                }
                pthread_mutex_lock(&c->lock);
                c->reading = 0;
                pthread_cond_broadcast(&c->cond); /* the next waiter may lead */
                if (n == 0 && is_main && (!deadline || pb_now_ns() < deadline))
                    break; /* a periodic wake: check signals */
                continue;
            }
            if (c->bg_in_poll)
                pb_kick_background(c);
            if (!until) {
                pthread_cond_wait(&c->cond, &c->lock);
                continue;
            }
            struct timespec ts = {.tv_sec = until / 1000000000LL, .tv_nsec = until % 1000000000LL};
            if (pthread_cond_timedwait(&c->cond, &c->lock, &ts) == ETIMEDOUT && is_main &&
                (!deadline || pb_now_ns() < deadline))
                break;
        }
        if (--c->fg_waiters == 0)
            c->fg_last = pb_now_ns();
        pthread_mutex_unlock(&c->lock);
        Py_END_ALLOW_THREADS
        if (done)
            return 0;
        if (timed_out)
            return -ETIMEDOUT;
        if (PyErr_CheckSignals() < 0)
            return -EINTR;
    }
}
