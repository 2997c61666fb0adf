/* calls.c — an actor's call queue and sent list, and a call's completion. */
#include "calls.h"

#include <stdlib.h>
#include <string.h>

static void call_free(beam_call_t *call)
{
    free(call->method);
    beam_buf_unref(call->args_buf);
    beam_refs_free(&call->refs);
    free(call);
}

beam_call_t *beam_call_new(beam_node_t *node, const char *obj, char *method, beam_buf_t *args_buf,
                           const char *args, size_t args_len, beam_refs_t *refs)
{
    beam_call_t *call = calloc(1, sizeof *call);
    if (!call) {
        free(method);
        beam_buf_unref(args_buf);
        beam_refs_free(refs);
        beam_object_t *o = beam_object_find(node, obj);
        if (o)
            beam_object_fail(node, o, BEAM_OBJ_LOST, "beamd ran out of memory queueing the call");
        return NULL;
    }
    memcpy(call->obj, obj, BEAM_OBJECT_ID_SIZE);
    call->method = method;
    call->args = (char *)args;
    call->args_len = args_len;
    call->args_buf = args_buf;
    call->refs = *refs;
    memset(refs, 0, sizeof *refs);
    beam_refs_pin(node, &call->refs);
    return call;
}

void beam_call_complete(beam_node_t *node, beam_call_t *call, int status, beam_buf_t *buf, const char *data,
                        size_t len, beam_refs_t *refs)
{
    beam_object_t *o = beam_object_find(node, call->obj);
    if (o)
        beam_object_complete_buf(node, o, status, buf, data, len, refs);
    else {
        beam_buf_unref(buf);
        if (refs)
            beam_refs_free(refs);
    }
    beam_refs_unpin(node, &call->refs);
    call_free(call);
}

void beam_call_fail(beam_node_t *node, beam_call_t *call, int status, const char *message)
{
    beam_object_t *o = beam_object_find(node, call->obj);
    if (o)
        beam_object_fail(node, o, status, message);
    beam_refs_unpin(node, &call->refs);
    call_free(call);
}

/* Appends call to the list (head, tail). */
static void append(beam_call_t **head, beam_call_t **tail, beam_call_t *call)
{
    call->next = NULL;
    if (*tail)
        (*tail)->next = call;
    else
        *head = call;
    *tail = call;
}

void beam_callq_push(beam_callq_t *q, beam_call_t *call)
{
    append(&q->queue, &q->queue_tail, call);
}

void beam_callq_send(beam_callq_t *q, beam_port_t *worker, beam_call_t *call)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_push(&enc, "call", 3);
    beam_pack_key(&enc.pk, "obj");
    beam_pack_bin(&enc.pk, call->obj, BEAM_OBJECT_ID_SIZE);
    beam_pack_key(&enc.pk, "method");
    beam_pack_str(&enc.pk, call->method);
    beam_pack_key(&enc.pk, "args");
    beam_pack_bin_buf(&enc, call->args_buf, call->args, call->args_len);
    beam_enc_end(&enc, 0);
    beam_port_send_enc(worker, &enc);
    /* the worker has them now (or the write holds its own reference); keep
     * only what completion needs, unless it may be sent again */
    if (!q->keep_args) {
        beam_buf_unref(call->args_buf);
        call->args_buf = NULL;
        call->args = NULL;
        call->args_len = 0;
    }
    append(&q->sent, &q->sent_tail, call);
}

void beam_callq_flush(beam_callq_t *q, beam_port_t *worker)
{
    while (q->queue && worker && !beam_port_closing(worker)) {
        beam_call_t *call = q->queue;
        q->queue = call->next;
        if (!q->queue)
            q->queue_tail = NULL;
        beam_callq_send(q, worker, call);
    }
}

beam_call_t *beam_callq_take_sent(beam_callq_t *q, const char *obj)
{
    beam_call_t *prev = NULL, *call = q->sent;
    while (call && memcmp(call->obj, obj, BEAM_OBJECT_ID_SIZE) != 0) {
        prev = call;
        call = call->next;
    }
    if (!call)
        return NULL;
    if (prev)
        prev->next = call->next;
    else
        q->sent = call->next;
    if (q->sent_tail == call)
        q->sent_tail = prev;
    return call;
}

void beam_callq_push_sent(beam_callq_t *q, beam_call_t *call)
{
    append(&q->sent, &q->sent_tail, call);
}

void beam_callq_retry_sent(beam_node_t *node, beam_callq_t *q, int retries, int status, const char *message,
                           int keep_local)
{
    beam_call_t *sent = q->sent, *again = NULL, *again_tail = NULL;
    q->sent = q->sent_tail = NULL;
    while (sent) {
        beam_call_t *call = sent;
        sent = call->next;
        if (keep_local && call->local)
            beam_callq_push_sent(q, call);
        else if (!call->local && q->keep_args && (retries < 0 || call->tries < retries)) {
            call->tries++;
            append(&again, &again_tail, call);
        } else
            beam_call_fail(node, call, status, message);
    }
    if (again) { /* before what was queued: they were sent first */
        again_tail->next = q->queue;
        if (!q->queue)
            q->queue_tail = again_tail;
        q->queue = again;
    }
}

void beam_callq_fail_sent(beam_node_t *node, beam_callq_t *q, int status, const char *message)
{
    beam_call_t *sent = q->sent;
    q->sent = q->sent_tail = NULL;
    while (sent) {
        beam_call_t *call = sent;
        sent = call->next;
        beam_call_fail(node, call, status, message);
    }
}

void beam_callq_fail_all(beam_node_t *node, beam_callq_t *q, int status, const char *message, int keep_local)
{
    beam_call_t *sent = q->sent;
    q->sent = q->sent_tail = NULL;
    while (sent) {
        beam_call_t *call = sent;
        sent = call->next;
        if (keep_local && call->local)
            beam_callq_push_sent(q, call);
        else
            beam_call_fail(node, call, status, message);
    }
    while (q->queue) {
        beam_call_t *call = q->queue;
        q->queue = call->next;
        beam_call_fail(node, call, status, message);
    }
    q->queue_tail = NULL;
}

void beam_callq_destroy(beam_callq_t *q)
{
    beam_call_t *lists[2] = {q->queue, q->sent};
    for (int i = 0; i < 2; i++)
        while (lists[i]) {
            beam_call_t *call = lists[i];
            lists[i] = call->next;
            call_free(call);
        }
    memset(q, 0, sizeof *q);
}

int beam_callq_idle(const beam_callq_t *q)
{
    return !q->queue && !q->sent;
}

uint32_t beam_calls_count(const beam_call_t *c)
{
    uint32_t n = 0;
    for (; c; c = c->next)
        n++;
    return n;
}
