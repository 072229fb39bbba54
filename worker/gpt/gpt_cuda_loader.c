/* gpt_cuda_loader.c: the GPT trainer reaches its CUDA backend through dlopen, so a CPU worker never
 * loads CUDA.
 *
 * Linking cuBLAS and the CUDA runtime into bin/worker cost every worker 0.2-0.4 s (3.5 s on a loaded
 * machine) and about 200 MB of resident memory before main(), even with --device cpu: the dynamic
 * loader relocates libcublasLt at start. The backend (worker/cuda/gpt_cuda_*.cu and diloco_cuda.cu)
 * is built instead into bin/libdiloco_gpt_cuda.so, next to bin/worker, and this file defines the
 * functions of gpt_cuda.h and diloco_cuda.h that worker/gpt/gpt_trainer.c calls (and the two parameter
 * copies tests/tools/group_worker's CUDA ranks make) as thin forwards to that library, opened on first use.
 *
 * - gpt_cuda_device_count is the entry: with --device auto (the default) on a machine without an
 *   NVIDIA device node it answers 0 without loading anything; otherwise it loads the library and asks.
 * - The library is found by the RUNPATH of the program ($ORIGIN: bin/ for bin/worker) or
 *   $DILOCO_CUDA_BACKEND (a path) when set. A failed load is an error message, never an exit.
 * - The other forwards run only after gpt_cuda_create succeeded, so the library is loaded then; the
 *   free functions accept NULL without it.
 *
 * Programs that link the CUDA objects statically (the CUDA unit tests, bench/trainer_cuda.c) define
 * these symbols themselves and never pull this object out of libtrainers.a. */
#ifdef DILOCO_HAVE_CUDA

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "cuda/diloco_cuda.h"
#include "cuda/gpt_cuda.h"
#include "gpt/gpt_cuda_loader.h"

#define BACKEND_SONAME "libdiloco_gpt_cuda.so"

/* every symbol the trainer and group_worker call: one function pointer each, named like the function */
/* clang-format off */
#define BACKEND_SYMBOLS(X)                                                                                     \
    X(gpt_cuda_device_count)                                                                                   \
    X(gpt_cuda_create) X(gpt_cuda_free) X(gpt_cuda_set_precision) X(gpt_cuda_set_attention)                   \
    X(gpt_cuda_attention) X(gpt_cuda_attention_note) X(gpt_cuda_precision_note)                               \
    X(gpt_cuda_set_params)                                                                                     \
    X(gpt_cuda_get_params) X(gpt_cuda_set_moments) X(gpt_cuda_get_moments) X(gpt_cuda_pin) X(gpt_cuda_unpin)  \
    X(gpt_cuda_forward) X(gpt_cuda_backward) X(gpt_cuda_clip) X(gpt_cuda_last_norm) X(gpt_cuda_adamw)         \
    X(gpt_cuda_sync) X(gpt_cuda_params_device) X(gpt_cuda_stream)                                             \
    X(dl_cuda_create) X(dl_cuda_free) X(dl_cuda_ops) X(dl_cuda_params_upload) X(dl_cuda_params_download)
/* clang-format on */

static struct {
#define BACKEND_FIELD(name) __typeof__(&name) name;
    BACKEND_SYMBOLS(BACKEND_FIELD)
#undef BACKEND_FIELD
} backend;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status = -1;
static char load_error[512];

static void load_backend(void)
{
    const char *path = getenv("DILOCO_CUDA_BACKEND");
    if (!path || !*path) path = BACKEND_SONAME;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        err_set(load_error, sizeof load_error,
                "cannot load the CUDA backend (set DILOCO_CUDA_BACKEND to its path, or build with nvcc so it lies "
                "next to bin/worker): %s",
                dlerror());
        return;
    }
    void *sym;
