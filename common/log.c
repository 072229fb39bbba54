/*
 * log.c: the logger declared in log.h. State is a few globals guarded by one mutex; logging works
 * (with process name "diloco") even if log_init() was never called, so library code can log freely.
 */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_name[64] = "diloco";
static int log_level = LOG_INFO;
static int log_level_from_env_done;

static const char *const level_names[] = { "DEBUG", "INFO", "WARN", "ERROR" };

static int level_from_string(const char *s, int fallback)
{
    if (s == NULL)
        return fallback;
    if (strcasecmp(s, "debug") == 0)
        return LOG_DEBUG;
    if (strcasecmp(s, "info") == 0)
        return LOG_INFO;
    if (strcasecmp(s, "warn") == 0 || strcasecmp(s, "warning") == 0)
        return LOG_WARN;
    if (strcasecmp(s, "error") == 0)
        return LOG_ERROR;
    return fallback;
}

void log_init(const char *process_name)
{
    pthread_mutex_lock(&log_lock);
    if (process_name != NULL)
        snprintf(log_name, sizeof log_name, "%s", process_name);
    log_level = level_from_string(getenv("LOG_LEVEL"), LOG_INFO);
    log_level_from_env_done = 1;
    pthread_mutex_unlock(&log_lock);
}

void log_set_level(int level)
{
    if (level < LOG_DEBUG)
        level = LOG_DEBUG;
    if (level > LOG_ERROR)
        level = LOG_ERROR;
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
        if (w <= 0)
            return; /* nowhere to report a failing stderr */
        buf += w;
        len -= (size_t)w;
    }
}

void log_msg(int level, const char *fmt, ...)
{
    if (level < LOG_DEBUG || level > LOG_ERROR)
        level = LOG_ERROR;
    char line[4096];
    char stamp[40];
    pthread_mutex_lock(&log_lock);
    if (!log_level_from_env_done) {
        log_level = level_from_string(getenv("LOG_LEVEL"), LOG_INFO);
        log_level_from_env_done = 1;
    }
    if (level < log_level) {
        pthread_mutex_unlock(&log_lock);
        return;
    }
    format_timestamp(stamp, sizeof stamp);
    int n = snprintf(line, sizeof line, "%s %s[%d] %s ", stamp, log_name, (int)getpid(), level_names[level]);
    if (n < 0)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m > 0 ? (size_t)m : 0);
    if (len > sizeof line - 2)
        len = sizeof line - 2; /* truncated message: still end the line */
    line[len++] = '\n';
    write_all(STDERR_FILENO, line, len);
    pthread_mutex_unlock(&log_lock);
}
