/* gpu.c — GPU discovery: CUDA_VISIBLE_DEVICES, then the NVIDIA driver's
 * /proc entries, then none. */
#include "gpu.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int from_visible_devices(const char *v, char ids[][BEAM_GPU_ID_LEN], int max)
{
    int n = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", v);
    if (strcmp(buf, "NoDevFiles") == 0)
        return 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && n < max;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (*tok)
            snprintf(ids[n++], BEAM_GPU_ID_LEN, "%s", tok);
    }
    return n;
}

int beam_gpu_detect(char ids[][BEAM_GPU_ID_LEN], int max)
{
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (visible)
        return from_visible_devices(visible, ids, max);
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    if (n > max)
        n = max;
    for (int i = 0; i < n; i++)
        snprintf(ids[i], BEAM_GPU_ID_LEN, "%d", i);
    return n;
}