#define BACKEND_LOOKUP(name)                                                                                   \
    if (!(sym = dlsym(lib, #name))) {                                                                          \
        err_set(load_error, sizeof load_error, "the CUDA backend %s lacks %s: rebuild it (make)", path, #name); \
        dlclose(lib);                                                                                          \
        return;                                                                                                \
    }                                                                                                          \
    memcpy(&backend.name, &sym, sizeof sym); /* ISO C has no cast from void * to a function pointer */
    BACKEND_SYMBOLS(BACKEND_LOOKUP)
#undef BACKEND_LOOKUP
    load_status = 0;
}

int gpt_cuda_backend_load(char *err, size_t errlen)
{
    pthread_once(&load_once, load_backend);
    if (load_status) err_set(err, errlen, "%s", load_error);
    return load_status;
}

/* An NVIDIA driver exposes /dev/nvidiactl (WSL: /dev/dxg); without either there is no device to find. */
static int driver_present(void)
{
    return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/dxg", F_OK) == 0;
}

int gpt_cuda_device_count(char *why, size_t whylen)
{
    char err[512];
    if (!getenv("DILOCO_CUDA_BACKEND") && !driver_present()) {
        err_set(why, whylen, "no NVIDIA driver on this machine (/dev/nvidiactl is absent)");
        return 0;
    }
    if (gpt_cuda_backend_load(err, sizeof err)) {
        err_set(why, whylen, "%s", err);
        return 0;
    }
    return backend.gpt_cuda_device_count(why, whylen);
}

gpt_cuda *gpt_cuda_create(const gpt_config *c, int B, int T, int tf32, char *err, size_t errlen)
{
    if (gpt_cuda_backend_load(err, errlen)) return NULL;
    return backend.gpt_cuda_create(c, B, T, tf32, err, errlen);
}

void gpt_cuda_free(gpt_cuda *g)
{
    if (g) backend.gpt_cuda_free(g);
}

void dl_cuda_free(dl_cuda *c)
{
    if (c) backend.dl_cuda_free(c);
}

/* The rest forward as they are: only reached with a gpt_cuda from gpt_cuda_create. */
int gpt_cuda_set_precision(gpt_cuda *g, int bf16, char *err, size_t errlen)
{
    return backend.gpt_cuda_set_precision(g, bf16, err, errlen);
}

int gpt_cuda_set_attention(gpt_cuda *g, int attention, char *err, size_t errlen)
{
    return backend.gpt_cuda_set_attention(g, attention, err, errlen);
}

int gpt_cuda_attention(const gpt_cuda *g)
{
    return backend.gpt_cuda_attention(g);
}

const char *gpt_cuda_attention_note(const gpt_cuda *g)
{
    return backend.gpt_cuda_attention_note(g);
}

const char *gpt_cuda_precision_note(const gpt_cuda *g)
{
    return backend.gpt_cuda_precision_note(g);
}

int gpt_cuda_set_params(gpt_cuda *g, const float *host, size_t off, size_t n, char *err, size_t errlen)
{
    return backend.gpt_cuda_set_params(g, host, off, n, err, errlen);
}

int gpt_cuda_get_params(gpt_cuda *g, float *host, char *err, size_t errlen)
{
    return backend.gpt_cuda_get_params(g, host, err, errlen);
}

int gpt_cuda_set_moments(gpt_cuda *g, const float *m, const float *v, char *err, size_t errlen)
{
    return backend.gpt_cuda_set_moments(g, m, v, err, errlen);
}

int gpt_cuda_get_moments(gpt_cuda *g, float *m, float *v, char *err, size_t errlen)
{
    return backend.gpt_cuda_get_moments(g, m, v, err, errlen);
}

int gpt_cuda_pin(void *host, size_t bytes)
{
    return backend.gpt_cuda_pin(host, bytes);
}

void gpt_cuda_unpin(void *host)
{
    backend.gpt_cuda_unpin(host);
}

int gpt_cuda_forward(gpt_cuda *g, const int *inputs, const int *targets, float *loss, char *err, size_t errlen)
{
    return backend.gpt_cuda_forward(g, inputs, targets, loss, err, errlen);
}

int gpt_cuda_backward(gpt_cuda *g, char *err, size_t errlen)
{
    return backend.gpt_cuda_backward(g, err, errlen);
}

int gpt_cuda_clip(gpt_cuda *g, double max_norm, double *norm, char *err, size_t errlen)
{
    return backend.gpt_cuda_clip(g, max_norm, norm, err, errlen);
}

double gpt_cuda_last_norm(const gpt_cuda *g)
{
    return backend.gpt_cuda_last_norm(g);
}

int gpt_cuda_adamw(gpt_cuda *g, long t, double lr, double beta1, double beta2, double eps, double weight_decay,
                   char *err, size_t errlen)
{
    return backend.gpt_cuda_adamw(g, t, lr, beta1, beta2, eps, weight_decay, err, errlen);
}

int gpt_cuda_sync(gpt_cuda *g, char *err, size_t errlen)
{
    return backend.gpt_cuda_sync(g, err, errlen);
}

float *gpt_cuda_params_device(gpt_cuda *g)
{
    return backend.gpt_cuda_params_device(g);
}

void *gpt_cuda_stream(gpt_cuda *g)
{
    return backend.gpt_cuda_stream(g);
}

/* The device hooks' side: dl_cuda_create loads the backend itself (tests/tools/group_worker's ranks make a
 * dl_cuda of their own, with no GPT trainer); the rest take the dl_cuda it made. */
dl_cuda *dl_cuda_create(float *params, size_t numel, void *stream, char *err, size_t errlen)
{
    if (gpt_cuda_backend_load(err, errlen)) return NULL;
    return backend.dl_cuda_create(params, numel, stream, err, errlen);
}

void dl_cuda_ops(dl_cuda *c, diloco_device_ops *ops)
{
    backend.dl_cuda_ops(c, ops);
}

int dl_cuda_params_upload(dl_cuda *c, const float *host, size_t off, size_t n, char *err, size_t errlen)
{
    return backend.dl_cuda_params_upload(c, host, off, n, err, errlen);
}

int dl_cuda_params_download(dl_cuda *c, float *host, size_t off, size_t n, char *err, size_t errlen)
{
    return backend.dl_cuda_params_download(c, host, off, n, err, errlen);
}

#else
/* ISO C wants a translation unit to declare something */
typedef int gpt_cuda_loader_unused;
#endif
