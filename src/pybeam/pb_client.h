/* pb_client.h — the state of one _beam.Client (one connection to beamd)
 * shared by the extension's parts, and which lock guards what. The parts:
 * wire (send, read, file, wait), release (batched releases and the
 * background thread), convert (values), termlog (terminal lines),
 * results and pushed (the results beamd pushes to this client), and
 * pybeam.c, the module glue that lists the Client's methods. */
#ifndef PYBEAM_CLIENT_H
#define PYBEAM_CLIENT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdint.h>

#include "beam/codec.h"
#include "clock.h"
#include "frame.h"
#include "results.h"

#define PB_STAGE_SIZE 65536
/* How long the main thread waits in pb_wait_for before it runs Python's
 * signal handlers, and so the socket's receive timeout: a thread reading
 * there blocks in recv at most this long before it looks at signals and
 * its deadline. */
#define PB_RCVTIMEO_MS 200

typedef struct pb_module_state_s {
    PyObject *RemoteError;
    PyTypeObject *ClientType;
    PyTypeObject *FrameBytesType;
    PyTypeObject *DirectType; /* DirectConn (direct.h) */
} pb_module_state_t;

/* One request waiting for its reply; lives on the waiting thread's stack. */
typedef struct pb_slot_s {
    uint64_t msgid;
    pb_frame_t *reply;  /* filed by the reader; the waiter owns it after */
    struct pb_slot_s *next;
} pb_slot_t;

typedef struct pb_client_s {
    PyObject_HEAD
    int fd;
    int wake_fd;        /* eventfd: gets the background reader out of poll */
    int rcvtimeo;       /* SO_RCVTIMEO is PB_RCVTIMEO_MS (else waiters poll) */
    int closed;         /* the connection is gone (EOF, error or close()) */
    int thread_started;
    pthread_t thread;
    beam_limits_t limits;

    /* the read side: touched only by the thread that set `reading` */
    char *stage;        /* PB_STAGE_SIZE bytes each read lands in */
    size_t stage_len;   /* bytes held (a partial frame header at most) */
    pb_frame_t *partial; /* a frame whose body is still arriving, read in place */

    pthread_mutex_t lock; /* guards everything below up to send_lock */
    int reading;        /* some thread owns the read side */
    int fg_waiters;     /* threads waiting in pb_wait_for */
    int bg_in_poll;
    int64_t fg_last;    /* when the last waiter left */
    pthread_cond_t cond;    /* waiters: a reply or push came, or the socket is free */
    pthread_cond_t bg_cond; /* the background reader: only close() signals it */
    pb_slot_t *slots;
    pb_frame_t *push_head, *push_tail;
    pb_results_t results; /* pushed results by object id (results.h) */
    int queue_logs;     /* log pushes are queued (next_push), not written */
    char close_reason[160];
    uint64_t next_msgid;

    pthread_mutex_t send_lock; /* one writer on the socket at a time */

    pthread_mutex_t release_lock; /* the batch below */
    char *rel_objs, *rel_actors;
    size_t n_objs, n_actors;
    int64_t rel_since;
} pb_client_t;


#endif
