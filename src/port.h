/* port.h — how a table answers a client. A port is the client as the tables
 * see it: who it is (its number, job, role, process, node, the actor a
 * worker serves), what it holds and its waiters, and an operations table
 * (send a buffer, send a log line, close, is it closing) that its kind
 * fills in: a local unix-socket client, a member's client relayed to the
 * head, or a member's client as the head sees it (session.c). The tables
 * include this header, never a transport or the session, so each can be
 * tested with a port whose operations record what was sent. */
#ifndef BEAM_PORT_H
#define BEAM_PORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uthash.h>

#include "beam/codec.h"
#include "node.h"

enum { BEAM_ROLE_NONE = 0, BEAM_ROLE_DRIVER, BEAM_ROLE_WORKER, BEAM_ROLE_CTL };

/* One id a client holds (an object or an actor handle). */
typedef struct beam_held_s {
    char id[BEAM_OBJECT_ID_SIZE];
    UT_hash_handle hh;
} beam_held_t;

struct beam_port_s;

typedef struct beam_port_ops_s {
    /* Queues buf (malloc'd, taken) for the client. 0, or a negative errno
     * (-EPIPE if it is closing). A send that cannot go on closes the client on the loop's
     * next turn, never under the caller. */
    int (*send)(struct beam_port_s *p, char *buf, size_t len);
    /* Sends one line an actor printed (text borrowed); the kind may drop
     * it when its client does not read. */
    void (*send_log)(struct beam_port_s *p, int stream, const char *text, size_t len);
    /* Closes the client on the loop's next turn (why is copied). From now
     * on it is closing. */
    void (*close)(struct beam_port_s *p, const char *why);
    /* 1 once it is closing (no more sends, teardown pending or done). */
    int (*closing)(const struct beam_port_s *p);
    /* Sends what enc holds, spans written from their buffers (NULL: the
     * frame is taken whole, spans copied in, and sent). enc is destroyed. */
    int (*send_enc)(struct beam_port_s *p, beam_enc_t *enc);
} beam_port_ops_t;

typedef struct beam_port_s {
    const beam_port_ops_t *ops;
    beam_node_t *node;
    uint32_t id;  /* its connection number on its node */
    uint32_t job;
    int role;
    long pid;
    uid_t uid;
    int no_logs;                  /* log_to_driver=False */
    int shm;                      /* it maps values in shared memory (the `shm` op; shm.h) */
    beam_held_t *held_objects;    /* ids it holds (released when it ends) */
    beam_held_t *held_actors;
    struct beam_waiter_s *waiters; /* its get/wait waiters (objects.c) */
    struct beam_actor_s *actor;    /* the actor a worker serves */
    struct beam_member_s *member;  /* the node the client is on */
} beam_port_t;

/* The ops, or nothing when p is closing. beam_port_send frees buf then. */
int beam_port_send(beam_port_t *p, char *buf, size_t len);
/* Sends what enc holds and leaves enc destroyed. 0 or a negative errno. */
int beam_port_send_enc(beam_port_t *p, beam_enc_t *enc);
/* Replies with an error; for msgid 0, sends an `error` push instead. */
void beam_port_reply_error(beam_port_t *p, uint64_t msgid, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Replies {} to msgid (nothing for msgid 0). */
void beam_port_reply_empty(beam_port_t *p, uint64_t msgid);
/* Sends an `error` push with message. */
void beam_port_send_error_push(beam_port_t *p, const char *message);
void beam_port_send_log(beam_port_t *p, int stream, const char *text, size_t len);
/* Closes the client on the loop's next turn (see beam_port_ops_t.close). */
void beam_port_close(beam_port_t *p, const char *why);
int beam_port_closing(const beam_port_t *p);

/* Hold sets: 1 when newly added, 0 if already held, -ENOMEM. */
int beam_port_hold(beam_held_t **set, const char *id, size_t len);
/* 1 when it was held and is now dropped, else 0. */
int beam_port_unhold(beam_held_t **set, const char *id, size_t len);

#endif
