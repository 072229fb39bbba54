/* safetensors.c: the strict safetensors reader of safetensors.h. The header is parsed once into a
 * table of tensors whose sizes are all checked against the data section, so a caller may allocate
 * and read any tensor the table lists without further checks. */
#include "format/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads little-endian values as in memory"
#endif

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_NDTYPES] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},   [ST_I8] = {"I8", 1},   [ST_F8_E5M2] = {"F8_E5M2", 1},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_I16] = {"I16", 2}, [ST_U16] = {"U16", 2}, [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},       [ST_I32] = {"I32", 4}, [ST_U32] = {"U32", 4}, [ST_F32] = {"F32", 4},
    [ST_F64] = {"F64", 8},         [ST_I64] = {"I64", 8}, [ST_U64] = {"U64", 8},
};

const char *safetensors_dtype_name(safetensors_dtype dt)
{
    return dt < ST_NDTYPES ? dtypes[dt].name : "?";
}

size_t safetensors_dtype_size(safetensors_dtype dt)
{
    return dt < ST_NDTYPES ? dtypes[dt].size : 0;
}

int safetensors_is_float(safetensors_dtype dt)
{
    return dt == ST_F32 || dt == ST_F16 || dt == ST_BF16 || dt == ST_F64;
}

void safetensors_free(safetensors *st)
{
    for (size_t i = 0; i < st->ntensors; i++) free(st->tensors[i].name);
    for (size_t i = 0; i < st->nmeta; i++) {
        free(st->meta_keys[i]);
        free(st->meta_values[i]);
    }
    free(st->tensors);
    free(st->meta_keys);
    free(st->meta_values);
    if (st->fd >= 0) close(st->fd);
    memset(st, 0, sizeof *st);
    st->fd = -1;
}

/* ---- the header ---------------------------------------------------------------------------------- */

static int parse_metadata(json_t *m, safetensors *st, char *err, size_t errlen)
{
    if (!json_is_object(m)) {
        err_set(err, errlen, "__metadata__ is not an object");
        return -1;
    }
    size_t n = json_object_size(m);
    st->meta_keys = calloc(n + 1, sizeof *st->meta_keys);
    st->meta_values = calloc(n + 1, sizeof *st->meta_values);
    if (!st->meta_keys || !st->meta_values) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v)
    {
        if (!json_is_string(v)) {
            err_set(err, errlen, "__metadata__ \"%.64s\" is not a string", k);
            return -1;
        }
        char *key = strdup(k), *val = strdup(json_string_value(v));
        st->meta_keys[st->nmeta] = key;
        st->meta_values[st->nmeta++] = val;
        if (!key || !val) {
            err_set(err, errlen, "out of memory");
            return -1;
        }
    }
    return 0;
}

static int parse_dtype(const char *s, safetensors_dtype *dt)
{
    for (int i = 0; i < ST_NDTYPES; i++)
        if (!strcmp(s, dtypes[i].name)) {
            *dt = (safetensors_dtype)i;
            return 0;
        }
    return -1;
}

