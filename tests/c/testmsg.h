/* testmsg.h — messages for the op-table tests (test_relay.c, test_shortcut.c):
 * an op's fields described once (name, kind, required), packed whole, with
 * one field left out, or with one field of the wrong type; the result is a
 * frame body the caller parses or hands on. */
#ifndef BEAM_TESTMSG_H
#define BEAM_TESTMSG_H

#include <stdlib.h>
#include <string.h>

#include "beam/codec.h"

typedef enum {
    TM_END,
    TM_VCONN,  /* uint 5 */
    TM_UINT,   /* uint 1 */
    TM_ZERO,   /* uint 0 */
    TM_BIN,
    TM_STR,
    TM_ACTOR,  /* bin16 */
    TM_OBJ,    /* bin28 */
    TM_NODE,   /* bin28 */
    TM_BOOL,
    TM_STRS,   /* ["a", "b"] */
    TM_OBJS,   /* [bin28] */
    TM_RES,    /* [["CPU", 10000]] */
    TM_ARRAY,  /* [] */
} tm_kind_t;

typedef struct tm_field_s {
    const char *name;
    tm_kind_t kind;
    int required;
} tm_field_t;

/* One op of a table: its name, whether it is a request (else a push), and
 * its fields, TM_END-terminated. */
typedef struct tm_op_s {
    const char *op;
    int request;
    tm_field_t fields[12];
} tm_op_t;

static void tm_pack(msgpack_packer *pk, tm_kind_t k)
{
    static const char id[28] = "0123456789abcdefghijklmnopq";
    switch (k) {
    case TM_VCONN: msgpack_pack_uint32(pk, 5); break;
    case TM_UINT: msgpack_pack_uint32(pk, 1); break;
    case TM_ZERO: msgpack_pack_uint32(pk, 0); break;
    case TM_BIN: beam_pack_bin(pk, "bytes", 5); break;
    case TM_STR: beam_pack_str(pk, "text"); break;
    case TM_ACTOR: beam_pack_bin(pk, id, 16); break;
    case TM_OBJ:
    case TM_NODE: beam_pack_bin(pk, id, 28); break;
    case TM_BOOL: msgpack_pack_true(pk); break;
    case TM_STRS:
        msgpack_pack_array(pk, 2);
        beam_pack_str(pk, "a");
        beam_pack_str(pk, "b");
        break;
    case TM_OBJS:
        msgpack_pack_array(pk, 1);
        beam_pack_bin(pk, id, 28);
        break;
    case TM_RES:
        msgpack_pack_array(pk, 1);
        msgpack_pack_array(pk, 2);
        beam_pack_str(pk, "CPU");
        msgpack_pack_uint32(pk, 10000);
        break;
    case TM_ARRAY: msgpack_pack_array(pk, 0); break;
    case TM_END: break;
    }
}

/* The op's message with every field but skip (-1: none), field wrong
 * (-1: none) packed as a float, which no row of beam's tables takes for an
 * id, a str, a bin, an int, a bool or an array. A frame body (malloc'd, the
 * caller frees it; the header stripped), *len its length. */
static char *tm_body(const tm_op_t *o, int skip, int wrong, size_t *len)
{
    beam_enc_t enc;
    size_t n = 0, all;
    while (o->fields[n].kind != TM_END)
        n++;
    beam_enc_init(&enc);
    if (o->request)
        beam_enc_request(&enc, 7, o->op, (uint32_t)(n - (skip >= 0)));
    else
        beam_enc_push(&enc, o->op, (uint32_t)(n - (skip >= 0)));
    for (size_t i = 0; i < n; i++) {
        if ((int)i == skip)
            continue;
        beam_pack_key(&enc.pk, o->fields[i].name);
        if ((int)i == wrong)
            msgpack_pack_double(&enc.pk, 0.5);
        else
            tm_pack(&enc.pk, o->fields[i].kind);
    }
    beam_enc_end(&enc, 0);
    char *frame = beam_enc_take(&enc, &all);
    beam_enc_destroy(&enc);
    if (!frame)
        return NULL;
    memmove(frame, frame + BEAM_FRAME_HEADER, all - BEAM_FRAME_HEADER);
    *len = all - BEAM_FRAME_HEADER;
    return frame;
}

#endif
