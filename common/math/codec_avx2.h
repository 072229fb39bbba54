/* codec_avx2.h: the AVX2 build of the codec's block kernels (codec_avx2.c); only codec.c calls them, on a
 * CPU with AVX2. */
#ifndef DILOCO_CODEC_AVX2_H
#define DILOCO_CODEC_AVX2_H

#include <stddef.h>
#include <stdint.h>

int codec_encode_block_avx2(const float *a, const float *b, float *ef, uint8_t *out, int bits);
void codec_decode_block_avx2(const uint8_t *in, float *out, int bits);
void codec_decode_block_add_avx2(const uint8_t *in, float *acc, int bits);
int codec_mean_block_avx2(const uint8_t *const *in, size_t off, uint32_t k, float *g, uint8_t *out, int bits);

#endif
