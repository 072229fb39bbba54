/*
 * clones.h: one hot function, two builds, picked at load time for the CPU the binary runs on.
 *
 * HOT_CLONES compiles a function for x86-64-v3 (AVX2, FMA) and for the x86-64 baseline, and the loader
 * picks one (gcc function multiversioning through an ifunc): a binary built anywhere runs on any
 * x86-64, and at full width where the CPU has AVX2. Both builds must give the same bits, so code under
 * HOT_CLONES does no floating-point contraction (-ffp-contract=off, or ISO C mode where that is the
 * default) and no reassociation (no `omp simd reduction`, no -ffast-math). Users: the outer step
 * (OUTER_HOT, common/math/outer_fma.h) and the CPU GPT's kernels (worker/gpt/gpt_model.c).
 */
#ifndef DILOCO_CLONES_H
#define DILOCO_CLONES_H

/* DILOCO_NO_CLONES: one plain build (the ThreadSanitizer build: an ifunc resolver runs before the
 * sanitizer's runtime is up, and an instrumented one crashes) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(DILOCO_NO_CLONES)
#define HOT_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HOT_CLONES
#endif

#endif