/* a JSON integer >= 0 (jansson's integers are int64) */
static int get_u64(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_tensor(const char *name, json_t *e, uint64_t data_len, safetensors_tensor *t, char *err, size_t errlen)
{
    json_t *dt = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape");
    json_t *offs = json_object_get(e, "data_offsets");
    if (!json_is_object(e) || !json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs)) {
        err_set(err, errlen, "tensor \"%.64s\" is not {\"dtype\", \"shape\", \"data_offsets\"}", name);
        return -1;
    }
    if (parse_dtype(json_string_value(dt), &t->dtype) < 0) {
        err_set(err, errlen, "tensor \"%.64s\" has an unknown dtype \"%.32s\"", name, json_string_value(dt));
        return -1;
    }
    if (json_array_size(shape) > SAFETENSORS_MAX_DIMS) {
        err_set(err, errlen, "tensor \"%.64s\" has %zu dimensions (at most %d)", name, json_array_size(shape),
                SAFETENSORS_MAX_DIMS);
        return -1;
    }
    t->ndim = (int)json_array_size(shape);
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++)
        if (get_u64(json_array_get(shape, (size_t)d), &t->shape[d]) < 0 ||
            __builtin_mul_overflow(t->numel, t->shape[d], &t->numel)) {
            err_set(err, errlen,
                    "tensor \"%.64s\": shape[%d] is not an integer >= 0 or the element count "
                    "overflows 64 bits",
                    name, d);
            return -1;
        }
    uint64_t bytes;
    if (json_array_size(offs) != 2 || get_u64(json_array_get(offs, 0), &t->begin) < 0 ||
        get_u64(json_array_get(offs, 1), &t->end) < 0 || t->begin > t->end) {
        err_set(err, errlen, "tensor \"%.64s\": data_offsets are not [begin, end] with 0 <= begin <= end", name);
        return -1;
    }
    if (t->end > data_len) {
        err_set(err, errlen,
                "tensor \"%.64s\": data_offsets [%" PRIu64 ", %" PRIu64 "] do not fit in the %" PRIu64
                "-byte data section",
                name, t->begin, t->end, data_len);
        return -1;
    }
    if (__builtin_mul_overflow(t->numel, (uint64_t)dtypes[t->dtype].size, &bytes) || bytes != t->end - t->begin) {
        err_set(err, errlen,
                "tensor \"%.64s\": %" PRIu64 " elements of %s do not fill data_offsets [%" PRIu64 ", %" PRIu64 "]",
                name, t->numel, dtypes[t->dtype].name, t->begin, t->end);
        return -1;
    }
    if (!(t->name = strdup(name))) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static int cmp_begin(const void *a, const void *b)
{
    const safetensors_tensor *x = *(const safetensors_tensor *const *)a, *y = *(const safetensors_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* the tensors, in offset order, tile [0, data_len) without overlap or gap */
static int check_tiling(safetensors *st, char *err, size_t errlen)
{
    const safetensors_tensor **by = malloc((st->ntensors + 1) * sizeof *by);
    if (!by) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < st->ntensors; i++) by[i] = &st->tensors[i];
    qsort(by, st->ntensors, sizeof *by, cmp_begin);
    uint64_t at = 0;
    int rc = 0;
    for (size_t i = 0; i < st->ntensors && rc == 0; i++) {
        if (by[i]->begin != at) {
            err_set(err, errlen, "tensor \"%.64s\" starts at byte %" PRIu64 " of the data section, where %s",
                    by[i]->name, by[i]->begin,
                    by[i]->begin < at ? "another tensor lies (overlap)" : "no tensor ends (a gap)");
            rc = -1;
        }
        at = by[i]->end;
    }
    if (rc == 0 && at != st->data_len) {
        err_set(err, errlen, "the tensors cover %" PRIu64 " of the %" PRIu64 " bytes of the data section", at,
                st->data_len);
        rc = -1;
    }
    free(by);
    return rc;
}

static int parse_header(const char *hdr, size_t hlen, safetensors *st, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES, &je);
    int rc = -1;
    if (!root || !json_is_object(root)) {
        err_set(err, errlen, "the header is not one JSON object (%s)", root ? "another JSON value" : je.text);
        goto done;
    }
    st->tensors = calloc(json_object_size(root) + 1, sizeof *st->tensors);
    if (!st->tensors) {
        err_set(err, errlen, "out of memory");
        goto done;
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        if (!strcmp(k, "__metadata__")) {
            if (parse_metadata(v, st, err, errlen) < 0) goto done;
        } else if (parse_tensor(k, v, st->data_len, &st->tensors[st->ntensors], err, errlen) < 0) {
            goto done;
        } else {
            st->ntensors++;
        }
    }
    rc = check_tiling(st, err, errlen);
done:
    json_decref(root);
    return rc;
}

/* N of the first 8 bytes, checked against the total length (file or buffer) */
static int header_len(const unsigned char *first8, uint64_t total, safetensors *st, char *err, size_t errlen)
{
    uint64_t n;
    memcpy(&n, first8, 8);
    if (n < 2 || n > SAFETENSORS_HEADER_MAX || n > total - 8) {
        err_set(err, errlen,
                "header length %" PRIu64 " does not fit (%" PRIu64 " bytes in all, at most %u of "
                "header)",
                n, total, SAFETENSORS_HEADER_MAX);
        return -1;
    }
    st->header_len = n;
    st->data_start = 8 + n;
    st->data_len = total - 8 - n;
    return 0;
}

int safetensors_parse(const void *buf, size_t len, safetensors *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    st->fd = -1;
    const unsigned char *b = buf;
    if (len < 8) {
        err_set(err, errlen, "not a safetensors file (%zu bytes, shorter than the 8-byte header length)", len);
        return -1;
    }
    if (header_len(b, len, st, err, errlen) < 0 ||
        parse_header((const char *)b + 8, st->header_len, st, err, errlen) < 0) {
        safetensors_free(st);
        return -1;
    }
    return 0;
}

