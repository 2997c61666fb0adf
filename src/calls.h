/* calls.h — an actor's calls: each call's record (its return object, method,
 * args and the refs it pins), the queue of calls not yet sent to the worker
 * and the list of calls sent and not yet done, both in submission order,
 * the `call` push that hands one to the worker, and completing or failing a
 * call's return object. Knows objects and ports, not actors. */
#ifndef BEAM_CALLS_H
#define BEAM_CALLS_H

#include <stddef.h>
#include <stdint.h>

#include "node.h"
#include "objects.h"
#include "port.h"

typedef struct beam_call_s {
    char obj[BEAM_OBJECT_ID_SIZE];
    char *method;
    char *args;           /* inside args_buf */
    size_t args_len;
    beam_buf_t *args_buf; /* one reference, dropped once the call is sent (kept if its queue keeps args) */
    beam_refs_t refs; /* pinned until the call completes */
    int local;        /* its member wrote it to the worker there (src/actor/localcalls.c) */
    int tries;        /* times it was sent again after its worker died */
    struct beam_call_s *next;
} beam_call_t;

typedef struct beam_callq_s {
    beam_call_t *queue, *queue_tail; /* not yet sent to the worker */
    beam_call_t *sent, *sent_tail;   /* sent, not yet done */
    int keep_args; /* a sent call keeps its args: it may be sent again (beam_callq_retry_sent) */
} beam_callq_t;

/* A call on return object obj. Takes method, the reference args_buf (args
 * lies inside it) and refs (on failure too) and pins the refs. NULL when
 * memory ran out: the return object, if any, is then completed with LOST. */
beam_call_t *beam_call_new(beam_node_t *node, const char *obj, char *method, beam_buf_t *args_buf,
                           const char *args, size_t args_len, beam_refs_t *refs);
/* Completes the call's return object (the reference buf, in which data
 * lies, and refs taken) and frees the call, unpinning its refs. */
void beam_call_complete(beam_node_t *node, beam_call_t *call, int status, beam_buf_t *buf, const char *data,
                        size_t len, beam_refs_t *refs);
/* Completes the call's return object with a text status and frees it. */
void beam_call_fail(beam_node_t *node, beam_call_t *call, int status, const char *message);

/* Appends call to the queue. */
void beam_callq_push(beam_callq_t *q, beam_call_t *call);
/* Sends call to worker as a `call` push (its args are dropped then) and
 * appends it to the sent list. */
void beam_callq_send(beam_callq_t *q, beam_port_t *worker, beam_call_t *call);
/* Sends the queue in order while worker is not closing. */
void beam_callq_flush(beam_callq_t *q, beam_port_t *worker);
/* Unlinks the sent call on obj and returns it, or NULL. */
beam_call_t *beam_callq_take_sent(beam_callq_t *q, const char *obj);
/* Fails every call, sent ones first, in order; keep_local: but the sent
 * local calls, which stay in the sent list (src/actor/localcalls.c). */
void beam_callq_fail_all(beam_node_t *node, beam_callq_t *q, int status, const char *message, int keep_local);
/* The worker the sent calls went to died and another will take the queue:
 * each sent call goes back to the front of the queue, in order, while it
 * has retries left (retries: -1 without end) and q kept its args, stays sent if
 * it is local and keep_local, else fails with status and message. */
void beam_callq_retry_sent(beam_node_t *node, beam_callq_t *q, int retries, int status, const char *message,
                           int keep_local);
/* Fails every sent call (not the queue), in order. */
void beam_callq_fail_sent(beam_node_t *node, beam_callq_t *q, int status, const char *message);
/* Appends call to the sent list as it is (a call its member already sent). */
void beam_callq_push_sent(beam_callq_t *q, beam_call_t *call);
/* Frees every call without completing anything (daemon exit). */
void beam_callq_destroy(beam_callq_t *q);
/* 1 when nothing is queued or sent. */
int beam_callq_idle(const beam_callq_t *q);
uint32_t beam_calls_count(const beam_call_t *c);

#endif
