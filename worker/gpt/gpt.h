/* gpt.h: the reference GPT trainer on the CPU (OpenBLAS + OpenMP), implementing trainer.h.
 *
 * Model: GPT-2 style decoder. Token + learned position embeddings, L pre-LayerNorm blocks (causal
 * multi-head self-attention, GELU-tanh MLP 4x), final LayerNorm, output head tied to the token
 * embedding, mean cross-entropy over all B*T positions. All parameters live in one flat fp32 buffer
 * whose named layout (gpt_layout) is per layer contiguous, so DiLoCo fragments are layer-aligned.
 * Linear weights use torch's nn.Linear convention: shape (out, in), y = x W^T + b.
 *
 * Layers of the API:
 *   gpt_config / gpt_layout / gpt_init_params   model/model.h: the configuration, the parameter
 *                                      layout and its deterministic initialisation (no BLAS there)
 *   gpt_model_*                        forward + backward on a given batch (activations allocated once)
 *   gpt_adamw_step / gpt_clip_grad_norm / gpt_lr_at   the inner optimizer, as torch.optim.AdamW
 *   gpt_options_* / gpt_trainer_create  the trainer behind trainer.h (data, eval, telemetry, checkpoint)
 *   gpt_prepare_data_main               `bin/worker prepare-data`
 * See docs/trainer.md. */
#ifndef DILOCO_GPT_H
#define DILOCO_GPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "model.h"
#include "trainer.h"

/* ---- forward / backward on one batch ------------------------------------------------------- */
typedef struct gpt_model gpt_model;
/* Allocates every activation for batch B, sequence T (T <= ctx) once. threads <= 0: all cores. */
gpt_model *gpt_model_create(const gpt_config *c, int B, int T, int threads, char *err, size_t errlen);
void gpt_model_free(gpt_model *m);
/* inputs, targets: B*T token ids in [0, vocab). Returns the mean cross-entropy (nats/token).
 * targets may be NULL (then only the logits are computed; returns 0). */
float gpt_forward(gpt_model *m, const float *params, const int *inputs, const int *targets);
/* After gpt_forward with targets: writes (not accumulates) d loss / d params into grads (numel). */
void gpt_backward(gpt_model *m, const float *params, float *grads);
/* The logits of the last forward, (B, T, vocab) row-major (valid until gpt_backward). */
const float *gpt_model_logits(const gpt_model *m);
int gpt_model_threads(const gpt_model *m);

/* OpenBLAS 0.3.21 (Debian 12) does not recognise recent Xeons and falls back to its slow SSE3
 * "Prescott" kernels (docs/trainer.md). Call first thing in main(argc, argv): when OPENBLAS_CORETYPE is unset and
 * OpenBLAS picked a generic core on a CPU with AVX-512 (AVX2), it sets OPENBLAS_CORETYPE=SkylakeX
 * (Haswell) and re-executes the program (/proc/self/exe, same argv). Returns 0 when nothing had to
 * be done, -1 if the re-exec failed (the program can carry on, slowly). */
int gpt_openblas_autotune(char **argv);

/* ---- optimizer ----------------------------------------------------------------------------- */
/* torch.nn.utils.clip_grad_norm_: norm = ||g||_2 over everything; if max_norm > 0, g *= min(1,
 * max_norm / (norm + 1e-6)). Returns the norm before clipping. */
double gpt_clip_grad_norm(float *grads, size_t numel, double max_norm, int threads);
/* One torch.optim.AdamW step (decoupled weight decay, bias correction) with step count t >= 1.
 * Weight decay applies to tensors with ndim >= 2 (all matrices, including wte and wpe, as nanoGPT
 * and torchft do); LayerNorm parameters and biases are not decayed. m, v: numel each, start at 0. */
void gpt_adamw_step(const model_tensor *tensors, int ntensors, float *params, const float *grads, float *m, float *v,
                    long t, double lr, double beta1, double beta2, double eps, double weight_decay, int threads);

