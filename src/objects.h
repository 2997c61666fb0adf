/* objects.h — the inline object table: each object's state, bytes, holders
 * and pins, the refs it contains, and the get/wait waiters parked on it. */
#ifndef BEAM_OBJECTS_H
#define BEAM_OBJECTS_H

#include <stddef.h>
#include <stdint.h>
#include <uthash.h>
#include <uv.h>

#include "beam/buf.h"
#include "node.h"
#include "port.h"

/* GET and WAIT answer a request (msgid); PUSH answers no request: it sends
 * its port a `result` push of its one object once that is ready (submit's
 * `push`), and is cancelled with its port's other waiters. */
enum { BEAM_WAIT_GET = 0, BEAM_WAIT_WAIT = 1, BEAM_WAIT_PUSH = 2 };

struct beam_waiter_s;

/* Ids of objects and actors carried inside a value or a call's args. While
 * the carrier lives they are pinned, so they outlive every handle in transit. */
typedef struct beam_refs_s {
    uint32_t nobjs, nactors;
    char *objs;   /* nobjs * BEAM_OBJECT_ID_SIZE */
    char *actors; /* nactors * BEAM_ACTOR_ID_SIZE */
} beam_refs_t;

typedef struct beam_object_s {
    char id[BEAM_OBJECT_ID_SIZE];
    int ready;
    int abandonable; /* may be freed while pending once no one wants it */
    int status;
    char *data;
    size_t len;
    beam_buf_t *buf;  /* the buffer data lies in (one reference), or NULL: data is its own allocation */
    uint32_t holders; /* connections holding it */
    uint32_t pins;    /* carriers and pending calls pinning it */
    beam_refs_t refs; /* what this object's value carries */
    struct beam_waiter_s **waiters;
    size_t nwaiters, capwaiters;
    UT_hash_handle hh;
} beam_object_t;

typedef struct beam_waiter_s {
    beam_node_t *node;
    beam_port_t *port; /* who asked */
    uint64_t msgid;
    int mode;
    uint32_t n, num_returns;
    beam_object_t **objs; /* NULL where the id is unknown; &one for a push waiter */
    beam_object_t *one;
    uv_timer_t timer;
    int has_timer;
    struct beam_waiter_s *prev, *next; /* its port's waiters */
} beam_waiter_t;

/* Parses the optional "objects" and "actors" id arrays of params into refs
 * (copies). Returns 0 or -1 with a message in err. */
int beam_refs_parse(const msgpack_object *params, beam_refs_t *refs, char *err, size_t errlen);
void beam_refs_free(beam_refs_t *refs);
/* Pins/unpins every id refs names (unknown ids are skipped; actors through
 * node->hooks.actor_pin). unpin frees refs. */
void beam_refs_pin(beam_node_t *node, const beam_refs_t *refs);
void beam_refs_unpin(beam_node_t *node, beam_refs_t *refs);

beam_object_t *beam_object_find(beam_node_t *node, const char *id);
/* Adds a pending object. Returns it, or NULL if the id exists or memory ran out. */
beam_object_t *beam_object_create(beam_node_t *node, const char *id);
/* Makes obj ready. Takes ownership of data (malloc'd) and of refs (pinned
 * here), wakes the waiters, and frees obj if no one wants it. */
void beam_object_complete(beam_node_t *node, beam_object_t *obj, int status, char *data,
                          size_t len, beam_refs_t *refs);
/* The same for a value that lies in buf (data[0..len) inside it): the
 * caller's reference to buf passes here, and a get sends the value from
 * there (a span), not from a copy. */
void beam_object_complete_buf(beam_node_t *node, beam_object_t *obj, int status, beam_buf_t *buf,
                              const char *data, size_t len, beam_refs_t *refs);
/* Completes a pending object with a text status (ACTOR_DIED, LOST). */
void beam_object_fail(beam_node_t *node, beam_object_t *obj, int status, const char *message);
/* The client that made ids (ids.h: node index, connection number) ended:
 * every object of its ids not yet ready fails with BEAM_OBJ_OWNER_DIED, as
 * Ray fails an object whose owner died (a value that came before stays). */
void beam_objects_owner_gone(beam_node_t *node, uint32_t node_index, uint32_t conn);
void beam_object_pin(beam_node_t *node, beam_object_t *obj);
void beam_object_unpin(beam_node_t *node, beam_object_t *obj);
/* A connection took or dropped its hold. unhold may free obj. */
void beam_object_hold(beam_node_t *node, beam_object_t *obj);
void beam_object_unhold(beam_node_t *node, beam_object_t *obj);
size_t beam_object_count(const beam_node_t *node);

/* Answers a get or wait now if it can, else parks a waiter on every pending
 * object (and a timer when timeout_ms >= 0). ids is the request's array. */
int beam_waiter_start(beam_node_t *node, beam_port_t *port, uint64_t msgid, int mode,
                      const msgpack_object_array *ids, uint32_t num_returns, int64_t timeout_ms);
/* Pushes `result` for obj to port once obj is ready (at once if it is):
 * every completion (task_done, a failed call, an actor's death, a lost
 * object) wakes it as it wakes a get. 0 or -ENOMEM. */
int beam_waiter_push(beam_node_t *node, beam_port_t *port, beam_object_t *obj);
/* Sends port the `result` push of object id (codec.h's
 * beam_enc_result_push: status < 0 or a value over BEAM_PUSH_MAX_DATA
 * goes as {obj} alone; data is a span of buf when buf is not NULL) and
 * counts it in node->results_pushed: the one sender of a pushed result,
 * for the head's objects and a member's kept results. */
void beam_result_push(beam_node_t *node, beam_port_t *port, const char *id, int status, beam_buf_t *buf,
                      const char *data, size_t len);
/* The `result` push of a submit refused before its object was made (why:
 * the reason): status lost with the message "The call was refused: why.",
 * so a waiter of the pushed result is answered, not left waiting. */
void beam_result_push_refused(beam_node_t *node, beam_port_t *port, const char *id, const char *why);
/* Drops every waiter of port without answering (the client is closing). */
void beam_waiters_cancel(beam_node_t *node, beam_port_t *port);
/* Frees every object (daemon exit). */
void beam_objects_destroy(beam_node_t *node);

#endif