static int read_at(int fd, void *dst, size_t len, uint64_t off)
{
    char *p = dst;
    while (len > 0) {
        ssize_t r = pread(fd, p, len > (1u << 30) ? (1u << 30) : len, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = EIO; /* the file shrank under us */
            return -1;
        }
        p += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int safetensors_open(const char *path, safetensors *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    snprintf(st->path, sizeof st->path, "%s", path);
    char e2[512];
    unsigned char first8[8];
    char *hdr = NULL;
    struct stat sb;
    if ((st->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        err_set(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(st->fd, &sb) < 0 || sb.st_size < 8 || read_at(st->fd, first8, 8, 0) < 0) {
        err_set(err, errlen, "%s is not a safetensors file (shorter than 8 bytes)", path);
        goto fail;
    }
    if (header_len(first8, (uint64_t)sb.st_size, st, e2, sizeof e2) < 0) {
        err_set(err, errlen, "%s is not a safetensors file: %s", path, e2);
        goto fail;
    }
    if (!(hdr = malloc(st->header_len)) || read_at(st->fd, hdr, st->header_len, 8) < 0) {
        err_set(err, errlen, "%s: cannot read the %" PRIu64 "-byte header: %s", path, st->header_len,
                hdr ? strerror(errno) : "out of memory");
        goto fail;
    }
    if (parse_header(hdr, st->header_len, st, e2, sizeof e2) < 0) {
        err_set(err, errlen, "%s is not a valid safetensors file: %s", path, e2);
        goto fail;
    }
    free(hdr);
    return 0;
fail:
    free(hdr);
    safetensors_free(st);
    return -1;
}

const safetensors_tensor *safetensors_find(const safetensors *st, const char *name)
{
    for (size_t i = 0; i < st->ntensors; i++)
        if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
    return NULL;
}

const char *safetensors_meta(const safetensors *st, const char *key)
{
    for (size_t i = 0; i < st->nmeta; i++)
        if (!strcmp(st->meta_keys[i], key)) return st->meta_values[i];
    return NULL;
}

/* ---- the data ------------------------------------------------------------------------------------ */

int safetensors_f32_numel(const safetensors_tensor *t, size_t *numel, char *err, size_t errlen)
{
    size_t bytes;
    if (t->numel > SIZE_MAX || __builtin_mul_overflow((size_t)t->numel, sizeof(float), &bytes)) {
        err_set(err, errlen, "tensor \"%.64s\": %" PRIu64 " elements do not fit in memory as fp32", t->name, t->numel);
        return -1;
    }
    *numel = (size_t)t->numel;
    return 0;
}

/* IEEE half to single, exactly (every half is a float) */
static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); /* Inf, NaN (payload kept) */
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign; /* +-0 */
    } else {         /* subnormal half: normal float */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

int safetensors_to_f32(const safetensors_tensor *t, const void *src, float *dst, char *err, size_t errlen)
{
    const unsigned char *s = src;
    size_t n;
    if (safetensors_f32_numel(t, &n, err, errlen) < 0) return -1;
    switch (t->dtype) {
    case ST_F32: memcpy(dst, s, n * 4); return 0;
    case ST_F16:
    case ST_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            if (t->dtype == ST_F16) {
                dst[i] = f16_to_f32(h);
            } else {
                uint32_t bits = (uint32_t)h << 16;
                memcpy(&dst[i], &bits, 4);
            }
        }
        return 0;
    case ST_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, s + 8 * i, 8);
            dst[i] = (float)d;
        }
        return 0;
    default:
        err_set(err, errlen, "tensor \"%.64s\" is %s: only F32, F16, BF16 and F64 convert to fp32", t->name,
                dtypes[t->dtype].name);
        return -1;
    }
}

int safetensors_read_f32(const safetensors *st, const safetensors_tensor *t, float *dst, char *err, size_t errlen)
{
    size_t n, bytes = (size_t)(t->end - t->begin);
    if (safetensors_f32_numel(t, &n, err, errlen) < 0) return -1;
    if (!safetensors_is_float(t->dtype)) return safetensors_to_f32(t, NULL, dst, err, errlen);
    /* F32 straight into dst; the narrower dtypes through a buffer, F64 in slices into no more memory */
    if (t->dtype == ST_F32) {
        if (read_at(st->fd, dst, bytes, st->data_start + t->begin) < 0) goto io;
        return 0;
    }
    size_t esz = dtypes[t->dtype].size, chunk = (1u << 20);
    unsigned char *buf = malloc(chunk * esz);
    if (!buf) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        safetensors_tensor part = *t;
        part.numel = m;
        if (read_at(st->fd, buf, m * esz, st->data_start + t->begin + i * esz) < 0) {
            free(buf);
            goto io;
        }
        safetensors_to_f32(&part, buf, dst + i, err, errlen);
    }
    free(buf);
    return 0;
io:
    err_set(err, errlen, "%s: reading tensor \"%.64s\": %s", st->path, t->name, strerror(errno));
    return -1;
}
