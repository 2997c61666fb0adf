/* auth.h — the cluster's secret and what is proved with it (layer 0: pure,
 * no sockets): the token file, the HMAC-SHA256 challenge and response both
 * ways, the two secretstream keys each link derives from the token and both
 * nonces, and sealing/opening one frame body over the caller's buffers.
 *
 * The handshake (link.c carries the messages):
 *   head   -> member  challenge {nonce_h}
 *   member -> head    auth {nonce_m, mac_m, stream_m}   (beam_auth_answer)
 *   head   -> member  auth_ok {nonce_h, mac_h, stream_h} (beam_auth_check_answer)
 *   member            checks auth_ok                    (beam_auth_check_ok)
 * mac_m = HMAC(token, "beam-node-v1" nonce_h nonce_m),
 * mac_h = HMAC(token, "beam-head-v1" nonce_m nonce_h); each direction's
 * stream key is BLAKE2b(token; label, nonce_h, nonce_m), so every link gets
 * fresh keys and a recorded handshake or frame is worthless on another one.
 * Every function returns 0 or a negative errno. */
#ifndef BEAM_AUTH_H
#define BEAM_AUTH_H

#include <sodium.h>
#include <stddef.h>
#include <stdint.h>

#define BEAM_TOKEN_BYTES 32
#define BEAM_AUTH_NONCE_BYTES 32
#define BEAM_AUTH_MAC_BYTES crypto_auth_hmacsha256_BYTES
#define BEAM_AUTH_HEADER_BYTES crypto_secretstream_xchacha20poly1305_HEADERBYTES
/* what sealing adds to a body */
#define BEAM_AUTH_SEAL_BYTES crypto_secretstream_xchacha20poly1305_ABYTES

enum { BEAM_AUTH_HEAD = 0, BEAM_AUTH_MEMBER = 1 };

/* One side of one link's handshake and, after it, its sealed streams. */
typedef struct beam_auth_s {
    unsigned char token[BEAM_TOKEN_BYTES];
    int side;
    unsigned char my_nonce[BEAM_AUTH_NONCE_BYTES], peer_nonce[BEAM_AUTH_NONCE_BYTES];
    crypto_secretstream_xchacha20poly1305_state tx, rx;
    int tx_on, rx_on; /* sealing what is sent / opening what arrives */
} beam_auth_t;

/* Reads a token file (64 hex digits, trailing blanks allowed) into token.
 * 0, or -EINVAL / -errno with what is wrong in err. */
int beam_token_read(const char *path, unsigned char *token, char *err, size_t errlen);
/* Makes a new random token and writes it to path (mode 0600). 0 or -errno. */
int beam_token_create(const char *path, unsigned char *token, char *err, size_t errlen);

/* Starts one side with the token (copied) and a fresh nonce of its own
 * (a head's is its challenge: a->my_nonce). -ENOSYS if libsodium fails. */
int beam_auth_init(beam_auth_t *a, const unsigned char *token, int side);
/* Wipes the keys and the token. */
void beam_auth_clear(beam_auth_t *a);

/* Member, given the head's challenge nonce: its answer's mac and stream
 * header (nonce: a->my_nonce); sealing is on from here. */
int beam_auth_answer(beam_auth_t *a, const unsigned char *head_nonce, unsigned char *mac,
                     unsigned char *header);
/* Head, given a member's auth: -EACCES unless its mac proves the token for
 * this challenge (-EINVAL for a wrong-sized field); else both streams are
 * on and mac/header are the auth_ok's. */
int beam_auth_check_answer(beam_auth_t *a, const unsigned char *member_nonce, const unsigned char *peer_mac,
                           size_t mac_len, const unsigned char *peer_header, size_t header_len,
                           unsigned char *mac, unsigned char *header);
/* Member, given auth_ok: -EACCES unless the head proved the token (-EINVAL
 * for a wrong-sized field); else opening is on. */
int beam_auth_check_ok(beam_auth_t *a, const unsigned char *peer_mac, size_t mac_len,
                       const unsigned char *peer_header, size_t header_len);

/* Seals len bytes of plain into out (len + BEAM_AUTH_SEAL_BYTES bytes).
 * -EPERM before the handshake has turned sealing on. */
int beam_auth_seal(beam_auth_t *a, const unsigned char *plain, size_t len, unsigned char *out);
/* Opens len bytes sealed by the peer into out (len - BEAM_AUTH_SEAL_BYTES
 * bytes, *out_len). -EBADMSG for a frame the peer did not seal next in
 * order (forged, altered, replayed, reordered or cut). */
int beam_auth_open(beam_auth_t *a, const unsigned char *in, size_t len, unsigned char *out, size_t *out_len);

#endif
