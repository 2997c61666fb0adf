/* spawn.c — the string arrays a worker is started with (spawn.h). */
#include "spawn.h"

#include <stdlib.h>

void beam_strv_free(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}
