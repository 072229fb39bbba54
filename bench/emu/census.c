/* bench/emu/census.c -> build/bench/cuda_census_emu (`make cuda-census`): the kernels and products of one
 * training step of the CUDA GPT (forward, backward, clipping, AdamW), at real sizes, counted without a GPU.
 *
 *   build/bench/cuda_census_emu [--layers 12 --heads 12 --dim 768 --ctx 1024 --vocab 50257 --batch 8
 *                                --seq 1024] [--precision bf16|fp32] [--attention flash|fused|gemm] [--sms 132]
 *
 * It is the backend's own code (gpt_cuda_model.cu and the launchers) linked against the CPU CUDA
 * emulator in census mode (tests/tools/cuda_emu_census.h): every launch and product is counted by its
 * shape and nothing runs, so a GPT-2 small step takes a second and no GPU. It prints each kernel's
 * launches per step with their grid and block, marking (*) the shapes that give a GPU of --sms SMs fewer
 * than two blocks per SM, which leave most of it idle unless the kernel is tiny (the column sums were
 * such a kernel: 24 blocks for 768 columns); then each product's shape. It says nothing about speed
 * within a kernel: that takes a GPU (bin/bench-trainer_cuda --profile). --attention defaults to flash,
 * as auto picks on a GPU (auto's device check cannot run here: nothing runs). Exit status: 0, or 1 on
 * an error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/opts.h"
#include "cuda/gpt_cuda.h"
#include "cuda_emu_census.h"
#include "gpt/gpt.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cuda_census_emu [--layers 12] [--heads 12] [--dim 768] [--ctx 1024] [--vocab 50257] [--batch 8]\n"
            "                       [--seq 1024] [--precision bf16|fp32] [--attention flash|fused|gemm] [--sms 132]\n"
            "  one step's kernel launches and products, counted by the CPU CUDA emulator (nothing runs);\n"
            "  * marks kernels with fewer than 2 blocks per SM of --sms SMs\n");
}

int main(int argc, char **argv)
{
    gpt_config c = {.layers = 12, .heads = 12, .dim = 768, .ctx = 1024, .vocab = 50257};
    int batch = 8, seq = 1024, sms = 132, attention = GPT_ATTENTION_FLASH, bf16 = 1;
    const opt_spec specs[] = {
        {.name = "layers", .kind = OPT_INT, .dest = &c.layers, .lo = 1, .hi = 1000},
        {.name = "heads", .kind = OPT_INT, .dest = &c.heads, .lo = 1, .hi = 1000},
        {.name = "dim", .kind = OPT_INT, .dest = &c.dim, .lo = 1, .hi = 1 << 16},
        {.name = "ctx", .kind = OPT_INT, .dest = &c.ctx, .lo = 1, .hi = 1 << 20},
        {.name = "vocab", .kind = OPT_INT, .dest = &c.vocab, .lo = 1, .hi = 1 << 24},
        {.name = "batch", .kind = OPT_INT, .dest = &batch, .lo = 1, .hi = 1 << 16},
        {.name = "seq", .kind = OPT_INT, .dest = &seq, .lo = 1, .hi = 1 << 20},
        {.name = "sms", .kind = OPT_INT, .dest = &sms, .lo = 1, .hi = 100000},
        {.name = "precision", .kind = OPT_CHOICE, .dest = &bf16, .choices = "fp32|bf16"},
        {.name = "attention",
         .kind = OPT_CHOICE,
         .dest = &attention,
         .choices = "fused|gemm|flash"}, /* GPT_ATTENTION_* */
        {0},
    };
    int rc = opts_parse_cmd("cuda_census_emu", usage, specs, argc, argv, 1, NULL, NULL);
    if (rc != 0) return opts_exit_status(rc);
    setenv("CUDA_EMU_CENSUS", "1", 1); /* before the emulator's first call */
    char err[512] = "";
    int N = batch * seq;
    int *inp = calloc((size_t)N, sizeof(int)), *tgt = calloc((size_t)N, sizeof(int));
    gpt_cuda *g = inp && tgt ? gpt_cuda_create(&c, batch, seq, 0, err, sizeof err) : NULL;
    float loss;
    int bad = !g || gpt_cuda_set_precision(g, bf16, err, sizeof err) ||
              (bf16 && gpt_cuda_set_attention(g, attention, err, sizeof err));
    for (int i = 0; !bad && i < N; i++) {
        inp[i] = (i * 7919) % c.vocab;
        tgt[i] = (i * 104729 + 1) % c.vocab;
    }
    if (!bad) {
        cuda_emu_census_reset(); /* the step, not the setup */
        bad = gpt_cuda_forward(g, inp, tgt, &loss, err, sizeof err) || gpt_cuda_backward(g, err, sizeof err) ||
              gpt_cuda_clip(g, 1.0, NULL, err, sizeof err) ||
              gpt_cuda_adamw(g, 1, 1e-4, 0.9, 0.95, 1e-8, 0.1, err, sizeof err) || gpt_cuda_sync(g, err, sizeof err);
    }
    if (bad) {
        fprintf(stderr, "cuda census: %s\n", err[0] ? err : "out of memory");
    } else {
        printf("one step of a GPT of %d layers, %d heads, dim %d, vocab %d, batch %d x %d, %s%s%s:\n", c.layers,
               c.heads, c.dim, c.vocab, batch, seq, bf16 ? "bf16" : "fp32", bf16 ? ", attention " : "",
               bf16 ? (attention == GPT_ATTENTION_FLASH  ? "flash"
                       : attention == GPT_ATTENTION_GEMM ? "gemm"
                                                         : "fused")
                    : "");
        cuda_emu_census_print(stdout, (unsigned)sms);
    }
    gpt_cuda_free(g);
    free(inp);
    free(tgt);
    return bad;
}
