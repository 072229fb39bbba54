/*
 * safetensors.h: a strict reader of safetensors files (https://huggingface.co/docs/safetensors), the
 * format of ReDiLoCo's checkpoints and of model states exchanged with PyTorch.
 *
 * Layout of a file: 8 bytes little-endian N (the header length), N bytes of a JSON object (the
 * header), then the data section. The header maps each tensor name to {"dtype": "F32", "shape":
 * [d0, d1, ...], "data_offsets": [begin, end]} (offsets in bytes, relative to the start of the data
 * section) and may hold "__metadata__", an object of string values.
 *
 * Everything in a file is untrusted: the parser checks every size for overflow before using it and
 * refuses (with a message that says what is wrong) a header longer than the file or than 100 MiB, a
 * header that is not one JSON object, duplicate keys, an unknown dtype, a shape whose element count
 * overflows 64 bits, data_offsets that are not [begin, end] with begin <= end, a byte length that is
 * not numel * dtype size, and tensors that overlap, lie outside the data section or leave a gap in
 * it (as the reference implementation does: the tensors tile the data section exactly).
 *
 * Parsing needs only the header, so the same code reads a file (safetensors_open, then pread of the
 * tensors one by one) and a buffer in memory (safetensors_parse, used by the fuzz target).
 */
#ifndef DILOCO_SAFETENSORS_H
#define DILOCO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define SAFETENSORS_HEADER_MAX (100u << 20) /* the reference implementation's limit on N */
#define SAFETENSORS_MAX_DIMS 16

typedef enum safetensors_dtype {
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_F8_E5M2,
    ST_F8_E4M3,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_F64,
    ST_I64,
    ST_U64,
    ST_NDTYPES
} safetensors_dtype;

typedef struct safetensors_tensor {
    char *name;
    safetensors_dtype dtype;
    int ndim; /* 0 for a scalar (numel 1) */
    uint64_t shape[SAFETENSORS_MAX_DIMS];
    uint64_t numel;      /* product of shape (checked not to overflow) */
    uint64_t begin, end; /* byte offsets in the data section, end - begin = numel * size */
} safetensors_tensor;

typedef struct safetensors {
    uint64_t header_len;         /* N */
    uint64_t data_start;         /* 8 + N: file offset of the data section */
    uint64_t data_len;           /* bytes of the data section */
    safetensors_tensor *tensors; /* in the header's order */
    size_t ntensors;
    char **meta_keys, **meta_values; /* __metadata__, in the header's order */
    size_t nmeta;
    int fd;         /* safetensors_open's file, else -1 */
    char path[512]; /* for messages */
} safetensors;

/* Parse the header of a file held in memory: buf[0..len) is the whole file (len bytes). */
int safetensors_parse(const void *buf, size_t len, safetensors *st, char *err, size_t errlen);
/* Open and parse path; the file stays open for safetensors_read_* until safetensors_free. */
int safetensors_open(const char *path, safetensors *st, char *err, size_t errlen);
void safetensors_free(safetensors *st);

/* The tensor called name, or NULL. */
const safetensors_tensor *safetensors_find(const safetensors *st, const char *name);
/* The __metadata__ value of key, or NULL. */
const char *safetensors_meta(const safetensors *st, const char *key);

const char *safetensors_dtype_name(safetensors_dtype dt);
size_t safetensors_dtype_size(safetensors_dtype dt); /* bytes per element */
/* F32, F16, BF16, F64: the dtypes safetensors_to_f32 converts */
int safetensors_is_float(safetensors_dtype dt);
/* t's numel when it fits a size_t and its fp32 copy (numel * 4 bytes) too, else -1 with a message */
int safetensors_f32_numel(const safetensors_tensor *t, size_t *numel, char *err, size_t errlen);

/* Convert t's raw bytes (src, end - begin bytes, any alignment) to t->numel fp32 in dst.
 * F64 rounds to nearest (out-of-range values become +-Inf); other dtypes are refused. */
int safetensors_to_f32(const safetensors_tensor *t, const void *src, float *dst, char *err, size_t errlen);
/* Read t of an opened file into dst as fp32 (t->numel floats). */
int safetensors_read_f32(const safetensors *st, const safetensors_tensor *t, float *dst, char *err, size_t errlen);

#endif
