/* bench/trainer_cuda.c -> bin/bench-trainer_cuda: GPT trainer speed on a CUDA device.
 *
 *   bin/bench-trainer_cuda [--tf32] [--precision fp32|bf16] [--attention auto|flash|fused|gemm] [--steps N] [--no-gpt2]
 *                          [--no-torch] [--profile]
 *
 * Prints the device, its fp32 (and TF32) peak estimated from SM count x clock x lanes, the measured
 * cublasSgemm 4096^3 rate, then for each configuration ms/step and tokens/s of
 *   - full trainer steps (trainer.h, --device cuda: forward, backward, clip, AdamW and the copy of the
 *     parameters back to the host buffer that DiLoCo reads, see docs/cuda.md), and
 *   - device-only steps (the same without the host copy),
 * and MFU = (6*params + 6*layers*dim*seq) * tokens/s / peak, against the estimated peak and against
 * the measured sgemm. Configurations: (a) and (b) of bench/trainer.c (the CPU benchmark), and
 * (c) GPT-2 small (12 layers, 12 heads, 768 dim, ctx 1024, vocab 50257, batch 8, seq 1024).
 * --precision bf16: the trainer's bf16 path (bf16 products and attention on fp32 master weights,
 * docs/cuda.md), with the trainer's default attention, auto: the tensor-core flash kernels
 * (worker/cuda/flash_mma.cuh: tiles on mma.m16n8k16, online softmax, probabilities recomputed) where they
 * take the head size (all three configurations here), else the fused ones; --attention fused, gemm (the
 * fp32 path's products on bf16 operands, T x T probabilities kept) or flash choose one (tools/gpu_check.sh
 * runs all three). Each configuration prints the attention it ran. When $PYTHON (default /usr/bin/python3) imports a torch that sees the
 * GPU, each configuration also runs bench/torch_gpt_speed.py on the same model, batch and precision
 * (bf16: autocast + SDPA + fused AdamW, what users run; fp32 / TF32 likewise) and prints torch's tokens/s beside ours and their ratio, in the
 * same run on the same GPU (--no-torch: not). MFU uses the fp32 or TF32 peak; bf16 prints none.
 * --profile: after the timed device-only steps, 5 more with gpt_cuda_set_profile on, and where their GPU
 * time went, phase by phase (ms per step and share; gpt_cuda_profile.cu).
 * Exits 77 without a CUDA device or without the CUDA build. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/opts.h"
#include "gpt/gpt.h"
#ifdef DILOCO_HAVE_CUDA
#include "cuda/gpt_cuda.h"
#endif

#ifdef DILOCO_HAVE_CUDA
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 5 device-only steps with profiling on, then each phase's ms per step and share of their sum */
static void print_profile(gpt_cuda *g, const int *inp, const int *tgt, int steps0)
{
    char err[512];
    const char *names[32];
    double ms[32], sum = 0;
    long steps = 0;
    float loss;
    int bad = gpt_cuda_set_profile(g, 1, err, sizeof err);
    for (int i = 0; !bad && i < 5; i++)
        bad = gpt_cuda_forward(g, inp, tgt, &loss, err, sizeof err) || gpt_cuda_backward(g, err, sizeof err) ||
              gpt_cuda_clip(g, 1.0, NULL, err, sizeof err) ||
              gpt_cuda_adamw(g, steps0 + i + 1, 1e-4, 0.9, 0.95, 1e-8, 0.1, err, sizeof err);
    int n = bad ? -1 : gpt_cuda_profile(g, names, ms, 32, &steps, err, sizeof err);
    if (n < 0) {
        printf("    profile: %s\n", err);
        return;
    }
    for (int i = 0; i < n; i++) sum += ms[i];
    printf("    where a step's GPU time goes (%ld profiled steps, %.2f ms/step in the phases):\n", steps, sum);
    for (int i = 0; i < n; i++)
        if (ms[i] > 0) printf("      %-16s %8.3f ms  %5.1f%%\n", names[i], ms[i], 100 * ms[i] / sum);
}

/* bench/torch_gpt_speed.py on the same configuration: torch's tokens/s, 0 when it gives none (the line
 * it printed, or why not, in why) */
