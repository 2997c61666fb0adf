/* ids.c — id helpers: home node, creator, sequence, hex, random bytes. */
#include "ids.h"

#include <uv.h>

uint32_t beam_id_home(const char *id)
{
    const unsigned char *p = (const unsigned char *)id;
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

int beam_id_made_by(const char *id, uint32_t node_index, uint32_t conn)
{
    return beam_id_home(id) == node_index && beam_id_home(id + 4) == conn;
}

uint64_t beam_object_seq(const char *obj)
{
    return ((uint64_t)beam_id_home(obj + 8) << 32) | beam_id_home(obj + 12);
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
