/*
 * util.h: small helpers shared by every ReDiLoCo binary: error strings, clocks, retry backoff,
 * strict number parsing and the deterministic PRNG used by trainers and tests.
 *
 * Convention used across the project: functions return 0 on success and -1 on error, and describe
 * the error in a caller-supplied buffer (char *err, size_t errlen) filled with err_set().
 */
#ifndef DILOCO_UTIL_H
#define DILOCO_UTIL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* printf into err (truncating); does nothing when err is NULL or errlen is 0. */
void err_set(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

uint64_t now_ms(void);  /* CLOCK_MONOTONIC: for timeouts and durations */
uint64_t now_us(void);  /* the same in microseconds (a step's compute time) */
uint64_t wall_ms(void); /* CLOCK_REALTIME: for timestamps shown to humans */
uint64_t wall_us(void); /* the same in microseconds (e.g. the phase stamps of diloco_sync_info) */
void sleep_ms(unsigned ms);

/* base*2^attempt capped at cap_ms, with +-25% jitter so that many clients do not retry in lockstep. */
unsigned backoff_ms(unsigned attempt, unsigned base_ms, unsigned cap_ms);

/* Whether the comma-separated list csv has item as one of its entries (a whole entry, not a prefix). */
int csv_has(const char *csv, const char *item);

/* Strict parsers: the whole string must be a number (no trailing junk, no empty string; parse_double: a
 * finite one, neither inf nor nan). */
int parse_int(const char *s, long long min, long long max, long long *out);
int parse_double(const char *s, double *out);
/* A listening address "[HOST:]PORT" or "[v6]:PORT" (PORT in [0, 65535]): the host into host (cap bytes;
 * left as it is when s is a bare PORT, so the caller's default, e.g. 127.0.0.1, stands) and the port.
 * 0, or -1 for anything else (no port, an empty host, a host too long). */
int parse_listen_addr(const char *s, char *host, size_t cap, int *port);

/* Whether the CPU runs AVX2 code (the AVX2 build of hash.c is used only then), and AVX2 with FMA
 * (the AVX2 build of outer.c's commit kernel, common/math/outer_fma.h). */
int cpu_has_avx2(void);
int cpu_has_avx2_fma(void);

/* The largest power of two, up to cap (a power of two), that the address p is a multiple of: the
 * alignment a kernel may assume of p (cuBLASLt's plans, worker/cuda/gpt_cuda_lt.cu, and the CPU CUDA
 * emulator's check of them). */
uint32_t ptr_alignment(const void *p, uint32_t cap);

/* Deterministic PRNG (SplitMix64): the same seed gives the same sequence on every machine. */
uint64_t splitmix64(uint64_t *state);
float rng_uniform(uint64_t *state); /* in [0,1) */

#ifdef __cplusplus
}
#endif
#endif
