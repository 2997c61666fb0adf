/* protocol.h — the constants of beam's wire protocol that C and Python share:
 * the frame header, the message types, the default limits, ids' sizes, the
 * object statuses a `get` reply carries, and the resource unit. One place for
 * each number: src/ and _beam include this header; python/ray keeps copies
 * that tests/python/test_protocol_constants.py checks against it
 * (docs/PROTOCOL.md describes the messages). Keep each definition on one line
 * of the form `#define BEAM_X value` or `BEAM_X = value,` so the test can
 * read it. */
#ifndef BEAM_PROTOCOL_H
#define BEAM_PROTOCOL_H

/* The version string beamd reports in `hello` and `status`. */
#define BEAM_VERSION "0.1.0"

/* A frame is a 4-byte big-endian body length, then one msgpack value. */
#define BEAM_FRAME_HEADER 4

/* The envelope's first element. */
enum {
    BEAM_MSG_REQUEST = 0,
    BEAM_MSG_REPLY = 1,
    BEAM_MSG_PUSH = 2,
};

/* beamd's default caps on what a peer sends (--max-frame changes the first). */
#define BEAM_DEFAULT_MAX_FRAME (256u << 20) /* bytes in one frame body */
#define BEAM_DEFAULT_MAX_DEPTH 32           /* nesting of arrays/maps */
#define BEAM_DEFAULT_MAX_ITEMS (4u << 20)   /* array elements + map pairs in one frame */
#define BEAM_DEFAULT_MAX_STR (1u << 20)     /* bytes in one str */

/* Ids' sizes in bytes; each id starts with its home node's 4-byte index
 * (docs/DESIGN.md, Ids). */
#define BEAM_NODE_ID_SIZE 28
#define BEAM_JOB_ID_SIZE 4
#define BEAM_ACTOR_ID_SIZE 16
#define BEAM_OBJECT_ID_SIZE 28
#define BEAM_PG_ID_SIZE 18

/* An object's status, as `get` replies and `task_done` carry it. */
enum {
    BEAM_OBJ_OK = 0,
    BEAM_OBJ_TASK_ERROR = 1,
    BEAM_OBJ_ACTOR_DIED = 2,
    BEAM_OBJ_LOST = 3,
    BEAM_OBJ_UNSCHEDULABLE = 4, /* the actor can never be placed (ActorUnschedulableError) */
    BEAM_OBJ_ACTOR_INIT_FAILED = 5, /* its constructor raised (ActorDiedError, actor_init_failed) */
    BEAM_OBJ_ACTOR_UNAVAILABLE = 6, /* sent to a worker that died, the actor restarting (ActorUnavailableError) */
    BEAM_OBJ_WORKER_CRASHED = 7,    /* a task's worker died, no retry left (WorkerCrashedError) */
    BEAM_OBJ_OWNER_DIED = 8,        /* the client that made its id ended before it was ready (OwnerDiedError) */
};

/* A submit with `push` gets its result pushed (`result {obj, status, data}`)
 * when its value is at most this many bytes; a larger one is pushed as
 * `result {obj}` (fetch it with a get). Bounds what a caller is sent unasked
 * per ref it has not yet asked for (a ref only passed on costs no more than
 * this), and keeps every push a frame that _beam's 64 KiB read stage holds
 * whole; above it a get's round trip costs less than the copy. */
#define BEAM_PUSH_MAX_DATA (64u << 10)

/* Resource amounts travel as numbers and are held in units of 1/10000
 * (Ray's RESOURCE_UNIT_SCALING). Ray's bound on one resource quantity
 * (ray_constants.MAX_RESOURCE_QUANTITY, 100e12): every amount and every
 * total stays at most this, so no sum of a pool's or a demand's entries can
 * overflow int64. */
#define BEAM_RES_UNIT 10000
#define BEAM_RES_MAX_QUANTITY 100e12

#endif
