/*
 * util.c: implementation of the helpers declared in util.h (errors, clocks, backoff, parsing, PRNG).
 * Nothing here allocates or keeps global state except the per-thread seed of the backoff jitter.
 */
#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

void err_set(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static uint64_t clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t now_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC);
}
uint64_t wall_ms(void)
{
    return clock_ms(CLOCK_REALTIME);
}

static uint64_t clock_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t now_us(void)
{
    return clock_us(CLOCK_MONOTONIC);
}

uint64_t wall_us(void)
{
    return clock_us(CLOCK_REALTIME);
}

void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    /* Resume after signals so callers get at least the delay they asked for. */
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* Each thread gets its own seed (time ^ thread id) so concurrent retries spread out. */
static _Thread_local unsigned jitter_seed;
static _Thread_local int jitter_seeded;

static unsigned jitter_next(void)
{
    if (!jitter_seeded) {
        jitter_seed = (unsigned)(clock_ms(CLOCK_REALTIME) ^ ((uint64_t)syscall(SYS_gettid) << 16));
        jitter_seeded = 1;
    }
    return (unsigned)rand_r(&jitter_seed);
}

unsigned backoff_ms(unsigned attempt, unsigned base_ms, unsigned cap_ms)
{
    uint64_t d = base_ms;
    for (unsigned i = 0; i < attempt && d < cap_ms; i++) d *= 2;
    if (d > cap_ms) d = cap_ms;
    /* Uniform factor in [0.75, 1.25]. */
    uint64_t span = d / 2;
    uint64_t low = d - d / 4;
    if (span == 0) return (unsigned)d;
    return (unsigned)(low + (uint64_t)jitter_next() % (span + 1));
}

int csv_has(const char *csv, const char *item)
{
    size_t n = strlen(item);
    for (const char *p = csv; p != NULL && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, item, n) == 0) return 1;
        p = end ? end + 1 : p + len;
    }
    return 0;
}

int parse_listen_addr(const char *s, char *host, size_t cap, int *port)
{
    const char *p = s;
    if (s[0] == '[') {
        const char *e = strchr(s, ']');
        if (!e || e[1] != ':' || (size_t)(e - s - 1) >= cap) return -1;
        memcpy(host, s + 1, (size_t)(e - s - 1));
        host[e - s - 1] = 0;
        p = e + 2;
    } else if (strrchr(s, ':')) {
        const char *c = strrchr(s, ':');
        if ((size_t)(c - s) >= cap || c == s) return -1;
        memcpy(host, s, (size_t)(c - s));
        host[c - s] = 0;
        p = c + 1;
    }
    long long v;
    if (parse_int(p, 0, 65535, &v) < 0) return -1;
    *port = (int)v;
    return 0;
}

int parse_int(const char *s, long long min, long long max, long long *out)
{
    if (s == NULL || *s == '\0') return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int parse_double(const char *s, double *out)
{
    if (s == NULL || *s == '\0') return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno == ERANGE || end == s || *end != '\0') return -1;
    if (!isfinite(v)) return -1; /* "inf" and "nan": no setting, time or rate of ours is infinite */
    *out = v;
    return 0;
}

uint32_t ptr_alignment(const void *p, uint32_t cap)
{
    uintptr_t u = (uintptr_t)p;
    uint32_t a = cap;
    while (a > 1 && u % a) a >>= 1;
    return a;
}

uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float rng_uniform(uint64_t *state)
{
    /* The top 24 bits fit a float mantissa exactly, so the result is < 1 and uniform on a 2^-24 grid. */
    return (float)(splitmix64(state) >> 40) * (1.0f / 16777216.0f);
}

int cpu_has_avx2(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

int cpu_has_avx2_fma(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}
