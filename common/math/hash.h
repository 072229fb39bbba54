/*
 * hash.h: XXH3-64, the one checksum of the project (blob and frame checksums, parameter digests),
 * at the speed of the CPU it runs on.
 *
 * Debian's libxxhash is built for the x86-64 baseline (SSE2). On a CPU with AVX2 these two functions
 * run xxhash's own AVX2 code path instead (xxhash.h in header-only mode, compiled with -mavx2 in
 * hash_avx2.c; docs/benchmarks.md has its speed); every code path gives the value XXH3_64bits gives.
 * States come from the library (XXH3_createState, XXH3_64bits_reset, XXH3_64bits_digest).
 */
#ifndef DILOCO_HASH_H
#define DILOCO_HASH_H

#include <stddef.h>
#include <stdint.h>

#include <xxhash.h>

/* XXH3_64bits(p, n) */
uint64_t hash64(const void *p, size_t n);
/* XXH3_64bits_update(s, p, n) (which cannot fail on a valid state) */
void hash_update(XXH3_state_t *s, const void *p, size_t n);

#endif
