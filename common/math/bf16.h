/*
 * bf16.h: conversion between fp32 and bfloat16 (the top 16 bits of an fp32).
 *
 * Workers may send pseudo-gradients as bf16 to halve the bytes on the wire; the shard-servers widen
 * them back to fp32 before averaging. Rounding is round-to-nearest-even like PyTorch's
 * tensor.to(torch.bfloat16); NaN stays NaN (made quiet, sign kept) and Inf stays Inf.
 */
#ifndef DILOCO_BF16_H
#define DILOCO_BF16_H

#include <stddef.h>
#include <stdint.h>

uint16_t bf16_from_f32(float f);
float bf16_to_f32(uint16_t h);

/* Bulk versions, written so gcc -O2 vectorises them. src and dst must not overlap. */
void bf16_encode(const float *src, uint16_t *dst, size_t n);
void bf16_decode(const uint16_t *src, float *dst, size_t n);

/* dst[i] = bf16(a[i] - b[i]) for the n elements; returns 0, or -1 with *bad_index = the first i whose
 * difference is NaN or infinite (dst is then fully written, but must not be used). One pass: the
 * worker's pseudo-gradient, its finite check and its bf16 cast. */
int bf16_encode_diff(const float *a, const float *b, uint16_t *dst, size_t n, size_t *bad_index);

#endif
