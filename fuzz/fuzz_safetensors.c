/* fuzz_safetensors.c: libFuzzer target of the safetensors reader (common/format/safetensors.c) on a file held
 * in memory: header, tensor table, metadata, and the fp32 conversion of every float tensor.
 * Checks besides the sanitizers: every tensor the parser accepts lies inside the data section and
 * its byte length is numel times its dtype's size. */
#include <stdint.h>
#include <stdlib.h>

#include "format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    safetensors st;
    char err[512];
    if (safetensors_parse(data, size, &st, err, sizeof err) != 0) return 0;
    if (st.data_start + st.data_len != size) abort();
    for (size_t i = 0; i < st.ntensors; i++) {
        const safetensors_tensor *t = &st.tensors[i];
        if (t->begin > t->end || t->end > st.data_len ||
            t->end - t->begin != t->numel * safetensors_dtype_size(t->dtype))
            abort();
        size_t n;
        if (!safetensors_is_float(t->dtype) || safetensors_f32_numel(t, &n, err, sizeof err) != 0) continue;
        float *f = malloc(n * sizeof(float) + 1);
        if (f && safetensors_to_f32(t, data + st.data_start + t->begin, f, err, sizeof err) != 0) abort();
        free(f);
    }
    safetensors_free(&st);
    return 0;
}