static double torch_figure(gpt_config c, int batch, int seq, int tf32, int bf16, int steps, char *why, size_t whylen)
{
    char cmd[1024], line[512] = "";
    const char *python = getenv("PYTHON") && getenv("PYTHON")[0] ? getenv("PYTHON") : "/usr/bin/python3";
    snprintf(cmd, sizeof cmd,
             "%s bench/torch_gpt_speed.py --layers %d --heads %d --dim %d --ctx %d --vocab %d "
             "--batch %d --seq %d --steps %d --precision %s 2>&1",
             python, c.layers, c.heads, c.dim, c.ctx, c.vocab, batch, seq, steps,
             bf16   ? "bf16"
             : tf32 ? "tf32"
                    : "fp32");
    FILE *f = popen(cmd, "r");
    if (!f) {
        snprintf(why, whylen, "could not start %s", python);
        return 0;
    }
    char buf[512];
    while (fgets(buf, sizeof buf, f)) memcpy(line, buf, sizeof line); /* keep the last line */
    int rc = pclose(f);
    line[strcspn(line, "\n")] = 0;
    snprintf(why, whylen, "%s", line[0] ? line : "no output");
    const char *at = strstr(line, "ms/step, ");
    return rc == 0 && at ? atof(at + 9) : 0;
}

