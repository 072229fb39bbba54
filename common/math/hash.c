/*
 * hash.c: XXH3-64 through the fastest code path the CPU has (hash.h): AVX2 (hash_avx2.c) or the
 * library's baseline build.
 */
#include "math/hash.h"

#include "base/util.h"
#include "math/hash_avx2.h"

uint64_t hash64(const void *p, size_t n)
{
    if (cpu_has_avx2()) return hash_avx2_64(p, n);
    return XXH3_64bits(p, n);
}

void hash_update(XXH3_state_t *s, const void *p, size_t n)
{
    if (cpu_has_avx2())
        hash_avx2_update(s, p, n);
    else
        (void)XXH3_64bits_update(s, p, n);
}
