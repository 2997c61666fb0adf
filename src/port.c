/* port.c — answering a client through its kind's operations. */
#include "port.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int beam_port_closing(const beam_port_t *p)
{
    return p->ops->closing(p);
}

int beam_port_send(beam_port_t *p, char *buf, size_t len)
{
    int rc = !buf ? -ENOMEM : beam_port_closing(p) ? -EPIPE : 0;
    if (rc < 0) {
        free(buf);
        return rc;
    }
    return p->ops->send(p, buf, len);
}

int beam_port_send_enc(beam_port_t *p, beam_enc_t *enc)
{
    size_t len;
    if (enc->failed) {
        beam_enc_destroy(enc);
        beam_port_close(p, "out of memory encoding a message");
        return -ENOMEM;
    }
    if (p->ops->send_enc && !p->ops->closing(p))
        return p->ops->send_enc(p, enc);
    char *buf = beam_enc_take(enc, &len);
    beam_enc_destroy(enc);
    return beam_port_send(p, buf, len);
}

void beam_port_send_error_push(beam_port_t *p, const char *message)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_error_push(&enc, message);
    beam_enc_end(&enc, 0);
    beam_port_send_enc(p, &enc);
}

void beam_port_reply_error(beam_port_t *p, uint64_t msgid, const char *code, const char *fmt, ...)
{
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    if (msgid == 0) {
        char text[600];
        snprintf(text, sizeof text, "%s: %s", code, message);
        beam_port_send_error_push(p, text);
        return;
    }
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_reply_error(&enc, msgid, code, message);
    beam_enc_end(&enc, 0);
    beam_port_send_enc(p, &enc);
}

void beam_port_reply_empty(beam_port_t *p, uint64_t msgid)
{
    if (msgid == 0)
        return;
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_reply_ok(&enc, msgid);
    msgpack_pack_map(&enc.pk, 0);
    beam_enc_end(&enc, 0);
    beam_port_send_enc(p, &enc);
}

void beam_port_send_log(beam_port_t *p, int stream, const char *text, size_t len)
{
    if (!beam_port_closing(p))
        p->ops->send_log(p, stream, text, len);
}

void beam_port_close(beam_port_t *p, const char *why)
{
    p->ops->close(p, why);
}

int beam_port_hold(beam_held_t **set, const char *id, size_t len)
{
    beam_held_t *h = NULL;
    HASH_FIND(hh, *set, id, len, h);
    if (h)
        return 0;
    h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    memcpy(h->id, id, len);
    HASH_ADD(hh, *set, id, len, h);
    return 1;
}

int beam_port_unhold(beam_held_t **set, const char *id, size_t len)
{
    beam_held_t *h = NULL;
    HASH_FIND(hh, *set, id, len, h);
    if (!h)
        return 0;
    HASH_DEL(*set, h);
    free(h);
    return 1;
}
