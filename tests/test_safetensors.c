/*
 * test_safetensors.c: the safetensors reader (common/format/safetensors.c): a valid file's tensors,
 * metadata and order; conversion of every float dtype to fp32; and a refusal, with its message, of
 * each malformed header the reader promises to catch, including the element count of 2^62 whose
 * byte size wraps around to a few bytes (the crafted checkpoint that crashed the coordinator).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <math.h>
#include <cmocka.h>

#include "format/safetensors.h"

/* a file image: 8-byte length, the header, then dlen bytes of data (copied from data, or 0x00) */
static unsigned char *image(const char *header, const void *data, size_t dlen, size_t *len)
{
    size_t h = strlen(header);
    *len = 8 + h + dlen;
    unsigned char *b = calloc(1, *len);
    uint64_t le = h;
    memcpy(b, &le, 8);
    memcpy(b + 8, header, h);
    if (data) memcpy(b + 8 + h, data, dlen);
    return b;
}

static int parse(const char *header, size_t dlen, safetensors *st, char *err, size_t errlen)
{
    size_t len;
    unsigned char *b = image(header, NULL, dlen, &len);
    int rc = safetensors_parse(b, len, st, err, errlen);
    free(b);
    return rc;
}

static void reads_tensors_and_metadata_in_file_order(void **state)
{
    (void)state;
    safetensors st;
    char err[512] = "";
    const char *h = "{\"__metadata__\":{\"format\":\"pt\",\"b\":\"2\"},"
                    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                    "\"a\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[24,26]},"
                    "\"e\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[26,26]}}   ";
    assert_int_equal(parse(h, 26, &st, err, sizeof err), 0);
    assert_int_equal(st.ntensors, 3);
    assert_string_equal(st.tensors[0].name, "w");
    assert_string_equal(st.tensors[1].name, "a");
    assert_string_equal(st.tensors[2].name, "e");
    assert_int_equal(st.tensors[0].ndim, 2);
    assert_int_equal(st.tensors[0].numel, 6);
    assert_int_equal(st.tensors[1].ndim, 0);
    assert_int_equal(st.tensors[1].numel, 1);
    assert_int_equal(st.tensors[2].numel, 0);
    assert_int_equal(st.tensors[1].dtype, ST_BF16);
    assert_int_equal(st.data_start, 8 + strlen(h));
    assert_int_equal(st.data_len, 26);
    assert_int_equal(st.nmeta, 2);
    assert_string_equal(st.meta_keys[0], "format");
    assert_string_equal(safetensors_meta(&st, "b"), "2");
    assert_null(safetensors_meta(&st, "c"));
    assert_ptr_equal(safetensors_find(&st, "a"), &st.tensors[1]);
    assert_null(safetensors_find(&st, "__metadata__"));
    assert_true(safetensors_is_float(ST_BF16));
    assert_false(safetensors_is_float(ST_I64));
    safetensors_free(&st);
}

static void converts_every_float_dtype_to_f32(void **state)
{
    (void)state;
    safetensors_tensor t = {.name = "t", .ndim = 1};
    float out[6];
    char err[256];
    /* F16: 1, -2, 65504 (max), the smallest subnormal 2^-24, -0, Inf */
    uint16_t f16[6] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000, 0x7c00};
    t.dtype = ST_F16;
    t.numel = 6;
    assert_int_equal(safetensors_to_f32(&t, f16, out, err, sizeof err), 0);
    assert_true(out[0] == 1.0f && out[1] == -2.0f && out[2] == 65504.0f && out[3] == ldexpf(1.0f, -24));
    assert_true(out[4] == 0.0f && signbit(out[4]) && isinf(out[5]));
    uint16_t f16nan = 0x7e00;
    t.numel = 1;
    assert_int_equal(safetensors_to_f32(&t, &f16nan, out, err, sizeof err), 0);
    assert_true(isnan(out[0]));
    /* BF16: the top half of the fp32 */
    uint16_t bf[2] = {0x3fc0, 0xc120};
    t.dtype = ST_BF16;
    t.numel = 2;
    assert_int_equal(safetensors_to_f32(&t, bf, out, err, sizeof err), 0);
    assert_true(out[0] == 1.5f && out[1] == -10.0f);
    double f64[3] = {0.1, -3.0, 1e300};
    t.dtype = ST_F64;
    t.numel = 3;
    assert_int_equal(safetensors_to_f32(&t, f64, out, err, sizeof err), 0);
    assert_true(out[0] == 0.1f && out[1] == -3.0f && isinf(out[2]));
    int32_t i32[1] = {7};
    t.dtype = ST_I32;
    t.numel = 1;
    assert_int_equal(safetensors_to_f32(&t, i32, out, err, sizeof err), -1);
    assert_non_null(strstr(err, "I32"));
}

