/* auth.c — the token file, the HMAC handshake and the sealed streams (see
 * auth.h). No sockets: link.c carries what these compute. */
#define _GNU_SOURCE
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SS_KEYBYTES crypto_secretstream_xchacha20poly1305_KEYBYTES

/* ---------- the token file ---------- */

int beam_token_read(const char *path, unsigned char *token, char *err, size_t errlen)
{
    char hex[2 * BEAM_TOKEN_BYTES + 8] = {0};
    FILE *f = fopen(path, "r");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "cannot read the token file %s: %s", path, strerror(e));
        return -e;
    }
    size_t n = fread(hex, 1, sizeof hex - 1, f);
    fclose(f);
    while (n > 0 && (hex[n - 1] == '\n' || hex[n - 1] == ' '))
        hex[--n] = '\0';
    size_t got = 0;
    if (n != 2 * BEAM_TOKEN_BYTES ||
        sodium_hex2bin(token, BEAM_TOKEN_BYTES, hex, n, NULL, &got, NULL) != 0 || got != BEAM_TOKEN_BYTES) {
        snprintf(err, errlen, "the token file %s must hold %d hex digits", path, 2 * BEAM_TOKEN_BYTES);
        return -EINVAL;
    }
    return 0;
}

int beam_token_create(const char *path, unsigned char *token, char *err, size_t errlen)
{
    char hex[2 * BEAM_TOKEN_BYTES + 2];
    int rc = 0;
    if (sodium_init() < 0) {
        snprintf(err, errlen, "libsodium failed to start");
        return -ENOSYS;
    }
    randombytes_buf(token, BEAM_TOKEN_BYTES);
    sodium_bin2hex(hex, sizeof hex, token, BEAM_TOKEN_BYTES);
    size_t n = strlen(hex);
    hex[n++] = '\n';
    errno = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || fchmod(fd, 0600) != 0 || write(fd, hex, n) != (ssize_t)n) {
        rc = errno ? -errno : -EIO;
        snprintf(err, errlen, "cannot write the token file %s: %s", path, strerror(-rc));
    }
    if (fd >= 0)
        close(fd);
    sodium_memzero(hex, sizeof hex);
    return rc;
}

/* ---------- the handshake ---------- */