/* ---- the trainer --------------------------------------------------------------------------- */
typedef struct gpt_options {
    gpt_config model;
    int batch, seq;
    double lr, beta1, beta2, eps, weight_decay, grad_clip;
    int warmup_steps;
    long total_steps;      /* cosine decay horizon; <= 0: constant lr after warmup */
    double min_lr_ratio;   /* min lr = lr * min_lr_ratio at total_steps */
    const char *data_path; /* token file from prepare-data; NULL: synthetic uniform random tokens */
    int num_shards, shard_index;
    int shard_layout;    /* GPT_SHARD_CONTIGUOUS (default) or GPT_SHARD_STRIPE: see gpt_part */
    int shard_stripe;    /* stripe layout: tokens per stripe; 0: GPT_SHARD_STRIPE_DEFAULT */
    int data_sequential; /* 0: random windows (default), 1: consecutive windows */
    int eval_every, eval_batches;
    int threads;                 /* <= 0: all cores */
    uint64_t seed;               /* parameter init seed (all workers must agree) */
    uint64_t data_seed;          /* data order seed (mixed with shard_index) */
    const char *log_path;        /* JSON-lines telemetry, appended; NULL: none */
    const char *checkpoint_path; /* safetensors; resumed at create when it exists; NULL: none */
    int checkpoint_every;        /* steps between checkpoints (0: only at destroy) */
    int device;                  /* GPT_DEVICE_AUTO (default): cuda when built with CUDA and a device is
                                  present, else cpu; GPT_DEVICE_CPU; GPT_DEVICE_CUDA (docs/cuda.md) */
    int tf32;                    /* cuda: let cuBLAS use TF32 tensor cores (default 0: fp32 products) */
    int precision;               /* GPT_PRECISION_FP32 (default, exact) or _BF16 (cuda only: bf16 products and
                                  fused attention on fp32 master weights, docs/cuda.md) */
    int attention;               /* --precision bf16's attention: GPT_ATTENTION_AUTO (default: _FLASH where
                                  its kernels take the head size, else _FUSED), _FUSED (one warp a row),
                                  _GEMM (tensor-core products, T x T probabilities kept) or _FLASH
                                  (tensor-core flash kernels, head size a multiple of 16 up to 128); fp32
                                  always uses its sgemm attention (docs/cuda.md) */
    /* Data-parallel training inside a process group (DDP's all-reduce, CPU backend only): called after each
     * backward with this rank's gradients (numel floats), before clipping; it must replace them by the
     * ranks' mean, the same bytes on every rank, so every rank takes the same AdamW step. NULL: none. */
    int (*grad_reduce)(void *ctx, float *grads, size_t numel, char *err, size_t errlen);
    void *grad_reduce_ctx;
} gpt_options;

enum { GPT_DEVICE_AUTO = 0, GPT_DEVICE_CPU = 1, GPT_DEVICE_CUDA = 2 };
enum { GPT_PRECISION_FP32 = 0, GPT_PRECISION_BF16 = 1 }; /* --precision, in this order */
/* --attention, in this order */
enum { GPT_ATTENTION_FUSED = 0, GPT_ATTENTION_GEMM = 1, GPT_ATTENTION_FLASH = 2, GPT_ATTENTION_AUTO = 3 };
enum { GPT_SHARD_CONTIGUOUS = 0, GPT_SHARD_STRIPE = 1 }; /* --shard-layout, in this order */
#define GPT_SHARD_STRIPE_DEFAULT 4096

void gpt_options_default(gpt_options *o);
/* Parses the gpt flags (see gpt_usage) out of argv[0..argc-1]; both "--flag value" and
 * "--flag=value". Recognised flags and their values are removed from argv in place; everything
 * else (unknown flags, positional arguments) is kept, in order, at the front of argv, and
 * argv[argc - consumed] is set to NULL. Returns the number of consumed entries (so the caller's
 * argc becomes argc - consumed), or -1 with err for a bad value or a flag missing its value.
 * Pass argv + 1 / argc - 1 to skip the program name. Strings point into argv. */
int gpt_options_parse(gpt_options *o, int argc, char **argv, char *err, size_t errlen);
void gpt_usage(FILE *f);
/* The model flags by which mine differs from run, as flags ("--layers 4 --dim 64") into out; returns how
 * many differ (0: "", the same model). For a worker whose flags would change the run's model. */
int gpt_config_diff_flags(const gpt_config *run, const gpt_config *mine, char *out, size_t cap);
/* Learning rate of step s (0-based): linear warmup over warmup_steps, then cosine decay to
 * lr*min_lr_ratio at total_steps (constant lr if total_steps <= 0). */
double gpt_lr_at(const gpt_options *o, long s);

/* The trainer (trainer.h). t->name is "gpt". step(): one batch forward + backward, clip, AdamW;
 * evaluates every eval_every steps (stats.eval_loss), logs to log_path, checkpoints every
 * checkpoint_every steps and at destroy. evaluate(): mean loss over eval_batches fixed validation
 * batches. */