static int run(const char *label, gpt_config c, int batch, int seq, int tf32, int bf16, int attention, int torch,
               int steps, int profile, double peak, double sgemm)
{
    gpt_options o;
    gpt_options_default(&o);
    o.model = c;
    o.batch = batch;
    o.seq = seq;
    o.eval_every = 0;
    o.warmup_steps = 10;
    o.device = GPT_DEVICE_CUDA;
    o.tf32 = tf32;
    o.precision = bf16 ? GPT_PRECISION_BF16 : GPT_PRECISION_FP32;
    o.attention = attention;
    char err[512];
    trainer *t = gpt_trainer_create(&o, err, sizeof err);
    if (!t) {
        printf("(%s) not run: %s\n", label, err);
        return -1;
    }
    trainer_stats st;
    for (int i = 0; i < 3; i++)
        if (t->step(t, &st, err, sizeof err)) {
            printf("(%s) failed: %s\n", label, err);
            t->destroy(t);
            return -1;
        }
    double t0 = now();
    for (int i = 0; i < steps; i++)
        if (t->step(t, &st, err, sizeof err)) {
            printf("(%s) failed: %s\n", label, err);
            t->destroy(t);
            return -1;
        }
    double dt = (now() - t0) / steps;
    size_t numel = t->numel;
    t->destroy(t);

    /* the device-only step, same shapes, random tokens */
    double dt2 = 0;
    gpt_cuda *g = gpt_cuda_create(&c, batch, seq, tf32, err, sizeof err);
    if (g &&
        (gpt_cuda_set_precision(g, bf16, err, sizeof err) || gpt_cuda_set_attention(g, attention, err, sizeof err))) {
        printf("(%s) device-only step: %s\n", label, err);
        gpt_cuda_free(g);
        g = NULL;
    }
    static const char *const attention_name[] = {"fused", "gemm", "flash"}; /* GPT_ATTENTION_*, resolved */
    if (g && bf16) {
        const char *note = gpt_cuda_attention_note(g);
        printf("(%s) attention: %s%s%s%s\n", label, attention_name[gpt_cuda_attention(g)], note[0] ? " (" : "", note,
               note[0] ? ")" : "");
        printf("(%s) linear layers: %s\n", label, gpt_cuda_precision_note(g));
        printf("(%s) logits rows: %zu floats apart (vocabulary %d)\n", label, gpt_cuda_logits_stride(g), c.vocab);
    }
    if (g) {
        int N = batch * seq;
        int *inp = malloc((size_t)N * sizeof(int)), *tgt = malloc((size_t)N * sizeof(int));
        for (int i = 0; i < N; i++) {
            inp[i] = (i * 7919) % c.vocab;
            tgt[i] = (i * 104729 + 1) % c.vocab;
        }
        float *p = malloc(numel * sizeof(float));
        float loss;
        int bad = !p || gpt_init_params(&c, 1, p, numel, err, sizeof err) ||
                  gpt_cuda_set_params(g, p, 0, numel, err, sizeof err);
        for (int i = 0; !bad && i < steps + 3; i++) {
            if (i == 3) t0 = now();
            bad = gpt_cuda_forward(g, inp, tgt, &loss, err, sizeof err) || gpt_cuda_backward(g, err, sizeof err) ||
                  gpt_cuda_clip(g, 1.0, NULL, err, sizeof err) ||
                  gpt_cuda_adamw(g, i + 1, 1e-4, 0.9, 0.95, 1e-8, 0.1, err, sizeof err) ||
                  gpt_cuda_sync(g, err, sizeof err);
        }
        if (!bad)
            dt2 = (now() - t0) / steps;
        else
            printf("(%s) device-only step failed: %s\n", label, err);
        if (!bad && profile) print_profile(g, inp, tgt, steps + 3);
        free(inp);
        free(tgt);
        free(p);
        gpt_cuda_free(g);
    }
    double flops_tok = 6.0 * numel + 6.0 * c.layers * c.dim * seq;
    double tps = batch * seq / dt, tps2 = dt2 > 0 ? batch * seq / dt2 : 0;
    printf("(%s) layers %d heads %d dim %d ctx %d vocab %d batch %d seq %d: params %zu\n", label, c.layers, c.heads,
           c.dim, c.ctx, c.vocab, batch, seq, numel);
    printf("    trainer step (with the host copy): %.2f ms/step, %.0f tokens/s, %.1f GFLOP/s model (loss %.3f)\n",
           dt * 1e3, tps, flops_tok * tps / 1e9, st.loss);
    if (tps2 > 0)
        printf("    device-only step:                  %.2f ms/step, %.0f tokens/s, %.1f GFLOP/s model\n", dt2 * 1e3,
               tps2, flops_tok * tps2 / 1e9);
    if (torch) {
        char why[512];
        double tt = torch_figure(c, batch, seq, tf32, bf16, steps, why, sizeof why);
        if (tt > 0)
            printf("    PyTorch, same model, batch and precision: %.0f tokens/s; C CUDA / PyTorch: trainer %.2f, "
                   "device-only %.2f\n    (%s)\n",
                   tt, tps / tt, tps2 / tt, why);
        else
            printf("    PyTorch figure: none (%s)\n", why);
    }
    if (bf16) return 0; /* no bf16 peak estimate: MFU only for fp32 / TF32 */
    if (peak > 0)
        printf("    MFU vs estimated peak: trainer %.1f%%, device-only %.1f%%\n", 100 * flops_tok * tps / peak,
               100 * flops_tok * tps2 / peak);
    if (sgemm > 0)
        printf("    MFU vs measured sgemm: trainer %.1f%%, device-only %.1f%%\n", 100 * flops_tok * tps / sgemm,
               100 * flops_tok * tps2 / sgemm);
    return 0;
}
#endif

static void usage(FILE *f)
{
    fprintf(f, "usage: bench-trainer_cuda [--tf32] [--precision fp32|bf16] [--attention auto|flash|fused|gemm] "
               "[--steps 20] [--no-gpt2] [--no-torch] [--profile]\n"
               "  --attention  with --precision bf16: auto (the trainer's default: flash where the head size allows,\n"
               "               else fused), flash (tensor-core tiles, probabilities recomputed), fused (one warp a\n"
               "               row) or gemm (tensor-core products, T x T probabilities kept); fp32 has its own\n"
               "               attention\n"
               "  --profile    after the timed steps, 5 profiled ones: the GPU time of each phase (embedding,\n"
               "               layernorm, linear layers, attention, ..., adamw) per step and its share\n");
}