static void reads_a_file_through_open(void **state)
{
    (void)state;
    char path[] = "/tmp/test_safetensors_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    uint16_t data[3] = {0x3c00, 0x4000, 0x4200}; /* F16 1, 2, 3 */
    size_t len;
    unsigned char *b = image("{\"x\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}", data, 6, &len);
    assert_int_equal(write(fd, b, len), (ssize_t)len);
    close(fd);
    free(b);
    safetensors st;
    char err[512];
    assert_int_equal(safetensors_open(path, &st, err, sizeof err), 0);
    float out[3];
    assert_int_equal(safetensors_read_f32(&st, safetensors_find(&st, "x"), out, err, sizeof err), 0);
    assert_true(out[0] == 1.0f && out[1] == 2.0f && out[2] == 3.0f);
    safetensors_free(&st);
    unlink(path);
    assert_int_equal(safetensors_open(path, &st, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
}

/* each header is refused and the message names the problem */
static void refuses(const char *header, size_t dlen, const char *want)
{
    safetensors st;
    char err[512] = "";
    int rc = parse(header, dlen, &st, err, sizeof err);
    if (rc == 0 || !strstr(err, want)) fail_msg("header %s: rc %d, message \"%s\", want \"%s\"", header, rc, err, want);
}

static void refuses_malformed_headers(void **state)
{
    (void)state;
    refuses("[1,2]", 0, "not one JSON object");
    refuses("{\"x\":", 0, "not one JSON object");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
            8, "not one JSON object");
    refuses("{\"__metadata__\":{\"a\":1}}", 0, "not a string");
    refuses("{\"__metadata__\":[]}", 0, "not an object");
    refuses("{\"x\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "begin <= end");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, "begin <= end");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4, "do not fit in the 4-byte");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "do not fill");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}",
            8, "overlap");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6, "cover 4 of the 6");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, "is not {");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
            "dimensions");
}

/* 2^62 elements of 4 bytes wrap to 0 bytes in 64 bits; 2^32 * 2^32 wraps the element count itself */
static void refuses_sizes_that_overflow(void **state)
{
    (void)state;
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0, "do not fill");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[4611686018427387905],\"data_offsets\":[0,4]}}", 4, "do not fill");
    refuses("{\"x\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
            "overflows 64 bits");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551615]}}", 4,
            "too big integer");
    refuses("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,9223372036854775807]}}", 4, "do not fit");
}

static void refuses_bad_lengths(void **state)
{
    (void)state;
    safetensors st;
    char err[512];
    unsigned char short_file[5] = {0};
    assert_int_equal(safetensors_parse(short_file, sizeof short_file, &st, err, sizeof err), -1);
    assert_non_null(strstr(err, "shorter than"));
    size_t len;
    unsigned char *b = image("{}", NULL, 0, &len);
    uint64_t huge = UINT64_MAX;
    memcpy(b, &huge, 8);
    assert_int_equal(safetensors_parse(b, len, &st, err, sizeof err), -1);
    assert_non_null(strstr(err, "does not fit"));
    free(b);
    b = image("{}", NULL, 0, &len);
    assert_int_equal(safetensors_parse(b, len, &st, err, sizeof err), 0);
    assert_int_equal(st.ntensors, 0);
    safetensors_free(&st);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_tensors_and_metadata_in_file_order),
        cmocka_unit_test(converts_every_float_dtype_to_f32),
        cmocka_unit_test(reads_a_file_through_open),
        cmocka_unit_test(refuses_malformed_headers),
        cmocka_unit_test(refuses_sizes_that_overflow),
        cmocka_unit_test(refuses_bad_lengths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
