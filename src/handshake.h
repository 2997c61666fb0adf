/* handshake.h — one side of a link's handshake and, after it, its sealing
 * (docs/PROTOCOL.md, "The cluster link"), with no I/O: the messages of the
 * handshake (challenge; auth, auth_ok with their nonces, MACs and stream
 * headers: auth.h computes them) read and written as beam messages, in the
 * order each side must see them, then every frame body sealed and opened
 * with the secretstreams the handshake keyed. The link (link.h) feeds it
 * what arrives before the handshake is through and sends what it answers;
 * it knows nothing of sockets. Functions return 0 or a negative errno. */
#ifndef BEAM_HANDSHAKE_H
#define BEAM_HANDSHAKE_H

#include <stddef.h>

#include "auth.h"
#include "beam/codec.h"

/* Where a side stands: a head waits for the member's auth (after its
 * challenge), a member for the challenge and then the head's auth_ok. */
enum { BEAM_HS_WAIT_AUTH, BEAM_HS_WAIT_CHALLENGE, BEAM_HS_WAIT_AUTH_OK, BEAM_HS_DONE };

typedef struct beam_handshake_s {
    beam_auth_t auth;
    int state; /* BEAM_HS_* */
} beam_handshake_t;

/* side: BEAM_AUTH_HEAD or BEAM_AUTH_MEMBER; token is copied. 0, or -ENOSYS
 * when libsodium fails. */
int beam_handshake_init(beam_handshake_t *hs, const unsigned char *token, int side);
/* Wipes the keys and the token. */
void beam_handshake_clear(beam_handshake_t *hs);
/* Head: its challenge, packed into out (initialised here; the caller sends
 * it in the clear and destroys it). */
void beam_handshake_challenge(beam_handshake_t *hs, beam_enc_t *out);
/* One message m while the handshake is not through. 0: taken, and when
 * *answer is set, out (initialised here) holds what to send back in the
 * clear (auth, auth_ok), which the caller sends and destroys;
 * BEAM_HS_DONE tells the caller it is through (beam_handshake_done). Else
 * the link must close, why saying so (a fixed string): -EACCES, the peer
 * did not prove it holds the token; -EPROTO, a message out of place or
 * malformed. */
int beam_handshake_take(beam_handshake_t *hs, const beam_msg_t *m, beam_enc_t *out, int *answer, const char **why);
/* 1 once the handshake is through (both ways sealed). */
int beam_handshake_done(const beam_handshake_t *hs);

/* A new frame (header and body, malloc'd, the caller's) holding plain's body
 * sealed, plain freed; plain itself when sealing is not on yet; NULL when
 * out of memory (plain freed). */
char *beam_handshake_seal(beam_handshake_t *hs, char *plain, size_t len, size_t *out_len);
/* Opens a frame body the peer sealed into *plain (malloc'd, the caller
 * frees it; *plain NULL and frame untouched while opening is not on).
 * -EBADMSG: not sealed by the peer next in order (forged, replayed,
 * reordered or cut); -ENOMEM. */
int beam_handshake_open(beam_handshake_t *hs, const char *frame, size_t len, unsigned char **plain, size_t *plain_len);

#endif
