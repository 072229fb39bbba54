/* hash_avx2.h: the AVX2 build of hash.h's functions (hash_avx2.c); only hash.c calls them. The state
 * is an XXH3_state_t (void * here: hash_avx2.c sees xxhash's types under header-only names). */
#ifndef DILOCO_HASH_AVX2_H
#define DILOCO_HASH_AVX2_H

#include <stddef.h>
#include <stdint.h>

uint64_t hash_avx2_64(const void *p, size_t n);
void hash_avx2_update(void *state, const void *p, size_t n);

#endif
