/* log.c — timestamped log lines on stderr. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int log_level = BEAM_LOG_INFO;

void beam_log_set_level(int level)
{
    log_level = level;
}

int beam_log_parse_level(const char *name)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

void beam_log(int level, const char *fmt, ...)
{
    static const char *tags[] = {"E", "W", "I", "D"};
    if (level > log_level)
        return;
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char line[4096];
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld beamd %s ", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, tags[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
}