int main(int argc, char **argv)
{
    int tf32 = 0, steps = 20, gpt2 = 1, bf16 = 0, attention = GPT_ATTENTION_AUTO, torch = 1, profile = 0;
    const opt_spec specs[] = {
        {.name = "tf32", .kind = OPT_FLAG, .dest = &tf32},
        {.name = "precision", .kind = OPT_CHOICE, .dest = &bf16, .choices = "fp32|bf16"},
        {.name = "attention",
         .kind = OPT_CHOICE,
         .dest = &attention,
         .choices = "fused|gemm|flash|auto"}, /* GPT_ATTENTION_* */
        {.name = "no-torch", .kind = OPT_CLEAR, .dest = &torch},
        {.name = "profile", .kind = OPT_FLAG, .dest = &profile},
        {.name = "no-gpt2", .kind = OPT_CLEAR, .dest = &gpt2},
        {.name = "steps", .kind = OPT_INT, .dest = &steps, .lo = 1, .hi = 1000000},
        {0},
    };
    int rc = opts_parse_cmd("bench-trainer_cuda", usage, specs, argc, argv, 1, NULL, NULL);
    if (rc != 0) return opts_exit_status(rc);
    if (attention != GPT_ATTENTION_FUSED && attention != GPT_ATTENTION_AUTO && !bf16) {
        fprintf(stderr,
                "bench-trainer_cuda: --attention %s needs --precision bf16: fp32 has its own attention "
                "(see --help)\n",
                attention == GPT_ATTENTION_GEMM ? "gemm" : "flash");
        return OPTS_EXIT_USAGE;
    }
#ifndef DILOCO_HAVE_CUDA
    (void)tf32;
    (void)gpt2;
    (void)bf16;
    (void)attention;
    (void)torch;
    (void)profile;
    printf("bench-trainer_cuda: built without CUDA (nvcc not found at build time): skipped\n");
    return 77;
#else
    char why[256] = "";
    if (gpt_cuda_device_count(why, sizeof why) == 0) {
        printf("bench-trainer_cuda: no CUDA device: skipped (%s)\n", why);
        return 77;
    }
    char name[256] = "?";
    double fp32 = 0, tf = 0;
    gpt_cuda_device_info(name, sizeof name, &fp32, &tf);
    double peak = tf32 ? tf : fp32;
    printf("device: %s\n", name);
    printf("estimated peak: fp32 %.1f TFLOP/s, tf32 %s%.1f TFLOP/s (SMs x clock x lanes; 0 = unknown)\n", fp32 / 1e12,
           tf > 0 ? "" : "unknown ", tf / 1e12);
    double sg = gpt_cuda_sgemm_flops(4096, tf32, 5);
    printf("cublasSgemm 4096^3 %s: %.1f TFLOP/s measured\n", tf32 ? "TF32" : "fp32", sg / 1e12);
    printf("products: %s\n", !bf16 ? (tf32 ? "TF32 tensor cores allowed (--tf32)" : "fp32 (TF32 off)")
                             : attention == GPT_ATTENTION_GEMM
                                 ? "bf16 operands, fp32 accumulation; attention: bf16 strided-batched products "
                                   "(--precision bf16 --attention gemm)"
                             : attention == GPT_ATTENTION_FLASH
                                 ? "bf16 operands, fp32 accumulation; attention: tensor-core flash kernels "
                                   "(--precision bf16 --attention flash)"
                             : attention == GPT_ATTENTION_FUSED
                                 ? "bf16 operands, fp32 accumulation; attention: fused kernels "
                                   "(--precision bf16 --attention fused)"
                                 : "bf16 operands, fp32 accumulation; attention: auto, flash where the head size "
                                   "allows, else fused (--precision bf16)");
    run("a", (gpt_config){.layers = 4, .heads = 4, .dim = 256, .ctx = 256, .vocab = 256}, 8, 256, tf32, bf16, attention,
        torch, steps, profile, peak, sg);
    run("b", (gpt_config){.layers = 4, .heads = 4, .dim = 256, .ctx = 256, .vocab = 50257}, 4, 64, tf32, bf16,
        attention, torch, steps, profile, peak, sg);
    if (gpt2)
        run("c", (gpt_config){.layers = 12, .heads = 12, .dim = 768, .ctx = 1024, .vocab = 50257}, 8, 1024, tf32, bf16,
            attention, torch, steps, profile, peak, sg);
    return 0;
#endif
}
