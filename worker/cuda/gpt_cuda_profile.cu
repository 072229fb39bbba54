/* gpt_cuda_profile.cu: where a CUDA GPT step's time goes, for the benchmark (bin/bench-trainer_cuda
 * --profile) and for whoever tunes the bf16 path on a GPU: with profiling on (gpt_cuda_set_profile), the
 * model brackets each launcher call of a step with two CUDA events on its stream (gpt_prof_begin /
 * gpt_prof_end, through gpt_cuda_model.cu's TIMED), and once the stream has been waited for, the elapsed
 * time of each pair is added to its phase (gpt_prof_fold). Off, the model calls nothing here.
 *
 * The events time the GPU, not the host: a phase is the span from its first kernel's start to its last
 * one's end on the stream, and the phases of a step add up to the step's GPU time less the gaps between
 * launches. Recording an event costs a few microseconds of host time per call (about 500 per GPT-2 small
 * step), so a profiled step runs a little slower than an unprofiled one: the bench times its steps
 * without it and profiles separate ones. */
#include "gpt_cuda_internal.h"

#include <stdlib.h>

#define PROF_PAIRS 2048 /* event pairs per step: GPT-2 small records about 250 */

struct gpt_prof {
    cudaEvent_t ev[2 * PROF_PAIRS];
    unsigned char phase[PROF_PAIRS];
    int used, open; /* pairs recorded since the last fold; the pair begun and not yet ended, or -1 */
    double ms[GPT_PHASES];
    long steps;
};

static const char *const phase_names[GPT_PHASES] = {
    "weights to bf16", "embedding", "layernorm", "linear layers", "attention", "gelu",
    "residual",        "lm head",   "loss",      "clip",          "adamw",
};

gpt_prof *gpt_prof_create(char *err, size_t errlen)
{
    gpt_prof *p = (gpt_prof *)calloc(1, sizeof *p);
    if (!p) {
        err_set(err, errlen, "gpt cuda profile: out of memory");
        return NULL;
    }
    p->open = -1;
    for (int i = 0; i < 2 * PROF_PAIRS; i++)
        if (cudaEventCreate(&p->ev[i]) != cudaSuccess) {
            err_set(err, errlen, "gpt cuda profile: cudaEventCreate: %s", cudaGetErrorString(cudaGetLastError()));
            gpt_prof_free(p);
            return NULL;
        }
    return p;
}

void gpt_prof_free(gpt_prof *p)
{
    if (!p) return;
    for (int i = 0; i < 2 * PROF_PAIRS; i++)
        if (p->ev[i]) cudaEventDestroy(p->ev[i]);
    free(p);
}

void gpt_prof_begin(gpt_prof *p, int phase, cudaStream_t st)
{
    if (!p || p->used >= PROF_PAIRS) return; /* beyond the pool a step's last calls go untimed */
    p->open = p->used;
    p->phase[p->open] = (unsigned char)phase;
    cudaEventRecord(p->ev[2 * p->open], st);
}

int gpt_prof_end(gpt_prof *p, cudaStream_t st, int rc)
{
    if (!p || p->open < 0) return rc;
    cudaEventRecord(p->ev[2 * p->open + 1], st);
    p->used++;
    p->open = -1;
    return rc;
}

/* adds the recorded pairs to their phases as one step; the stream must have been waited for */
void gpt_prof_fold(gpt_prof *p)
{
    if (!p || !p->used) return;
    for (int i = 0; i < p->used; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]) == cudaSuccess) p->ms[p->phase[i]] += ms;
    }
    cudaGetLastError(); /* an unfinished pair (a failed step) is only left out */
    p->used = 0;
    p->steps++;
}

int gpt_prof_read(gpt_prof *p, const char **names, double *ms, int max, long *steps)
{
    int n = max < GPT_PHASES ? max : GPT_PHASES;
    for (int i = 0; i < n; i++) {
        names[i] = phase_names[i];
        ms[i] = p->steps ? p->ms[i] / (double)p->steps : 0.0;
    }
    if (steps) *steps = p->steps;
    return n;
}
