/* clock_shift.c: an LD_PRELOAD library that moves the wall clock (CLOCK_REALTIME) of the process it is loaded
 * into by the seconds written in the file $CLOCK_SHIFT_FILE (absent or empty: 0; read again at most every
 * 100 ms), and leaves CLOCK_MONOTONIC alone: a host clock stepped by NTP or by hand, without changing the
 * host's. clock_gettime, gettimeofday and time are shifted alike. tests/it_wall_clock_jump.sh loads it into a worker,
 * tests/it_redis_clock_jump.sh into redis-server (cc -shared). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

typedef int clock_fn(clockid_t, struct timespec *);

static clock_fn *real_clock(void)
{
    static clock_fn *real;
    if (!real) real = (clock_fn *)dlsym(RTLD_NEXT, "clock_gettime");
    return real;
}

/* The shift in seconds, the file read again once 100 ms of the monotonic clock have passed. */
static long shift_s(void)
{
    static long shift, read_at_ms = -1000;
    struct timespec m;
    real_clock()(CLOCK_MONOTONIC, &m);
    long now = m.tv_sec * 1000 + m.tv_nsec / 1000000;
    if (now - __atomic_load_n(&read_at_ms, __ATOMIC_RELAXED) >= 100) {
        const char *path = getenv("CLOCK_SHIFT_FILE");
        FILE *f = path ? fopen(path, "r") : NULL;
        long s = 0;
        if (f) {
            if (fscanf(f, "%ld", &s) != 1) s = 0;
            fclose(f);
        }
        __atomic_store_n(&shift, s, __ATOMIC_RELAXED);
        __atomic_store_n(&read_at_ms, now, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&shift, __ATOMIC_RELAXED);
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    int rc = real_clock()(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += shift_s();
    return rc;
}

/* Redis reads the wall clock with gettimeofday (ustime(), the TIME command), which glibc serves from the vDSO
 * without going through clock_gettime: shifted here too. */
int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