static void mac(const beam_auth_t *a, const char *label, const unsigned char *x, const unsigned char *y,
                unsigned char *out)
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, a->token, BEAM_TOKEN_BYTES);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label));
    crypto_auth_hmacsha256_update(&st, x, BEAM_AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_update(&st, y, BEAM_AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_final(&st, out);
}

static int mac_ok(const beam_auth_t *a, const char *label, const unsigned char *x, const unsigned char *y,
                  const unsigned char *got, size_t len)
{
    unsigned char want[BEAM_AUTH_MAC_BYTES];
    if (len != sizeof want)
        return -EINVAL;
    mac(a, label, x, y, want);
    return sodium_memcmp(want, got, sizeof want) == 0 ? 0 : -EACCES;
}

/* One direction's stream key: BLAKE2b-256 keyed with the token over the
 * label and both nonces (the head's first). */
static void stream_key(const beam_auth_t *a, const char *label, unsigned char *key)
{
    const unsigned char *head = a->side == BEAM_AUTH_HEAD ? a->my_nonce : a->peer_nonce;
    const unsigned char *member = a->side == BEAM_AUTH_HEAD ? a->peer_nonce : a->my_nonce;
    crypto_generichash_state st;
    crypto_generichash_init(&st, a->token, BEAM_TOKEN_BYTES, SS_KEYBYTES);
    crypto_generichash_update(&st, (const unsigned char *)label, strlen(label));
    crypto_generichash_update(&st, head, BEAM_AUTH_NONCE_BYTES);
    crypto_generichash_update(&st, member, BEAM_AUTH_NONCE_BYTES);
    crypto_generichash_final(&st, key, SS_KEYBYTES);
}

static void start_push(beam_auth_t *a, const char *label, unsigned char *header)
{
    unsigned char key[SS_KEYBYTES];
    stream_key(a, label, key);
    crypto_secretstream_xchacha20poly1305_init_push(&a->tx, header, key);
    sodium_memzero(key, sizeof key);
    a->tx_on = 1;
}

static int start_pull(beam_auth_t *a, const char *label, const unsigned char *header)
{
    unsigned char key[SS_KEYBYTES];
    stream_key(a, label, key);
    int rc = crypto_secretstream_xchacha20poly1305_init_pull(&a->rx, header, key) == 0 ? 0 : -EINVAL;
    sodium_memzero(key, sizeof key);
    a->rx_on = rc == 0;
    return rc;
}

int beam_auth_init(beam_auth_t *a, const unsigned char *token, int side)
{
    if (sodium_init() < 0)
        return -ENOSYS;
    memset(a, 0, sizeof *a);
    memcpy(a->token, token, BEAM_TOKEN_BYTES);
    a->side = side;
    randombytes_buf(a->my_nonce, BEAM_AUTH_NONCE_BYTES);
    return 0;
}

void beam_auth_clear(beam_auth_t *a)
{
    sodium_memzero(a, sizeof *a);
}

int beam_auth_answer(beam_auth_t *a, const unsigned char *head_nonce, unsigned char *out_mac,
                     unsigned char *header)
{
    if (a->side != BEAM_AUTH_MEMBER || a->tx_on)
        return -EPROTO;
    memcpy(a->peer_nonce, head_nonce, BEAM_AUTH_NONCE_BYTES);
    mac(a, "beam-node-v1", a->peer_nonce, a->my_nonce, out_mac);
    start_push(a, "beam-m2h-v1", header);
    return 0;
}

int beam_auth_check_answer(beam_auth_t *a, const unsigned char *member_nonce, const unsigned char *peer_mac,
                           size_t mac_len, const unsigned char *peer_header, size_t header_len,
                           unsigned char *out_mac, unsigned char *header)
{
    if (a->side != BEAM_AUTH_HEAD || a->rx_on)
        return -EPROTO;
    memcpy(a->peer_nonce, member_nonce, BEAM_AUTH_NONCE_BYTES);
    int rc = mac_ok(a, "beam-node-v1", a->my_nonce, a->peer_nonce, peer_mac, mac_len);
    if (rc == 0 && header_len != BEAM_AUTH_HEADER_BYTES)
        rc = -EINVAL;
    if (rc == 0)
        rc = start_pull(a, "beam-m2h-v1", peer_header);
    if (rc < 0)
        return rc;
    start_push(a, "beam-h2m-v1", header);
    mac(a, "beam-head-v1", a->peer_nonce, a->my_nonce, out_mac);
    return 0;
}

int beam_auth_check_ok(beam_auth_t *a, const unsigned char *peer_mac, size_t mac_len,
                       const unsigned char *peer_header, size_t header_len)
{
    if (a->side != BEAM_AUTH_MEMBER || !a->tx_on || a->rx_on)
        return -EPROTO;
    int rc = mac_ok(a, "beam-head-v1", a->my_nonce, a->peer_nonce, peer_mac, mac_len);
    if (rc == 0 && header_len != BEAM_AUTH_HEADER_BYTES)
        rc = -EINVAL;
    return rc < 0 ? rc : start_pull(a, "beam-h2m-v1", peer_header);
}

/* ---------- sealed frames ---------- */

int beam_auth_seal(beam_auth_t *a, const unsigned char *plain, size_t len, unsigned char *out)
{
    if (!a->tx_on)
        return -EPERM;
    crypto_secretstream_xchacha20poly1305_push(&a->tx, out, NULL, plain, len, NULL, 0,
                                               crypto_secretstream_xchacha20poly1305_TAG_MESSAGE);
    return 0;
}

int beam_auth_open(beam_auth_t *a, const unsigned char *in, size_t len, unsigned char *out, size_t *out_len)
{
    unsigned long long plen;
    unsigned char tag;
    if (!a->rx_on)
        return -EPERM;
    if (len < BEAM_AUTH_SEAL_BYTES ||
        crypto_secretstream_xchacha20poly1305_pull(&a->rx, out, &plen, &tag, in, len, NULL, 0) != 0 ||
        tag != crypto_secretstream_xchacha20poly1305_TAG_MESSAGE)
        return -EBADMSG;
    *out_len = (size_t)plen;
    return 0;
}
