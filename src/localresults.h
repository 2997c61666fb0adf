/* localresults.h — the results of a member's local calls (shortcut.h), kept for the
 * gets of its local clients, and the gets held here until they finish. A
 * result is added pending when its call is written to the worker, filled
 * by the worker's task_done, and dropped when its caller releases it or
 * ends, when its actor is cut (its results are the head's to give), or
 * past the bounds below (oldest first: the head has every result too). A
 * get that names a result not kept here goes to the head. */
#ifndef BEAM_LOCALRESULTS_H
#define BEAM_LOCALRESULTS_H

#include <stddef.h>
#include <stdint.h>

#include "beam/codec.h"
#include "node.h"

/* At most this many bytes of finished results (no single one over a
 * quarter of it), and this many results, finished or not. */
#define BEAM_KEPT_BYTES (64u << 20)
#define BEAM_KEPT_MAX 65536

typedef struct beam_localresults_s beam_localresults_t;

/* NULL when out of memory. before_up (may be NULL) runs before a held get
 * goes up to the head: what the member holds for the head goes first. */
beam_localresults_t *beam_localresults_new(beam_node_t *node, void (*before_up)(beam_node_t *node));
/* Forgets everything; held gets are dropped unanswered (their clients are
 * being closed). beam_localresults_free also frees k (a held get's timer memory
 * goes with the loop's close callback). */
void beam_localresults_clear(beam_localresults_t *k);
void beam_localresults_free(beam_localresults_t *k);
/* 1 if any result is kept. */
int beam_localresults_any(const beam_localresults_t *k);
/* obj's record: -1 none, 0 pending, 1 done (with its status and bytes,
 * borrowed, in *status, *data, *len when not NULL). */
int beam_localresults_state(beam_localresults_t *k, const char *obj, int *status, const char **data, size_t *len);

/* A local call by client caller to actor, whose result obj is pending: 0,
 * -EEXIST (obj is one already), -ENOSPC (no room), -ENOMEM. push: the
 * caller asked for its result pushed (submit's `push`): it is sent
 * `result {obj, status, data}` when task_done fills the record (`result
 * {obj}`, fetch with a get, for a value over BEAM_PUSH_MAX_DATA or one not
 * kept), and `result {obj}` when the record goes pending because its actor
 * is cut: the head then answers the get, as it fails the call. */
int beam_localresults_add(beam_localresults_t *k, const char *obj, const char *actor, uint32_t caller, int push);
/* Drops obj's record (its call could not be written after all). */
void beam_localresults_drop(beam_localresults_t *k, const char *obj);
/* task_done {obj, status 0 or 1, data} from actor's worker, its fields
 * checked (shortcut.c's table): fills obj's record if it is a pending call of
 * that actor (1; else 0). data is copied. */
int beam_localresults_done(beam_localresults_t *k, const char *actor, const char *obj, int status, const char *data, uint32_t len);
/* release {objects} from client caller (ids: checked object ids): its
 * results go, pending or not. */
void beam_localresults_release(beam_localresults_t *k, uint32_t caller, const msgpack_object_array *ids);
/* The actor is cut: its pending results go, and gets held on them go to
 * the head. */
void beam_localresults_cut(beam_localresults_t *k, const char *actor);
/* Client vconn ended: what it called and its held gets go. */
void beam_localresults_client_gone(beam_localresults_t *k, uint32_t vconn);
/* get {objs, timeout_ms} (msgid; objs: checked object ids; timeout_ms -1
 * forever) from local client vconn: 1 when answered or held here, 0 when
 * it must go to the head as it is. */
int beam_localresults_get(beam_localresults_t *k, uint32_t vconn, uint64_t msgid, const msgpack_object_array *objs, int64_t timeout_ms);

/* Ends req (one request, destroyed here) and hands its frame's bytes to
 * the caller, who frees them (the body starts at BEAM_FRAME_HEADER; *len
 * counts the header too); NULL when out of memory. */
char *beam_localresults_frame(beam_enc_t *req, size_t *len);
/* key: [n ids of size bytes each] */
void beam_localresults_pack_ids(msgpack_packer *pk, const char *key, const char *ids, uint32_t n, size_t size);

#endif
