/* log.h — the daemon's log: timestamped lines on stderr, filtered by level. */
#ifndef BEAM_LOG_H
#define BEAM_LOG_H

enum { BEAM_LOG_ERROR = 0, BEAM_LOG_WARN = 1, BEAM_LOG_INFO = 2, BEAM_LOG_DEBUG = 3 };

void beam_log_set_level(int level);
/* Parses "error", "warn", "info" or "debug"; returns the level or -1. */
int beam_log_parse_level(const char *name);
void beam_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
