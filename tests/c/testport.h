/* testport.h — a port (src/port.h) for the tables' unit tests: no socket.
 * Every frame sent to it is parsed with the codec and recorded (op, msgid,
 * whether it is an error reply); log lines are counted; close marks it
 * closing at once (the test plays the session). */
#ifndef BEAM_TESTPORT_H
#define BEAM_TESTPORT_H

#include <stdlib.h>
#include <string.h>

#include "port.h"

#define TPORT_MAX 64

typedef struct tport_s {
    beam_port_t port;
    int closing;
    int n;                      /* frames recorded */
    char op[TPORT_MAX][24];     /* a push's or request's op, "reply" for a reply */
    uint64_t msgid[TPORT_MAX];
    int error[TPORT_MAX];       /* a reply with an error */
    char text[TPORT_MAX][160];  /* a reply's error code, or an `error` push's message */
    int logs;
    const char *close_why;
} tport_t;

static int tport_send(beam_port_t *p, char *buf, size_t len)
{
    tport_t *t = (tport_t *)p;
    beam_msg_t msg;
    char err[160];
    assert_true(len > BEAM_FRAME_HEADER);
    if (beam_msg_parse(buf + BEAM_FRAME_HEADER, len - BEAM_FRAME_HEADER, &p->node->limits, &msg, err,
                       sizeof err) != 0)
        fail_msg("a table sent a frame that does not parse: %s", err);
    assert_true(t->n < TPORT_MAX);
    int i = t->n++;
    t->msgid[i] = msg.msgid;
    t->text[i][0] = '\0';
    if (msg.type == BEAM_MSG_REPLY) {
        snprintf(t->op[i], sizeof t->op[i], "reply");
        t->error[i] = msg.error.type != MSGPACK_OBJECT_NIL;
        const char *code;
        uint32_t n;
        if (t->error[i] && beam_field_str(&msg.error, "code", &code, &n) == 0)
            snprintf(t->text[i], sizeof t->text[i], "%.*s", (int)n, code);
    } else {
        snprintf(t->op[i], sizeof t->op[i], "%.*s", (int)msg.op_len, msg.op);
        t->error[i] = 0;
        const char *m;
        uint32_t n;
        if (beam_field_str(&msg.params, "message", &m, &n) == 0)
            snprintf(t->text[i], sizeof t->text[i], "%.*s", (int)n, m);
    }
    beam_msg_destroy(&msg);
    free(buf);
    return 0;
}

static void tport_send_log(beam_port_t *p, int stream, const char *text, size_t len)
{
    (void)stream;
    (void)text;
    (void)len;
    ((tport_t *)p)->logs++;
}

static void tport_close(beam_port_t *p, const char *why)
{
    tport_t *t = (tport_t *)p;
    t->closing = 1;
    t->close_why = why;
}

static int tport_closing(const beam_port_t *p)
{
    return ((const tport_t *)p)->closing;
}

static const beam_port_ops_t tport_ops = {tport_send, tport_send_log, tport_close, tport_closing, NULL};

static void tport_init(tport_t *t, beam_node_t *node, uint32_t id, int role)
{
    memset(t, 0, sizeof *t);
    t->port.ops = &tport_ops;
    t->port.node = node;
    t->port.id = id;
    t->port.job = id;
    t->port.role = role;
    t->port.member = node->self;
}

/* How many frames with this op it got. */
static int tport_count(const tport_t *t, const char *op)
{
    int n = 0;
    for (int i = 0; i < t->n; i++)
        n += strcmp(t->op[i], op) == 0;
    return n;
}

/* Drops what it holds (its hold sets), as a session's end does. */
static void tport_free_holds(tport_t *t)
{
    beam_held_t *h, *tmp;
    HASH_ITER(hh, t->port.held_objects, h, tmp) {
        HASH_DEL(t->port.held_objects, h);
        free(h);
    }
    HASH_ITER(hh, t->port.held_actors, h, tmp) {
        HASH_DEL(t->port.held_actors, h);
        free(h);
    }
}

#endif
