/*
 * log.c: the logger declared in log.h. State is a few globals guarded by one mutex; logging works
 * (with process name "diloco") even if log_init() was never called, so library code can log freely.
 * A thread's sink (log_use_sink) is thread-local: the same library code logs for whichever session
 * the thread is working for, without a session handle in every log call.
 */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/sigpipe.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_name[64] = "diloco";
static int log_level = LOG_INFO;
static int log_level_from_env_done;

static const char *const level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

static int level_from_string(const char *s, int fallback)
{
    if (s == NULL) return fallback;
    if (strcasecmp(s, "debug") == 0) return LOG_DEBUG;
    if (strcasecmp(s, "info") == 0) return LOG_INFO;
    if (strcasecmp(s, "warn") == 0 || strcasecmp(s, "warning") == 0) return LOG_WARN;
    if (strcasecmp(s, "error") == 0) return LOG_ERROR;
    return fallback;
}

void log_init(const char *process_name)
{
    pthread_mutex_lock(&log_lock);
    if (process_name != NULL) snprintf(log_name, sizeof log_name, "%s", process_name);
    log_level = level_from_string(getenv("LOG_LEVEL"), LOG_INFO);
    log_level_from_env_done = 1;
    pthread_mutex_unlock(&log_lock);
}

void log_set_level(int level)
{
    if (level < LOG_DEBUG) level = LOG_DEBUG;
    if (level > LOG_ERROR) level = LOG_ERROR;
    pthread_mutex_lock(&log_lock);
    log_level = level;
    log_level_from_env_done = 1;
    pthread_mutex_unlock(&log_lock);
}

int log_get_level(void)
{
    pthread_mutex_lock(&log_lock);
    int level = log_level;
    pthread_mutex_unlock(&log_lock);
    return level;
}

/* "2026-11-21T23:59:01.123Z" in UTC. */
static void format_timestamp(char *buf, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000L);
}

static void write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w <= 0) return; /* nowhere to report a failing stderr */
        buf += w;
        len -= (size_t)w;
    }
}

/* The process's level (from LOG_LEVEL the first time); call with log_lock held. */
static int process_level_locked(void)
{
    if (!log_level_from_env_done) {
        log_level = level_from_string(getenv("LOG_LEVEL"), LOG_INFO);
        log_level_from_env_done = 1;
    }
    return log_level;
}

/* The usual stderr line. A closed stderr pipe loses the line instead of raising SIGPIPE in a host
 * that embeds libdiloco. */
static void write_stderr_line(int level, int min_level, const char *fmt, va_list ap)
{
    char line[4096];
    char stamp[40];
    pthread_mutex_lock(&log_lock);
    if (level < (min_level >= 0 ? min_level : process_level_locked())) {
        pthread_mutex_unlock(&log_lock);
        return;
    }
    format_timestamp(stamp, sizeof stamp);
    int n = snprintf(line, sizeof line, "%s %s[%d] %s ", stamp, log_name, (int)getpid(), level_names[level]);
    if (n < 0) n = 0;
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    size_t len = (size_t)n + (m > 0 ? (size_t)m : 0);
    if (len > sizeof line - 2) len = sizeof line - 2; /* truncated message: still end the line */
    line[len++] = '\n';
    sigpipe_guard g;
    sigpipe_hold(&g);
    write_all(STDERR_FILENO, line, len);
    sigpipe_release(&g);
    pthread_mutex_unlock(&log_lock);
}

static int process_level(void)
{
    pthread_mutex_lock(&log_lock);
    int level = process_level_locked();
    pthread_mutex_unlock(&log_lock);
    return level;
}

static __thread log_sink *thread_sink;

void log_sink_init(log_sink *s, log_sink_fn *fn, void *ctx, int level)
{
    s->fn = fn;
    s->ctx = ctx;
    s->level = level < 0 ? -1 : level > LOG_ERROR ? LOG_ERROR : level;
    pthread_mutex_init(&s->mu, NULL);
}

void log_sink_destroy(log_sink *s)
{
    pthread_mutex_destroy(&s->mu);
}

log_sink *log_use_sink(log_sink *s)
{
    log_sink *before = thread_sink;
    thread_sink = s;
    return before;
}

static void to_sink(log_sink *s, int level, const char *fmt, va_list ap)
{
    if (level < (s->level >= 0 ? s->level : process_level())) return;
    char message[4096];
    if (vsnprintf(message, sizeof message, fmt, ap) < 0) message[0] = '\0';
    pthread_mutex_lock(&s->mu);
    s->fn(s->ctx, level, message);
    pthread_mutex_unlock(&s->mu);
}

void log_msg(int level, const char *fmt, ...)
{
    if (level < LOG_DEBUG || level > LOG_ERROR) level = LOG_ERROR;
    log_sink *s = thread_sink;
    va_list ap;
    va_start(ap, fmt);
    if (s != NULL && s->fn != NULL)
        to_sink(s, level, fmt, ap);
    else
        write_stderr_line(level, s != NULL ? s->level : -1, fmt, ap);
    va_end(ap);
}
