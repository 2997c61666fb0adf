/* handshake.c — one side of a link's handshake and its sealing, no I/O
 * (handshake.h). */
#include "handshake.h"

#include <errno.h>
#include <stdlib.h>

int beam_handshake_init(beam_handshake_t *hs, const unsigned char *token, int side)
{
    hs->state = side == BEAM_AUTH_HEAD ? BEAM_HS_WAIT_AUTH : BEAM_HS_WAIT_CHALLENGE;
    return beam_auth_init(&hs->auth, token, side);
}

void beam_handshake_clear(beam_handshake_t *hs)
{
    beam_auth_clear(&hs->auth);
}

int beam_handshake_done(const beam_handshake_t *hs)
{
    return hs->state == BEAM_HS_DONE;
}

/* challenge {nonce}; auth and auth_ok {nonce, mac, stream}: stream is the
 * sender's secretstream header for what it sends next. */
static void pack_nonce_push(beam_handshake_t *hs, beam_enc_t *out, const char *op, const unsigned char *mac,
                            const unsigned char *header)
{
    beam_enc_init(out);
    beam_enc_push(out, op, mac ? 3 : 1);
    beam_pack_key(&out->pk, "nonce");
    beam_pack_bin(&out->pk, hs->auth.my_nonce, BEAM_AUTH_NONCE_BYTES);
    if (mac) {
        beam_pack_key(&out->pk, "mac");
        beam_pack_bin(&out->pk, mac, BEAM_AUTH_MAC_BYTES);
        beam_pack_key(&out->pk, "stream");
        beam_pack_bin(&out->pk, header, BEAM_AUTH_HEADER_BYTES);
    }
    beam_enc_end(out, 0);
}

void beam_handshake_challenge(beam_handshake_t *hs, beam_enc_t *out)
{
    pack_nonce_push(hs, out, "challenge", NULL, NULL);
}

/* A handshake field's bytes (NULL, *len 0 when absent or not a bin): their
 * sizes are auth.c's to check, which tells a wrong size from a wrong MAC. */
static const unsigned char *hs_bin(const beam_msg_t *m, const char *key, uint32_t *len)
{
    const char *v = NULL;
    *len = 0;
    if (beam_field_bin(&m->params, key, &v, len) != 0)
        *len = 0;
    return *len ? (const unsigned char *)v : NULL;
}

int beam_handshake_take(beam_handshake_t *hs, const beam_msg_t *m, beam_enc_t *out, int *answer, const char **why)
{
    static const char *const want[] = {[BEAM_HS_WAIT_AUTH] = "auth", [BEAM_HS_WAIT_CHALLENGE] = "challenge",
                                       [BEAM_HS_WAIT_AUTH_OK] = "auth_ok"};
    unsigned char mac[BEAM_AUTH_MAC_BYTES], header[BEAM_AUTH_HEADER_BYTES];
    uint32_t nlen, mlen, hlen;
    int head = hs->auth.side == BEAM_AUTH_HEAD;
    *answer = 0;
    if (hs->state == BEAM_HS_DONE) {
        *why = "a handshake message after the handshake";
        return -EPROTO;
    }
    const unsigned char *nonce = hs_bin(m, "nonce", &nlen), *peer_mac = hs_bin(m, "mac", &mlen);
    const unsigned char *peer_header = hs_bin(m, "stream", &hlen);
    int rc = m->type == BEAM_MSG_PUSH && beam_str_eq(m->op, m->op_len, want[hs->state]) &&
                     (nlen == BEAM_AUTH_NONCE_BYTES || hs->state == BEAM_HS_WAIT_AUTH_OK)
                 ? 0
                 : -EACCES;
    if (hs->state == BEAM_HS_WAIT_CHALLENGE) {
        if (rc < 0 || beam_auth_answer(&hs->auth, nonce, mac, header) < 0) {
            *why = "expected a challenge from the head";
            return -EPROTO;
        }
        pack_nonce_push(hs, out, "auth", mac, header);
        *answer = 1;
        hs->state = BEAM_HS_WAIT_AUTH_OK;
        return 0;
    }
    if (rc == 0)
        rc = head ? beam_auth_check_answer(&hs->auth, nonce, peer_mac, mlen, peer_header, hlen, mac, header)
                  : beam_auth_check_ok(&hs->auth, peer_mac, mlen, peer_header, hlen);
    if (rc == -EINVAL && mlen == BEAM_AUTH_MAC_BYTES) {
        *why = head ? "auth without a stream header" : "auth_ok without a stream header";
        return -EPROTO;
    }
    if (rc < 0) {
        *why = head ? "authentication failed" : "the head failed authentication";
        return -EACCES;
    }
    if (head) { /* the member opens what follows with this header */
        pack_nonce_push(hs, out, "auth_ok", mac, header);
        *answer = 1;
    }
    hs->state = BEAM_HS_DONE;
    return 0;
}

char *beam_handshake_seal(beam_handshake_t *hs, char *plain, size_t len, size_t *out_len)
{
    if (!hs->auth.tx_on || !plain) {
        *out_len = len;
        return plain;
    }
    size_t body = len - BEAM_FRAME_HEADER, clen = body + BEAM_AUTH_SEAL_BYTES;
    char *out = clen <= UINT32_MAX ? malloc(BEAM_FRAME_HEADER + clen) : NULL;
    if (out && beam_auth_seal(&hs->auth, (const unsigned char *)plain + BEAM_FRAME_HEADER, body,
                              (unsigned char *)out + BEAM_FRAME_HEADER) == 0) {
        beam_put_u32be(out, (uint32_t)clen);
        *out_len = BEAM_FRAME_HEADER + clen;
    } else {
        free(out);
        out = NULL;
    }
    free(plain);
    return out;
}

int beam_handshake_open(beam_handshake_t *hs, const char *frame, size_t len, unsigned char **plain, size_t *plain_len)
{
    *plain = NULL;
    if (!hs->auth.rx_on)
        return 0;
    unsigned char *p = len >= BEAM_AUTH_SEAL_BYTES ? malloc(len) : NULL;
    if (!p)
        return len >= BEAM_AUTH_SEAL_BYTES ? -ENOMEM : -EBADMSG;
    if (beam_auth_open(&hs->auth, (const unsigned char *)frame, len, p, plain_len) < 0) {
        free(p);
        return -EBADMSG;
    }
    *plain = p;
    return 0;
}
