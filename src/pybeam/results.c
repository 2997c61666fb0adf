/* results.c — the table of pushed results (results.h). */
#include "results.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

pb_result_t *pb_results_find(pb_results_t *t, const char *id)
{
    pb_result_t *e = NULL;
    HASH_FIND(hh, t->map, id, BEAM_OBJECT_ID_SIZE, e);
    return e;
}

int pb_results_expect(pb_results_t *t, const char *id)
{
    if (pb_results_find(t, id))
        return -EEXIST;
    pb_result_t *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    memcpy(e->id, id, BEAM_OBJECT_ID_SIZE);
    HASH_ADD(hh, t->map, id, BEAM_OBJECT_ID_SIZE, e);
    t->count++;
    t->pending++;
    return 0;
}

int pb_results_file(pb_results_t *t, const char *id, void *frame, int status, const char *data, uint32_t len)
{
    pb_result_t *e = pb_results_find(t, id);
    if (!e)
        return -ENOENT;
    if (e->state != PB_RESULT_EXPECTED)
        return -EALREADY;
    e->frame = frame;
    t->pending--;
    e->status = status;
    e->data = data;
    e->len = len;
    e->state = PB_RESULT_ARRIVED;
    t->filed++;
    t->failed += status > 0;
    return 0;
}

pb_result_t *pb_results_take(pb_results_t *t, const char *id)
{
    pb_result_t *e = pb_results_find(t, id);
    if (e) {
        HASH_DEL(t->map, e);
        t->count--;
        t->pending -= e->state == PB_RESULT_EXPECTED;
    }
    return e;
}

pb_result_t *pb_results_pop(pb_results_t *t)
{
    pb_result_t *e = t->map;
    if (e) {
        HASH_DEL(t->map, e);
        t->count--;
        t->pending -= e->state == PB_RESULT_EXPECTED;
    }
    return e;
}
