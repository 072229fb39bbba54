/* bench/codec.c -> bin/bench-codec: encode and decode throughput of the pseudo-gradient codecs
 * (common/math/codec.c), the portable build and the AVX2 one side by side in one run, plus the bf16 cast
 * and a memcpy of the fp32 input for scale (docs/compression.md).
 *
 *   bin/bench-codec [--numel 4000000] [--reps 9]
 *
 * Prints per codec and build the median seconds of one pass over numel elements and the rate in
 * millions of elements per second, and the AVX2/portable ratio. For the block codecs also the
 * shard-server's mean of two payloads with its round trip (--download update): "mean1" in one pass
 * per codec block (codec_mean, what a commit runs), "meanN" as separate passes over blocks of 32768 (a
 * zeroed sum, codec_decode_add of each, outer_mean_finish, codec_round_trip); same bits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/opts.h"
#include "base/util.h"
#include "math/bf16.h"
#include "math/codec.h"
#include "math/outer.h"

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { OP_ENCODE, OP_DECODE, OP_MEAN1, OP_MEANN, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"encode", "decode", "mean1", "meanN"};

typedef struct job {
    int dtype, op;
    const float *x;
    float *y;
    uint8_t *q, *q2; /* q: x encoded (decode and the means read it twice); q2: the means' encoding */
    size_t n;
} job;

/* The mean of q and q as separate passes over blocks of 32768, the server's way before codec_mean. */
static void mean_separate(const job *j)
{
    size_t bad, step = 32768;
    for (size_t lo = 0; lo < j->n; lo += step) {
        size_t len = j->n - lo < step ? j->n - lo : step, off = codec_offset(j->dtype, lo);
        outer_sum_zero(j->y + lo, len);
        for (int p = 0; p < 2; p++) codec_decode_add(j->dtype, j->q + off, len, j->y + lo);
        outer_mean_finish(j->y + lo, len, 2);
        if (codec_round_trip(j->dtype, j->y + lo, len, j->q2 + off, &bad) != 0) abort();
    }
}

static void run(const job *j)
{
    size_t bad;
    const uint8_t *in[2] = {j->q, j->q};
    if (j->op == OP_DECODE)
        codec_decode(j->dtype, j->q, j->n, j->y);
    else if (j->op == OP_MEAN1 && codec_mean(j->dtype, in, 2, j->n, j->y, j->q2, &bad) != 0)
        abort();
    else if (j->op == OP_MEANN)
        mean_separate(j);
    else if (j->op == OP_ENCODE && codec_encode(j->dtype, j->x, j->n, j->q, &bad) != 0)
        abort();
}

static double median_seconds(const job *j, int reps)
{
    double t[64];
    if (reps > 64) reps = 64;
    run(j); /* warm */
    for (int r = 0; r < reps; r++) {
        double t0 = mono();
        run(j);
        t[r] = mono() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_d);
    return t[reps / 2];
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bin/bench-codec [--numel N] [--reps R]\n");
}

int main(int argc, char **argv)
{
    long long numel = 4000000;
    int reps = 9;
    const opt_spec specs[] = {
        {.name = "numel", .kind = OPT_LLONG, .dest = &numel, .lo = 1, .hi = 1LL << 34},
        {.name = "reps", .kind = OPT_INT, .dest = &reps, .lo = 1, .hi = 100000},
        {0},
    };
    int rc = opts_parse_cmd("bench-codec", usage, specs, argc, argv, 1, NULL, NULL);
    if (rc != 0) return opts_exit_status(rc);
    size_t n = (size_t)numel;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    uint8_t *q = malloc(codec_bytes(BLOB_F32, n)), *q2 = malloc(codec_bytes(BLOB_F32, n));
    if (!x || !y || !q || !q2) return 1;
    uint64_t st = 1;
    for (size_t i = 0; i < n; i++) x[i] = (rng_uniform(&st) - 0.5f) * 1e-3f;
    printf("codec throughput, %zu elements, median of %d passes%s\n", n, reps,
           cpu_has_avx2() ? "" : " (no AVX2 on this CPU)");
    printf("%-5s %-7s %11s %11s %11s %11s %7s\n", "codec", "op", "portable_s", "Melem/s", "avx2_s", "Melem/s", "ratio");
    int codecs[] = {BLOB_I8, BLOB_I4, BLOB_I3, BLOB_I2, BLOB_BF16};
    for (size_t c = 0; c < sizeof codecs / sizeof codecs[0]; c++)
        for (int op = 0; op < (codec_is_block(codecs[c]) ? OP_COUNT : OP_MEAN1); op++) {
            job j = {codecs[c], op, x, y, q, q2, n};
            codec_force_portable(1);
            double tp = median_seconds(&j, reps);
            codec_force_portable(0);
            double ta = cpu_has_avx2() ? median_seconds(&j, reps) : tp;
            printf("%-5s %-7s %11.4f %11.1f %11.4f %11.1f %7.2f\n", codec_name(codecs[c]), op_names[op],
                   tp, (double)n / tp / 1e6, ta, (double)n / ta / 1e6, tp / ta);
        }
    double t0 = mono();
    memcpy(y, x, n * sizeof *x);
    double tm = mono() - t0;
    printf("memcpy of the fp32 input: %.4f s (%.1f Melem/s)\n", tm, (double)n / tm / 1e6);
    free(x);
    free(y);
    free(q);
    free(q2);
    return 0;
}
