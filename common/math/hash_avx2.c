/*
 * hash_avx2.c: xxhash's AVX2 code path (hash.h). This file alone is compiled with -mavx2 (Makefile),
 * so xxhash.h, included in header-only mode, picks its AVX2 kernels; hash.c calls these only when
 * the CPU has AVX2.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "math/hash_avx2.h"

uint64_t hash_avx2_64(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

void hash_avx2_update(void *state, const void *p, size_t n)
{
    (void)XXH3_64bits_update((XXH3_state_t *)state, p, n);
}
