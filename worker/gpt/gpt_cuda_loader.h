/* gpt_cuda_loader.h: loading the GPT trainer's CUDA backend (bin/libdiloco_gpt_cuda.so) on first use
 * (gpt_cuda_loader.c says why). The functions of cuda/gpt_cuda.h that the trainer calls load it
 * themselves; this is for callers that want the reason a load fails (tests, --help output). */
#ifndef DILOCO_GPT_CUDA_LOADER_H
#define DILOCO_GPT_CUDA_LOADER_H

#include <stddef.h>

/* 0 when the backend library is loaded (once per process), -1 with the reason in err. */
int gpt_cuda_backend_load(char *err, size_t errlen);

#endif
