/* release.c — batched releases and the background reader thread. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "beam/protocol.h"
#include "release.h"
#include "wire.h"

#define RELEASE_BATCH 256
#define RELEASE_AGE_NS (50 * 1000000LL)
#define IDLE_NS (20 * 1000000LL)

static int release_append(char **buf, size_t *n, const char *id, size_t idlen)
{
    /* room for a whole batch at once; past it (the batch could not be
     * sent) one more at a time */
    if (!*buf || *n >= RELEASE_BATCH) {
        char *nb = realloc(*buf, (*n >= RELEASE_BATCH ? *n + 1 : RELEASE_BATCH) * idlen);
        if (!nb)
            return -ENOMEM;
        *buf = nb;
    }
    memcpy(*buf + *n * idlen, id, idlen);
    (*n)++;
    return 0;
}

/* Takes the queued releases as one encoded request when they are due (full,
 * older than RELEASE_AGE_NS, or force). Returns the buffer (the caller
 * frees it) or NULL. Needs no GIL: the background thread calls it too. */
static char *release_take_batch(pb_client_t *c, int force, size_t *len)
{
    pthread_mutex_lock(&c->release_lock);
    size_t total = c->n_objs + c->n_actors;
    int due = total > 0 && (force || total >= RELEASE_BATCH || pb_now_ns() - c->rel_since >= RELEASE_AGE_NS);
    if (!due || c->closed) {
        pthread_mutex_unlock(&c->release_lock);
        return NULL;
    }
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_request(&enc, 0, "release", 2);
    beam_pack_key(&enc.pk, "objects");
    msgpack_pack_array(&enc.pk, c->n_objs);
    for (size_t i = 0; i < c->n_objs; i++)
        beam_pack_bin(&enc.pk, c->rel_objs + i * BEAM_OBJECT_ID_SIZE, BEAM_OBJECT_ID_SIZE);
    beam_pack_key(&enc.pk, "actors");
    msgpack_pack_array(&enc.pk, c->n_actors);
    for (size_t i = 0; i < c->n_actors; i++)
        beam_pack_bin(&enc.pk, c->rel_actors + i * BEAM_ACTOR_ID_SIZE, BEAM_ACTOR_ID_SIZE);
    c->n_objs = c->n_actors = 0;
    pthread_mutex_unlock(&c->release_lock);
    int rc = beam_enc_end(&enc, 0);
    char *buf = beam_enc_take(&enc, len);
    beam_enc_destroy(&enc);
    if (rc < 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* When the oldest queued release falls due (0: none queued). */
static int64_t release_due(pb_client_t *c)
{
    pthread_mutex_lock(&c->release_lock);
    int64_t due = c->n_objs + c->n_actors ? c->rel_since + RELEASE_AGE_NS : 0;
    pthread_mutex_unlock(&c->release_lock);
    return due;
}

void pb_flush_releases(pb_client_t *c, int force)
{
    size_t len;
    char *buf = release_take_batch(c, force, &len);
    if (buf)
        pb_send(c, buf, len);
    free(buf);
}

int pb_release(pb_client_t *c, int kind, const char *id)
{
    pthread_mutex_lock(&c->release_lock);
    int first = c->n_objs + c->n_actors == 0;
    if (first)
        c->rel_since = pb_now_ns();
    int rc = kind == 0 ? release_append(&c->rel_objs, &c->n_objs, id, BEAM_OBJECT_ID_SIZE)
                       : release_append(&c->rel_actors, &c->n_actors, id, BEAM_ACTOR_ID_SIZE);
    int full = c->n_objs + c->n_actors >= RELEASE_BATCH;
    pthread_mutex_unlock(&c->release_lock);
    if (rc < 0)
        return rc;
    if (full)
        pb_flush_releases(c, 1);
    else if (first)
        pb_kick_background(c); /* so it sends the batch if nothing else does */
    return 0;
}

/* ---------- the background thread ---------- */

/* Sends due releases from the background thread (no GIL). */
static void release_flush_nogil(pb_client_t *c)
{
    size_t len;
    char *buf = release_take_batch(c, 0, &len);
    if (buf)
        pb_send_nogil(c, buf, len);
    free(buf);
}

/* Reads only while no request is waiting and none has for IDLE_NS. */
static void *release_background(void *arg)
{
    pb_client_t *c = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals belong to Python's main thread */
    pthread_mutex_lock(&c->lock);
    while (!c->closed) {
        int64_t now = pb_now_ns();
        int64_t due = release_due(c);
        if (due && now >= due) {
            /* releases a quiet process queued: send them (a busy one's go
             * out with its next request) */
            pthread_mutex_unlock(&c->lock);
            release_flush_nogil(c);
            pthread_mutex_lock(&c->lock);
            continue;
        }
        if (c->reading || c->fg_waiters > 0 || now - c->fg_last < IDLE_NS) {
            /* busy: look again in IDLE_NS (no one signals this thread but close) */
            int64_t until = (c->reading || c->fg_waiters > 0 ? now : c->fg_last) + IDLE_NS;
            if (due && due < until)
                until = due;
            struct timespec ts = {.tv_sec = until / 1000000000LL, .tv_nsec = until % 1000000000LL};
            pthread_cond_timedwait(&c->bg_cond, &c->lock, &ts);
            continue;
        }
        c->reading = 1;
        c->bg_in_poll = 1;
        pthread_mutex_unlock(&c->lock);
        struct pollfd fds[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = c->wake_fd, .events = POLLIN}};
        int ms = due ? (int)((due - now + 999999) / 1000000) : -1;
        int n = poll(fds, 2, ms);
        if (n > 0 && (fds[1].revents & POLLIN)) {
            uint64_t v;
            ssize_t r = read(c->wake_fd, &v, sizeof v);
            (void)r;
        }
        if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)))
            pb_read_once(c);
        pthread_mutex_lock(&c->lock);
        c->bg_in_poll = 0;
        c->reading = 0;
        pthread_cond_broadcast(&c->cond);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int pb_background_start(pb_client_t *c)
{
    int rc = pthread_create(&c->thread, NULL, release_background, c);
    if (rc != 0)
        return -rc;
    c->thread_started = 1;
    return 0;
}

void pb_background_stop(pb_client_t *c)
{
    pthread_mutex_lock(&c->lock);
    c->closed = 1;
    pthread_cond_broadcast(&c->cond);
    pthread_cond_broadcast(&c->bg_cond);
    pthread_mutex_unlock(&c->lock);
    if (c->wake_fd >= 0)
        pb_kick_background(c);
    if (c->thread_started) {
        Py_BEGIN_ALLOW_THREADS
        pthread_join(c->thread, NULL);
        Py_END_ALLOW_THREADS
        c->thread_started = 0;
    }
}
