/* model.h: what a run knows about a model, without training it.
 *
 * A run's parameters are one flat fp32 vector; a model kind says how that vector is cut into named
 * tensors (the layout: names, shapes, offsets), how it is initialised from a seed, and which
 * configurations are valid. The coordinator (init, checkpoints, shard cuts at tensor boundaries)
 * needs exactly this and nothing of the training, so it lives here, apart from the trainers:
 * plain C on libc/libm and common/base/util (build/libmodel.a), no BLAS, no OpenMP, no CUDA. The
 * trainers (worker/gpt, worker/cuda, worker/trainers/quadratic.c) take their layout and initial
 * values from here too, so a run's version 0 and a worker's own start are the same bytes.
 *
 * Two kinds exist, one file each: "gpt" (gpt_layout.c, the reference GPT) and "quadratic"
 * (quadratic.c, the protocol-test problem); model.c dispatches on the kind for callers that only
 * hold a run's (trainer, model) strings. Every function returning int returns 0 on success or -1
 * with a message in err. */
#ifndef DILOCO_MODEL_H
#define DILOCO_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One named tensor of the flat parameter vector. */
typedef struct model_tensor {
    const char *name; /* e.g. "h.0.attn.qkv.weight" */
    int ndim;
    size_t shape[4];
    size_t offset; /* in elements, into the flat parameter buffer */
    size_t numel;
} model_tensor;

/* ---- gpt: the reference GPT (docs/trainer.md) ---------------------------------------------- */

typedef struct gpt_config {
    int layers, heads, dim, ctx, vocab;
} gpt_config;

/* Checks the config (positive sizes, dim divisible by heads, sizes in range). */
int gpt_config_check(const gpt_config *c, char *err, size_t errlen);

/* The named flat layout, in offset order, contiguous, covering [0, *numel):
 *   wte.weight (vocab, dim)   wpe.weight (ctx, dim)
 *   h.<l>.ln1.weight (dim)  h.<l>.ln1.bias (dim)
 *   h.<l>.attn.qkv.weight (3dim, dim)  h.<l>.attn.qkv.bias (3dim)
 *   h.<l>.attn.proj.weight (dim, dim)  h.<l>.attn.proj.bias (dim)
 *   h.<l>.ln2.weight (dim)  h.<l>.ln2.bias (dim)
 *   h.<l>.mlp.fc.weight (4dim, dim)  h.<l>.mlp.fc.bias (4dim)
 *   h.<l>.mlp.proj.weight (dim, 4dim)  h.<l>.mlp.proj.bias (dim)      for l = 0 .. layers-1
 *   lnf.weight (dim)  lnf.bias (dim)
 * No separate lm_head: logits = lnf(x) wte^T. *tensors is malloc'ed (names included, one block):
 * release it with free(*tensors). */
int gpt_layout(const gpt_config *c, model_tensor **tensors, int *ntensors, size_t *numel, char *err, size_t errlen);
/* Number of tensors per layer and tensors before layer 0 (wte, wpe). */
enum { GPT_TENSORS_PER_LAYER = 12, GPT_TENSORS_HEAD = 2 };

/* Deterministic init from a seed (GPT-2 / nanoGPT): every weight matrix and both embeddings
 * N(0, 0.02); attn.proj.weight and mlp.proj.weight N(0, 0.02/sqrt(2*layers)); biases 0;
 * LayerNorm weights 1, biases 0. Same seed -> same bytes on every machine. */
int gpt_init_params(const gpt_config *c, uint64_t seed, float *params, size_t numel, char *err, size_t errlen);

/* The tensors of a flat buffer (parameters or their gradients) laid out by gpt_layout, by role:
 * the CPU and the CUDA backends address their weights through this one map. */
typedef struct gpt_layer_params {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} gpt_layer_params;
typedef struct gpt_params {
    float *wte, *wpe, *lnfw, *lnfb;
    gpt_layer_params *h; /* one entry per layer, allocated by the caller */
} gpt_params;
/* Points v's fields into base (a buffer of gpt_layout's numel) for the layout tensors/ntensors of
 * gpt_layout. base may be a device address: only offsets are added to it. */
void gpt_params_bind(const model_tensor *tensors, int ntensors, float *base, gpt_params *v);

/* ---- quadratic: the protocol-test problem (worker/trainers/quadratic.h) ---------------------- */

/* Its layout: one tensor "x" of numel parameters. */
model_tensor quadratic_tensor(size_t numel);
/* The initial global parameters of a quadratic run: U(-1, 1) from the seed. */
void quadratic_init_params(uint64_t seed, float *params, size_t n);

/* ---- any kind, as a run records it ------------------------------------------------------------ */

/* A run's model: its kind (the run config's "trainer" field) and that kind's settings. The config's
 * "model" field is model_spec_format's string of it, e.g. "--layers 2 --heads 4 --dim 128 --ctx 128
 * --vocab 256" or "--numel 1000". */
typedef struct model_spec {
    const char *kind; /* "gpt" or "quadratic"; not owned */
    gpt_config gpt;   /* kind "gpt" */
    size_t numel;     /* kind "quadratic" */
} model_spec;

/* The "model" string of s (flags a worker passes on to its trainer). */
void model_spec_format(const model_spec *s, char *out, size_t cap);
/* Parses a run's (trainer, model) strings back into s (s->kind then points to a static string).
 * -1 + err when the kind is unknown or the model string is not that kind's. */
int model_spec_parse(const char *kind, const char *model, model_spec *s, char *err, size_t errlen);
/* The layout of s: *tensors malloc'ed (release with free(*tensors)), in offset order, covering
 * [0, *numel). -1 + err for an unknown kind or an invalid configuration. */
int model_layout(const model_spec *s, model_tensor **tensors, int *ntensors, size_t *numel, char *err, size_t errlen);
/* t's shape as text, e.g. "[32, 16]" (messages that compare layouts). */
void model_tensor_shape_str(const model_tensor *t, char *out, size_t cap);
/* Rank `rank` of `ranks`' dim-0 chunk of tensor t, as torch.chunk and FSDP2's fully_shard cut it:
 * c = ceil(rows / ranks) rows each, rank r rows [r*c, (r+1)*c) clipped to the tensor (the last ranks
 * may get fewer rows or none; a 0-d tensor is rank 0's). Its elements are [*offset, *offset + return)
 * of the flat vector (a count of 0: this rank holds nothing of t). */
size_t model_dim0_chunk(const model_tensor *t, int ranks, int rank, size_t *offset);
/* The deterministic initial parameters of s from seed; numel is model_layout's. */
int model_init_params(const model_spec *s, uint64_t seed, float *params, size_t numel, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