trainer *gpt_trainer_create(const gpt_options *o, char *err, size_t errlen);
/* Writes the checkpoint now (to o->checkpoint_path). */
int gpt_trainer_save(trainer *t, char *err, size_t errlen);
/* Step count of the trainer (restored from a checkpoint). */
long gpt_trainer_steps(const trainer *t);
/* The data position (random stream, sequential cursor) the next batch is drawn from. */
void gpt_trainer_data_position(const trainer *t, uint64_t *rng, uint64_t *cursor);
/* "cpu" or "cuda": the backend gpt_trainer_create picked. */
const char *gpt_trainer_device(const trainer *t);
/* One line for the worker's log: the backend and its arithmetic, e.g. "cuda, bf16 products on fp32 master
 * weights, flash attention" or "cpu, fp32, 2 threads". */
void gpt_trainer_describe(const trainer *t, char *buf, size_t len);
/* The CUDA backend of a trainer on "cuda" (worker/cuda/gpt_cuda.h), NULL on the CPU: tests read its
 * gradients and moments to replay a step on the CPU (tests/test_cuda_step.c). */
struct gpt_cuda;
struct gpt_cuda *gpt_trainer_cuda(trainer *t);
/* DiLoCo on the device: on the CUDA backend, fill ops with libdiloco's device hooks over the device
 * parameters (worker/cuda/diloco_cuda.h) and return 1; from then on the trainer keeps its parameters
 * on the device only (no copy to t->params after each step; a checkpoint copies them first) and
 * libdiloco must be opened with these hooks. 0 (ops zeroed) on the CPU backend, -1 on error. */
struct diloco_device_ops;
int gpt_trainer_device_ops(trainer *t, struct diloco_device_ops *ops, char *err, size_t errlen);
/* Copy the current parameters into t->params (needed only after gpt_trainer_device_ops). */
int gpt_trainer_params_to_host(trainer *t, char *err, size_t errlen);

/* ---- data ---------------------------------------------------------------------------------- */
/* Token file: a 64-byte little-endian header
 *   char magic[8] = "RDLTOKEN"; uint32 version = 1; uint32 token_bytes = 2; uint64 ntokens;
 *   uint64 ntrain; uint32 vocab; 28 bytes zero
 * then ntokens uint16 tokens: [0, ntrain) training, [ntrain, ntokens) validation. */
#define GPT_TOKEN_MAGIC "RDLTOKEN"
#define GPT_TOKEN_VERSION 1
#define GPT_TOKEN_HEADER 64
typedef struct gpt_tokens {
    uint16_t *tok;
    uint64_t ntokens, ntrain;
    uint32_t vocab;
} gpt_tokens;
int gpt_tokens_load(const char *path, gpt_tokens *out, char *err, size_t errlen);
void gpt_tokens_free(gpt_tokens *t);
/* Byte-level tokenisation of input into a token file; val_fraction of the tokens (the end) are the
 * validation split. Prints what it wrote to stdout. */
int gpt_prepare_data(const char *input, const char *output, double val_fraction, char *err, size_t errlen);

/* One worker's part of the training split [0, ntrain) (gpt_part.c): --num-shards parts, either
 * contiguous (part i is [ntrain*i/n, ntrain*(i+1)/n)) or striped (stripes of `stripe` tokens, stripe
 * k in part k mod n; a window never crosses a stripe). With one part both are the whole split. */
typedef struct gpt_part {
    uint64_t ntrain, parts, index, seq;
    uint64_t stripe;                  /* 0: contiguous */
    uint64_t lo, hi;                  /* contiguous: the part is [lo, hi); stripe: lo = its first token */
    uint64_t nfull;                   /* stripe: the part's full stripes */
    uint64_t tail_start, tail_starts; /* stripe: the split's last, shorter stripe, its window starts if ours */
    uint64_t starts;                  /* window starts (windows of seq+1 tokens) in the part */
} gpt_part;
/* layout: GPT_SHARD_*; stripe: tokens per stripe (>= seq+1, used by the stripe layout). Fails with a
 * message when the part holds fewer than 2 windows or the stripe is shorter than a window. */
int gpt_part_init(gpt_part *p, uint64_t ntrain, int num_shards, int shard_index, int layout, int stripe, int seq,
                  char *err, size_t errlen);
/* The r-th window start of the part, r < p->starts, in increasing order. */
uint64_t gpt_part_start(const gpt_part *p, uint64_t r);
/* Sequential order: the window start at or after *cursor in the part (wrapping to its first window),
 * and *cursor moved on by seq. */
uint64_t gpt_part_next(const gpt_part *p, uint64_t *cursor);
/* `bin/worker prepare-data --input FILE --output FILE.tok [--val-fraction 0.05]`; argv[0] is the
 * subcommand name. Returns a process exit code. */
int gpt_prepare_data_main(int argc, char **argv);

#endif
