/*
 * log.h: line-oriented logging to stderr shared by every binary.
 *
 * Each line is "2026-11-21T23:59:01.123Z shard-server[1234] INFO message" and is written with a
 * single write() under a mutex, so lines from different threads never interleave. The initial level
 * comes from the LOG_LEVEL environment variable (debug|info|warn|error), default info.
 */
#ifndef DILOCO_LOG_H
#define DILOCO_LOG_H

enum { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_init(const char *process_name);
void log_set_level(int level);
int log_get_level(void);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
