/* ids.c — id helpers: home node, hex, random bytes. */
#include "ids.h"

#include <uv.h>

uint32_t beam_id_home(const char *id)
{
    const unsigned char *p = (const unsigned char *)id;
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

void beam_id_hex(const char *id, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)id;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

int beam_random(void *buf, size_t n)
{
    return uv_random(NULL, NULL, buf, n, 0, NULL);
}
