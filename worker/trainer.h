/* trainer.h: the interface between bin/worker and a local trainer.
 *
 * bin/worker owns the DiLoCo session (libdiloco, diloco.h) and drives a trainer through this table.
 * A trainer keeps its model parameters in ONE flat fp32 buffer (so DiLoCo can shard and fragment it
 * by offset) and exposes its tensor layout (model_tensor of model/model.h, where each model kind's
 * layout and initialisation live) so shards and Streaming fragments can be cut at tensor
 * boundaries. Two trainers exist: "quadratic" (protocol tests) and "gpt" (the reference GPT, CPU or
 * CUDA). Every function returns 0 on success or -1 with a message in err. */
#ifndef DILOCO_TRAINER_H
#define DILOCO_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct trainer_stats {
    double loss;      /* training loss of the last step (nats per token for the GPT) */
    double eval_loss; /* last validation loss, or -1 when none was computed yet */
    uint64_t tokens;  /* tokens (or samples) processed so far by this trainer */
} trainer_stats;

typedef struct trainer trainer;
struct trainer {
    const char *name;
    size_t numel;                /* parameters in the flat buffer */
    float *params;               /* the flat buffer (owned by the trainer; host memory) */
    const model_tensor *tensors; /* layout, ntensors entries, in offset order, covering [0, numel) */
    int ntensors;
    /* Steps trained before this process: a trainer resumed from a checkpoint of its own sets it (0: fresh).
     * bin/worker counts --steps from there, so that the same command started again finishes the same steps
     * (and a cosine over --steps ends where it was meant to). */
    long resumed_step;
    /* One inner optimisation step (forward, backward, inner optimizer) on params, in place. */
    int (*step)(trainer *t, trainer_stats *out, char *err, size_t errlen);
    /* Called after DiLoCo replaced (part of) params with new global values: [off, off+n). A trainer
     * that mirrors params elsewhere (a GPU) copies them again; others may leave it NULL. */
    int (*params_changed)(trainer *t, size_t off, size_t n, char *err, size_t errlen);
    /* Optional: validation loss now. NULL when the trainer has none. */
    int (*evaluate)(trainer *t, double *loss, char *err, size_t errlen);
    void (*destroy)(trainer *t);
    void *impl;
};

#endif
