/* outer_avx2.h: the AVX2 build of outer_mean_step_bf16_to (outer_avx2.c); only outer.c calls it, on a
 * CPU with AVX2. */
#ifndef DILOCO_OUTER_AVX2_H
#define DILOCO_OUTER_AVX2_H

#include <stddef.h>
#include <stdint.h>

void outer_mean_step_bf16_to_avx2(float *theta_out, float *b_out, const float *theta_in, const float *b_in,
                                  int first_step, const uint16_t *const *deltas, uint32_t k, size_t n, float lr,
                                  float mu, int nesterov);

#endif
