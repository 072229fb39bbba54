/* bench/trainer.c -> bin/bench-trainer: GPT trainer speed on the CPU.
 *
 *   bin/bench-trainer [--threads 2] [--steps-a 10] [--steps-b 20]
 *
 * Measures the machine's cblas_sgemm peak (2048^3, OpenBLAS with its own threads and split between
 * our OpenMP threads with single-threaded OpenBLAS; the better of the two is "peak"), then
 * tokens/s and ms/step of full trainer steps (forward, backward, clip, AdamW) for
 *   (a) layers 4, heads 4, dim 256, ctx 256, vocab 256,   batch 8, seq 256
 *   (b) layers 4, heads 4, dim 256, ctx 256, vocab 50257, batch 4, seq 64
 * and MFU = (6*params + 6*layers*dim*seq) * tokens/s / peak (peak measured before and after). */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/opts.h"
#include "gpt/gpt.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double peak_gflops(int threads, int split)
{
    int n = 2048;
    float *a = malloc((size_t)n * n * 4), *b = malloc((size_t)n * n * 4), *c = malloc((size_t)n * n * 4);
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
        c[i] = 0;
    }
    double best = 0;
    for (int rep = 0; rep < 6; rep++) {
        double t0 = now();
        if (split) {
            openblas_set_num_threads(1);
#pragma omp parallel num_threads(threads)
            {
                int k = omp_get_num_threads(), id = omp_get_thread_num(), rows = n / k;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, n, n, 1.0f, a + (size_t)id * rows * n, n,
                            b, n, 0.0f, c + (size_t)id * rows * n, n);
            }
        } else {
            openblas_set_num_threads(threads);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        }
        double g = 2.0 * n * n * n / (now() - t0) / 1e9;
        if (g > best) best = g;
    }
    free(a);
    free(b);
    free(c);
    openblas_set_num_threads(1);
    return best;
}

static int run(const char *label, int vocab, int batch, int seq, int threads, int steps, double *gflops)
{
    gpt_options o;
    gpt_options_default(&o);
    o.model = (gpt_config){.layers = 4, .heads = 4, .dim = 256, .ctx = 256, .vocab = vocab};
    o.batch = batch;
    o.seq = seq;
    o.threads = threads;
    o.eval_every = 0;
    o.warmup_steps = 10;
    char err[256];
    trainer *t = gpt_trainer_create(&o, err, sizeof err);
    if (!t) {
        fprintf(stderr, "bench-trainer: %s\n", err);
        return -1;
    }
    trainer_stats st;
    for (int i = 0; i < 2; i++)
        if (t->step(t, &st, err, sizeof err)) {
            fprintf(stderr, "bench-trainer: %s\n", err);
            return -1;
        }
    double t0 = now();
    for (int i = 0; i < steps; i++)
        if (t->step(t, &st, err, sizeof err)) {
            fprintf(stderr, "bench-trainer: %s\n", err);
            return -1;
        }
    double dt = (now() - t0) / steps;
    double tps = batch * seq / dt;
    double flops_tok = 6.0 * t->numel + 6.0 * 4 * 256 * seq;
    *gflops = flops_tok * tps / 1e9;
    printf("(%s) layers 4 heads 4 dim 256 ctx 256 vocab %d batch %d seq %d: params %zu, %.1f ms/step, "
           "%.0f tokens/s, %.1f GFLOP/s model (loss %.3f)\n",
           label, vocab, batch, seq, t->numel, dt * 1e3, tps, *gflops, st.loss);
    t->destroy(t);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench-trainer [--threads 2] [--steps-a 10] [--steps-b 20]\n");
}

int main(int argc, char **argv)
{
    gpt_openblas_autotune(argv); /* re-executes with OPENBLAS_CORETYPE set when OpenBLAS fell back to SSE3 */
    int threads = 2, sa = 10, sb = 20;
    const opt_spec specs[] = {
        {.name = "threads", .kind = OPT_INT, .dest = &threads, .lo = 1, .hi = 4096},
        {.name = "steps-a", .kind = OPT_INT, .dest = &sa, .lo = 1, .hi = 1000000},
        {.name = "steps-b", .kind = OPT_INT, .dest = &sb, .lo = 1, .hi = 1000000},
        {0},
    };
    int rc = opts_parse_cmd("bench-trainer", usage, specs, argc, argv, 1, NULL, NULL);
    if (rc != 0) return opts_exit_status(rc);
    double p1 = peak_gflops(threads, 0), p2 = peak_gflops(threads, 1);
    double peak = p1 > p2 ? p1 : p2;
    printf("OpenBLAS core: %s (OPENBLAS_CORETYPE=%s)\n", openblas_get_corename(),
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset");
    printf("sgemm 2048^3 fp32 with %d threads: OpenBLAS threads %.1f GFLOP/s, OpenMP split %.1f GFLOP/s -> peak %.1f\n",
           threads, p1, p2, peak);
    /* the machine may be shared: measure the peak again after the runs and keep the best, so a
     * slow peak measurement cannot inflate the MFU */
    double ta = 0, tb = 0;
    if (run("a", 256, 8, 256, threads, sa, &ta)) return 1;
    if (run("b", 50257, 4, 64, threads, sb, &tb)) return 1;
    double q1 = peak_gflops(threads, 0), q2 = peak_gflops(threads, 1);
    if (q1 > peak) peak = q1;
    if (q2 > peak) peak = q2;
    printf("sgemm peak (best before/after the runs): %.1f GFLOP/s\n", peak);
    printf("MFU (a) %.1f%%   (b) %.1f%%\n", 100 * ta / peak, 100 * tb / peak);
    return 0;
}
