/*
 * log.h: line-oriented logging to stderr shared by every binary.
 *
 * Each line is "2026-11-21T23:59:01.123Z shard-server[1234] INFO message" and is written with a
 * single write() under a mutex, so lines from different threads never interleave. The initial level
 * comes from the LOG_LEVEL environment variable (debug|info|warn|error), default info.
 *
 * A thread can send its lines elsewhere instead (log_use_sink): libdiloco points every thread that
 * works for a session, the host's thread while it is inside the library and the library's own, at
 * that session's sink, so a program embedding it decides where each session's messages go.
 */
#ifndef DILOCO_LOG_H
#define DILOCO_LOG_H

#include <pthread.h>

enum { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_init(const char *process_name);
void log_set_level(int level);
int log_get_level(void);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* fn gets each message (no timestamp, name or level prefix, no newline) at level >= the sink's level;
 * calls to fn are made one at a time (under mu). fn NULL: the usual stderr line, with the sink's level. */
typedef void log_sink_fn(void *ctx, int level, const char *message);
typedef struct log_sink {
    log_sink_fn *fn;
    void *ctx;
    int level;          /* lowest level passed on; < 0: the process's (log_set_level, LOG_LEVEL) */
    pthread_mutex_t mu; /* initialise with log_sink_init */
} log_sink;

void log_sink_init(log_sink *s, log_sink_fn *fn, void *ctx, int level);
void log_sink_destroy(log_sink *s);
/* Route the calling thread's lines to s (NULL: the process's stderr); returns the sink it replaces,
 * to be put back when the thread is done with s. */
log_sink *log_use_sink(log_sink *s);

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
