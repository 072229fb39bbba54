/* from_state.c: a safetensors file as a run's initial parameters and layout (see from_state.h). */
#include "from_state.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "checkpoint.h"
#include "format/safetensors.h"

#define MAX_TENSORS 1000000

void from_state_free(from_state *fs)
{
    free(fs->params);
    free(fs->tensors);
    memset(fs, 0, sizeof *fs);
}

/* The tensor table, names copied behind it in the same block. */
static int make_table(const safetensors *st, from_state *fs, char *err, size_t errlen)
{
    size_t names = 0;
    for (size_t i = 0; i < st->ntensors; i++) names += strlen(st->tensors[i].name) + 1;
    fs->tensors = malloc(st->ntensors * sizeof *fs->tensors + names);
    if (!fs->tensors) {
        err_set(err, errlen, "out of memory for %zu tensors", st->ntensors);
        return -1;
    }
    char *p = (char *)(fs->tensors + st->ntensors);
    uint64_t off = 0;
    for (size_t i = 0; i < st->ntensors; i++) {
        const safetensors_tensor *t = &st->tensors[i];
        if (!safetensors_is_float(t->dtype)) {
            err_set(err, errlen,
                    "tensor '%s' is %s: only floating-point tensors (F32, F16, BF16, F64) can be "
                    "parameters; write the model's parameters alone (rediloco.save_state)",
                    t->name, safetensors_dtype_name(t->dtype));
            return -1;
        }
        if (t->ndim > 4) {
            err_set(err, errlen, "tensor '%s' has %d dimensions; a run's tensors have at most 4", t->name, t->ndim);
            return -1;
        }
        size_t n;
        if (safetensors_f32_numel(t, &n, err, errlen) < 0) return -1;
        model_tensor *m = &fs->tensors[i];
        memset(m, 0, sizeof *m);
        strcpy(p, t->name);
        m->name = p;
        p += strlen(t->name) + 1;
        m->ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) m->shape[d] = (size_t)t->shape[d];
        m->offset = (size_t)off;
        m->numel = n;
        if (off + n < off) {
            err_set(err, errlen, "the tensors hold more parameters than fit in memory");
            return -1;
        }
        off += n;
    }
    fs->ntensors = (int)st->ntensors;
    fs->numel = off;
    return 0;
}

static int read_values(const safetensors *st, from_state *fs, char *err, size_t errlen)
{
    if (fs->numel > SIZE_MAX / sizeof(float) || !(fs->params = malloc((size_t)fs->numel * sizeof(float)))) {
        err_set(err, errlen, "out of memory for %" PRIu64 " parameters", fs->numel);
        return -1;
    }
    for (int i = 0; i < fs->ntensors; i++) {
        float *dst = fs->params + fs->tensors[i].offset;
        if (safetensors_read_f32(st, &st->tensors[i], dst, err, errlen) < 0) return -1;
        for (size_t j = 0; j < fs->tensors[i].numel; j++)
            if (!isfinite(dst[j])) {
                err_set(err, errlen,
                        "tensor '%s' holds a non-finite value (%g at element %zu): a run starts "
                        "from finite parameters",
                        fs->tensors[i].name, (double)dst[j], j);
                return -1;
            }
    }
    return 0;
}

int from_state_read(const char *path, from_state *fs, char *err, size_t errlen)
{
    memset(fs, 0, sizeof *fs);
    safetensors st;
    char e[768];
    if (safetensors_open(path, &st, e, sizeof e) < 0) { /* its message names the file */
        err_set(err, errlen, "--from-state: %s", e);
        return -1;
    }
    int rc = -1;
    if (st.ntensors == 0 || st.ntensors > MAX_TENSORS)
        snprintf(e, sizeof e, "%zu tensors (a run needs 1 to %d)", st.ntensors, MAX_TENSORS);
    else if (make_table(&st, fs, e, sizeof e) == 0 && fs->numel == 0)
        snprintf(e, sizeof e, "its tensors hold no values");
    else if (fs->tensors && fs->numel > 0 && read_values(&st, fs, e, sizeof e) == 0)
        rc = 0;
    safetensors_free(&st);
    if (rc < 0) {
        err_set(err, errlen, "--from-state %s: %s", path, e);
        from_state_free(fs);
    }
    return rc;
}

int from_state_is_checkpoint(const char *path, char *what, size_t cap)
{
    safetensors st;
    char e[768];
    if (safetensors_open(path, &st, e, sizeof e) < 0) return 0;
    const char *format = safetensors_meta(&st, "format");
    int is = format && !strcmp(format, CKPT_FORMAT);
    if (is) {
        const char *run = safetensors_meta(&st, "run"), *version = safetensors_meta(&st, "version");
        snprintf(what, cap, "run '%s' at version %s", run ? run : "?", version ? version : "?");
    }
    safetensors_free(&st);
    return is;
}

int from_state_match(const from_state *fs, const model_tensor *t, int nt, const char *what, char *err, size_t errlen)
{
    for (int i = 0; i < fs->ntensors || i < nt; i++) {
        char a[96] = "", b[96] = "";
        if (i < fs->ntensors) model_tensor_shape_str(&fs->tensors[i], a, sizeof a);
        if (i < nt) model_tensor_shape_str(&t[i], b, sizeof b);
        const char *fa = i < fs->ntensors ? fs->tensors[i].name : "(none)", *fb = i < nt ? t[i].name : "(none)";
        if (strcmp(fa, fb) != 0 || strcmp(a, b) != 0) {
            err_set(err, errlen,
                    "tensor %d of the file is '%s' %s, of %s '%s' %s: the file is not that model's "
                    "state (drop --trainer and the model flags to take the file's own layout)",
                    i, fa, a, what, fb, b);
            return -1;
        }
    }
    return 0;
}
