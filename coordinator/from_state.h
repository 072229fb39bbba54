/* from_state.h: a run's version 0 from a model's own weights (`coordinator init --from-state FILE`).
 *
 * Any safetensors file whose tensors are floating point (F32, F16, BF16, F64: converted to fp32) is a
 * parameter layout: its tensors in file order, each a named slice of the flat vector. That is what
 * torch's named_parameters() written in order gives (rediloco.save_state), so the run, its checkpoints
 * and the PyTorch workers agree on every tensor's name, shape and offset. */
#ifndef DILOCO_FROM_STATE_H
#define DILOCO_FROM_STATE_H
#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct from_state {
    float *params; /* numel values, file order */
    uint64_t numel;
    model_tensor *tensors; /* one malloc'ed block with the names: free(tensors) */
    int ntensors;
} from_state;

/* Read path: -1 + one message naming the file and what is wrong (not safetensors, truncated, a
 * non-float or non-finite tensor, more than 4 dimensions, no tensors). */
int from_state_read(const char *path, from_state *fs, char *err, size_t errlen);
void from_state_free(from_state *fs);
/* 1 when path is a ReDiLoCo checkpoint (metadata format "rediloco-checkpoint": a run's saved state, which
 * --from-checkpoint resumes), with what[0..cap) saying whose ("run 'R' at version V"); 0 otherwise,
 * including a file that does not parse (from_state_read then says what is wrong with it). */
int from_state_is_checkpoint(const char *path, char *what, size_t cap);
/* 0 when the file's tensors are exactly t[0..nt) (names, shapes, order); else -1 + err naming the first
 * tensor that differs, `what` naming the model in the message. */
int from_state_match(const from_state *fs, const model_tensor *t, int nt, const char *what, char *err, size_t errlen);
#endif
