/*
 * test_blob.c: the blob format (common/format/blob.c): round trips, rejection of every kind of corruption,
 * forward compatibility (unknown keys ignored), the rules on which keys come together (dt, n, x; no key
 * twice; a non-empty op), and conformance with schemas/blob.md: an encoded
 * header with every field set carries exactly the keys that the schema's "Header keys" table lists.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <msgpack.h>
#include <cmocka.h>

#include "base/util.h"
#include "format/blob.h"

#define SCHEMA_PATH "schemas/blob.md"

static void round_trip_with_payload_keeps_every_field(void **state)
{
    (void)state;
    float payload[5] = {1.5f, -2.0f, 0.0f, 3.25f, 1e-30f};
    blob_header h, d;
    blob_header_init(&h, "push");
    h.dtype = BLOB_F32;
    h.count = 5;
    h.shard = 3;
    h.version = 17;
    h.round = 16;
    h.epoch = 9;
    h.inc = 2;
    h.frag = 0;
    snprintf(h.worker, sizeof h.worker, "worker-a");
    h.lr = 0.7;
    h.mu = 0.9;
    h.flags = 3;
    h.aux = 4;
    uint8_t *buf;
    size_t len;
    char err[256] = "";
    assert_int_equal(blob_encode(&h, payload, sizeof payload, &buf, &len, err, sizeof err), 0);
    assert_int_not_equal(h.xxh, 0);
    const uint8_t *p;
    size_t plen;
    assert_int_equal(blob_decode(buf, len, &d, &p, &plen, err, sizeof err), 0);
    assert_string_equal(d.op, "push");
    assert_int_equal(d.dtype, BLOB_F32);
    assert_int_equal(d.count, 5);
    assert_int_equal(d.xxh, h.xxh);
    assert_int_equal(d.shard, 3);
    assert_int_equal(d.version, 17);
    assert_int_equal(d.round, 16);
    assert_int_equal(d.epoch, 9);
    assert_int_equal(d.inc, 2);
    assert_int_equal(d.frag, 0);
    assert_string_equal(d.worker, "worker-a");
    assert_string_equal(d.code, "");
    assert_true(d.lr == 0.7 && d.mu == 0.9);
    assert_int_equal(d.flags, 3);
    assert_int_equal(d.aux, 4);
    assert_int_equal(plen, sizeof payload);
    assert_memory_equal(p, payload, sizeof payload);
    free(buf);
}

static void round_trip_without_payload_keeps_absent_fields_absent(void **state)
{
    (void)state;
    blob_header h, d;
    blob_header_init(&h, "err");
    snprintf(h.code, sizeof h.code, "STALE");
    snprintf(h.text, sizeof h.text, "round 4 is over; now at 5");
    uint8_t *buf;
    size_t len;
    char err[256];
    assert_int_equal(blob_encode(&h, NULL, 0, &buf, &len, err, sizeof err), 0);
    const uint8_t *p;
    size_t plen;
    assert_int_equal(blob_decode(buf, len, &d, &p, &plen, err, sizeof err), 0);
    assert_string_equal(d.op, "err");
    assert_string_equal(d.code, "STALE");
    assert_string_equal(d.text, "round 4 is over; now at 5");
    assert_int_equal(d.dtype, BLOB_NONE);
    assert_int_equal(d.count, 0);
    assert_int_equal(d.xxh, 0);
    assert_int_equal(d.shard, -1);
    assert_int_equal(d.version, -1);
    assert_int_equal(d.aux, -1);
    assert_int_equal(d.flags, 0);
    assert_true(isnan(d.lr) && isnan(d.mu));
    assert_int_equal(plen, 0);
    free(buf);
}

static void bf16_payload_and_header_only_decode(void **state)
{
    (void)state;
    uint16_t payload[3] = {0x3f80, 0xbf80, 0x0000};
    blob_header h, d;
    blob_header_init(&h, "push");
    h.dtype = BLOB_BF16;
    h.count = 3;
    uint8_t head[BLOB_HEADER_MAX];
    char err[256];
    int hl = blob_encode_header(&h, payload, sizeof payload, head, sizeof head, err, sizeof err);
    assert_true(hl > 0 && hl <= BLOB_HEADER_MAX);
    size_t got_len;
    /* Decoding must work with only the header bytes available, as frame readers do. */
    assert_int_equal(blob_decode_header(head, (size_t)hl, &d, &got_len, err, sizeof err), 0);
    assert_int_equal(got_len, (size_t)hl);
    assert_int_equal(d.dtype, BLOB_BF16);
    assert_int_equal(blob_dtype_size(d.dtype), 2);
    assert_int_equal(blob_check_payload(&d, payload, sizeof payload, err, sizeof err), 0);
}

static void largest_header_fits_the_maximum(void **state)
{
    (void)state;
    blob_header h;
    blob_header_init(&h, "0123456789abcde");
    h.dtype = BLOB_F32;
    h.count = 0;
    h.shard = h.version = h.round = h.epoch = h.inc = h.frag = INT64_MIN;
    h.flags = h.aux = INT64_MIN;
    h.lr = h.mu = 1e300;
    memset(h.worker, 'w', sizeof h.worker - 1);
    memset(h.code, 'c', sizeof h.code - 1);
    memset(h.text, 't', sizeof h.text - 1);
    uint8_t head[BLOB_HEADER_MAX];
    char err[256];
    int hl = blob_encode_header(&h, NULL, 0, head, sizeof head, err, sizeof err);
    assert_true(hl > 0 && hl <= BLOB_HEADER_MAX);
    /* A buffer that is too small is an error, not an overflow. */
    assert_int_equal(blob_encode_header(&h, NULL, 0, head, 100, err, sizeof err), -1);
    assert_non_null(strstr(err, "does not fit"));
}

static void encode_rejects_inconsistent_headers(void **state)
{
    (void)state;
    float x[2] = {1, 2};
    blob_header h;
    uint8_t head[BLOB_HEADER_MAX];
    char err[256];
    blob_header_init(&h, "push");
    h.dtype = BLOB_F32;
    h.count = 3;
    assert_int_equal(blob_encode_header(&h, x, sizeof x, head, sizeof head, err, sizeof err), -1);
    assert_non_null(strstr(err, "payload is 8 bytes"));
    blob_header_init(&h, "ack");
    assert_int_equal(blob_encode_header(&h, x, sizeof x, head, sizeof head, err, sizeof err), -1);
    assert_non_null(strstr(err, "dtype none"));
    blob_header_init(&h, "push");
    h.dtype = 9;
    assert_int_equal(blob_encode_header(&h, NULL, 0, head, sizeof head, err, sizeof err), -1);
    assert_non_null(strstr(err, "dtype"));
    blob_header_init(&h, "");
    assert_int_equal(blob_encode_header(&h, NULL, 0, head, sizeof head, err, sizeof err), -1);
    assert_non_null(strstr(err, "no op"));
    blob_header_init(&h, "ack");
    memset(h.worker, 'w', sizeof h.worker);
    assert_int_equal(blob_encode_header(&h, NULL, 0, head, sizeof head, err, sizeof err), -1);
    assert_non_null(strstr(err, "unterminated"));
}

/* ---- hand-made headers for the corruption cases ---- */

static void pack_s(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* Decode a header made of the given extra key/value writer and expect an error containing needle. */
static void expect_decode_error(const uint8_t *buf, size_t len, const char *needle)
{
    blob_header h;
    size_t hl;
    char err[256] = "";
    int rc = blob_decode_header(buf, len, &h, &hl, err, sizeof err);
    if (rc != -1 || strstr(err, needle) == NULL) fail_msg("rc %d err '%s', wanted '%s'", rc, err, needle);
}

struct kv {
    const char *key;
    int kind; /* 's' string, 'i' int, 'u' uint64 */
    const char *s;
    int64_t i;
    uint64_t u;
};

static void expect_map_error(const struct kv *kvs, size_t n, const char *needle)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, n);
    for (size_t j = 0; j < n; j++) {
        pack_s(&pk, kvs[j].key);
        if (kvs[j].kind == 's')
            pack_s(&pk, kvs[j].s);
        else if (kvs[j].kind == 'u')
            msgpack_pack_uint64(&pk, kvs[j].u);
        else
            msgpack_pack_int64(&pk, kvs[j].i);
    }
    expect_decode_error((const uint8_t *)sb.data, sb.size, needle);
    msgpack_sbuffer_destroy(&sb);
}

static void rejects_truncated_header_and_garbage(void **state)
{
    (void)state;
    blob_header h;
    blob_header_init(&h, "pull");
    h.shard = 1;
    uint8_t head[BLOB_HEADER_MAX];
    char err[256];
    int hl = blob_encode_header(&h, NULL, 0, head, sizeof head, err, sizeof err);
    assert_true(hl > 0);
    for (int cut = 0; cut < hl; cut++) expect_decode_error(head, (size_t)cut, "truncated");
    const uint8_t garbage[] = {0xc1, 0x00, 0x12};
    expect_decode_error(garbage, sizeof garbage, "invalid msgpack byte");
    const char *text = "hello world";
    expect_decode_error((const uint8_t *)text, strlen(text), "not a msgpack map");
    /* A map that claims 4 billion entries must be refused before msgpack-c allocates for them. */
    const uint8_t huge[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'm'};
    expect_decode_error(huge, sizeof huge, "impossible");
    /* An endless header (a string longer than the maximum) is refused too. */
    uint8_t *big = calloc(1, 4096);
    assert_non_null(big);
    big[0] = 0x81; /* map of 1 */
    big[1] = 0xda; /* str16 of 3000 bytes */
    big[2] = 3000 >> 8;
    big[3] = 3000 & 0xff;
    expect_decode_error(big, 4096, "1024-byte maximum");
    free(big);
}

static void rejects_wrong_magic_and_format(void **state)
{
    (void)state;
    const struct kv wrong_magic[] = {{"m", 's', "XYZ", 0, 0}, {"f", 'i', NULL, 1, 0}, {"op", 's', "push", 0, 0}};
    expect_map_error(wrong_magic, 3, "wrong magic");
    const struct kv no_magic[] = {{"f", 'i', NULL, 1, 0}, {"op", 's', "push", 0, 0}};
    expect_map_error(no_magic, 2, "missing magic");
    const struct kv magic_int[] = {{"m", 'i', NULL, 5, 0}, {"f", 'i', NULL, 1, 0}, {"op", 's', "a", 0, 0}};
    expect_map_error(magic_int, 3, "wrong magic");
    const struct kv future[] = {{"m", 's', "DLB", 0, 0}, {"f", 'i', NULL, 2, 0}, {"op", 's', "push", 0, 0}};
    expect_map_error(future, 3, "unsupported blob format version 2");
    const struct kv no_format[] = {{"m", 's', "DLB", 0, 0}, {"op", 's', "push", 0, 0}};
    expect_map_error(no_format, 2, "format version");
    const struct kv no_op[] = {{"m", 's', "DLB", 0, 0}, {"f", 'i', NULL, 1, 0}};
    expect_map_error(no_op, 2, "misses the op");
}

static void rejects_wrong_types_dtype_and_overflow(void **state)
{
    (void)state;
    const struct kv bad_dtype[] = {
        {"m", 's', "DLB", 0, 0}, {"f", 'i', NULL, 1, 0}, {"op", 's', "push", 0, 0}, {"dt", 'i', NULL, 8, 0}};
    expect_map_error(bad_dtype, 4, "unknown blob dtype 8");
    const struct kv op_int[] = {{"m", 's', "DLB", 0, 0}, {"f", 'i', NULL, 1, 0}, {"op", 'i', NULL, 3, 0}};
    expect_map_error(op_int, 3, "'op' must be a string");
    const struct kv shard_str[] = {
        {"m", 's', "DLB", 0, 0}, {"f", 'i', NULL, 1, 0}, {"op", 's', "a", 0, 0}, {"s", 's', "3", 0, 0}};
    expect_map_error(shard_str, 4, "'s' must be an integer");
    const struct kv version_huge[] = {
        {"m", 's', "DLB", 0, 0}, {"f", 'i', NULL, 1, 0}, {"op", 's', "a", 0, 0}, {"v", 'u', NULL, 0, UINT64_MAX}};
    expect_map_error(version_huge, 4, "'v' must be an integer in int64 range");
    const struct kv count_neg[] = {{"m", 's', "DLB", 0, 0},
                                   {"f", 'i', NULL, 1, 0},
                                   {"op", 's', "a", 0, 0},
                                   {"dt", 'i', NULL, 1, 0},
                                   {"n", 'i', NULL, -4, 0}};
    expect_map_error(count_neg, 5, "'n' must be a non-negative integer");
    const struct kv overflow[] = {{"m", 's', "DLB", 0, 0},
                                  {"f", 'i', NULL, 1, 0},
                                  {"op", 's', "push", 0, 0},
                                  {"dt", 'i', NULL, 1, 0},
                                  {"n", 'u', NULL, 0, UINT64_MAX / 2},
                                  {"x", 'u', NULL, 0, 0}};
    expect_map_error(overflow, 6, "overflows");
    const struct kv count_no_dtype[] = {
        {"m", 's', "DLB", 0, 0}, {"f", 'i', NULL, 1, 0}, {"op", 's', "a", 0, 0}, {"n", 'u', NULL, 0, 10}};
    expect_map_error(count_no_dtype, 4, "has n but not all of dt, n and x");
}

/* issue 17: the dtype is range-checked as the 64-bit integer on the wire, before it is narrowed to an
 * int (0x100000001 is not fp32); dt, n and x come all three or not at all (schemas/blob.md) */
static void rejects_wide_dtype_and_partial_payload_keys(void **state)
{
    (void)state;
    const struct kv wide_dtype[] = {{"m", 's', "DLB", 0, 0},   {"f", 'i', NULL, 1, 0},
                                    {"op", 's', "push", 0, 0}, {"dt", 'i', NULL, 0x100000001LL, 0},
                                    {"n", 'u', NULL, 0, 0},    {"x", 'u', NULL, 0, 0}};
    expect_map_error(wide_dtype, 6, "unknown blob dtype 4294967297");
    const struct kv zero_dtype[] = {{"m", 's', "DLB", 0, 0}, {"f", 'i', NULL, 1, 0}, {"op", 's', "push", 0, 0},
                                    {"dt", 'i', NULL, 0, 0}, {"n", 'u', NULL, 0, 0}, {"x", 'u', NULL, 0, 0}};
    expect_map_error(zero_dtype, 6, "unknown blob dtype 0");
    const struct kv x_only[] = {
        {"m", 's', "DLB", 0, 0}, {"f", 'i', NULL, 1, 0}, {"op", 's', "push", 0, 0}, {"x", 'u', NULL, 0, 1234}};
    expect_map_error(x_only, 4, "has x but not all of dt, n and x");
    const struct kv no_x[] = {{"m", 's', "DLB", 0, 0},
                              {"f", 'i', NULL, 1, 0},
                              {"op", 's', "push", 0, 0},
                              {"dt", 'i', NULL, 1, 0},
                              {"n", 'u', NULL, 0, 0}};
    expect_map_error(no_x, 5, "has dt n but not all");
}

static void rejects_duplicate_keys_and_empty_op(void **state)
{
    (void)state;
    const struct kv twice[] = {{"m", 's', "DLB", 0, 0},
                               {"f", 'i', NULL, 1, 0},
                               {"op", 's', "push", 0, 0},
                               {"s", 'i', NULL, 1, 0},
                               {"s", 'i', NULL, 2, 0}};
    expect_map_error(twice, 5, "the key 's' twice");
    const struct kv unknown_twice[] = {{"m", 's', "DLB", 0, 0},
                                       {"f", 'i', NULL, 1, 0},
                                       {"op", 's', "push", 0, 0},
                                       {"zz", 'i', NULL, 1, 0},
                                       {"zz", 'i', NULL, 1, 0}};
    expect_map_error(unknown_twice, 5, "the key 'zz' twice");
    const struct kv empty_op[] = {{"m", 's', "DLB", 0, 0}, {"f", 'i', NULL, 1, 0}, {"op", 's', "", 0, 0}};
    expect_map_error(empty_op, 3, "empty op");
}

static void rejects_strings_too_long(void **state)
{
    (void)state;
    char op16[17], worker64[65], text512[513];
    memset(op16, 'o', 16);
    op16[16] = '\0';
    memset(worker64, 'w', 64);
    worker64[64] = '\0';
    memset(text512, 't', 512);
    text512[512] = '\0';
    const struct kv long_op[] = {{"m", 's', "DLB", 0, 0}, {"f", 'i', NULL, 1, 0}, {"op", 's', op16, 0, 0}};
    expect_map_error(long_op, 3, "'op' is too long");
    const struct kv long_worker[] = {
        {"m", 's', "DLB", 0, 0}, {"f", 'i', NULL, 1, 0}, {"op", 's', "a", 0, 0}, {"w", 's', worker64, 0, 0}};
    expect_map_error(long_worker, 4, "'w' is too long");
    const struct kv long_text[] = {
        {"m", 's', "DLB", 0, 0}, {"f", 'i', NULL, 1, 0}, {"op", 's', "a", 0, 0}, {"t", 's', text512, 0, 0}};
    expect_map_error(long_text, 4, "'t' is too long");
}

static void rejects_payload_length_and_checksum_errors(void **state)
{
    (void)state;
    float payload[4] = {1, 2, 3, 4};
    blob_header h;
    blob_header_init(&h, "params");
    h.dtype = BLOB_F32;
    h.count = 4;
    uint8_t *buf;
    size_t len;
    char err[256];
    assert_int_equal(blob_encode(&h, payload, sizeof payload, &buf, &len, err, sizeof err), 0);
    blob_header d;
    const uint8_t *p;
    size_t plen;
    assert_int_equal(blob_decode(buf, len - 1, &d, &p, &plen, err, sizeof err), -1);
    assert_non_null(strstr(err, "short"));
    uint8_t *longer = malloc(len + 4);
    assert_non_null(longer);
    memcpy(longer, buf, len);
    memset(longer + len, 0, 4);
    assert_int_equal(blob_decode(longer, len + 4, &d, &p, &plen, err, sizeof err), -1);
    assert_non_null(strstr(err, "long"));
    free(longer);
    buf[len - 3] ^= 0x10; /* one bit in the payload */
    assert_int_equal(blob_decode(buf, len, &d, &p, &plen, err, sizeof err), -1);
    assert_non_null(strstr(err, "checksum"));
    free(buf);
}

static void unknown_keys_are_ignored(void **state)
{
    (void)state;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    pack_s(&pk, "m");
    pack_s(&pk, "DLB");
    pack_s(&pk, "zz_future");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_int(&pk, 1);
    pack_s(&pk, "x");
    pack_s(&pk, "f");
    msgpack_pack_int(&pk, 1);
    pack_s(&pk, "op");
    pack_s(&pk, "hello");
    pack_s(&pk, "lr");
    msgpack_pack_int(&pk, 1); /* integer accepted for a float field */
    blob_header h;
    size_t hl;
    char err[256];
    assert_int_equal(blob_decode_header((const uint8_t *)sb.data, sb.size, &h, &hl, err, sizeof err), 0);
    assert_int_equal(hl, sb.size);
    assert_string_equal(h.op, "hello");
    assert_true(h.lr == 1.0);
    msgpack_sbuffer_destroy(&sb);
}

/* Every single-byte mutation and every truncation of a valid blob is either rejected or decodes to a
 * consistent header; nothing crashes (run under ASan/UBSan to make that a strong statement). */
static void mutated_blobs_never_crash_or_pass_silently(void **state)
{
    (void)state;
    float payload[4] = {1, 2, 3, 4};
    blob_header h, d;
    blob_header_init(&h, "push");
    h.dtype = BLOB_F32;
    h.count = 4;
    h.shard = 300;
    snprintf(h.worker, sizeof h.worker, "w-7");
    uint8_t *buf;
    size_t len;
    char err[256];
    assert_int_equal(blob_encode(&h, payload, sizeof payload, &buf, &len, err, sizeof err), 0);
    uint8_t *copy = malloc(len);
    assert_non_null(copy);
    size_t accepted = 0;
    for (size_t pos = 0; pos < len; pos++) {
        for (int v = 0; v < 256; v++) {
            memcpy(copy, buf, len);
            if (copy[pos] == (uint8_t)v) continue;
            copy[pos] = (uint8_t)v;
            const uint8_t *p;
            size_t plen;
            if (blob_decode(copy, len, &d, &p, &plen, err, sizeof err) == 0) {
                /* Only header bytes that do not change the meaning of the payload may survive. */
                assert_int_equal(plen, d.count * blob_dtype_size(d.dtype));
                assert_memory_equal(p, payload, plen);
                accepted++;
            }
        }
    }
    uint64_t seed = 99;
    for (int k = 0; k < 20000; k++) {
        size_t n = (size_t)(splitmix64(&seed) % 64);
        for (size_t i = 0; i < n; i++) copy[i % len] = (uint8_t)splitmix64(&seed);
        size_t hl;
        (void)blob_decode_header(copy, n < len ? n : len, &d, &hl, err, sizeof err);
    }
    /* e.g. a changed worker id or shard still decodes, but far fewer than all mutations. */
    assert_true(accepted < len * 255 / 4);
    free(copy);
    free(buf);
}

/* ---- durable blobs and their keys ---- */

/* A durable log entry of run "R", shard 1, version 3, epoch 2, encoded and decoded (the run travels). */
static blob_header durable_log(void)
{
    float g[2] = {1, 2};
    blob_header h, d;
    blob_header_init(&h, "log");
    h.dtype = BLOB_F32;
    h.count = 2;
    h.shard = 1;
    h.version = 3;
    h.epoch = 2;
    snprintf(h.run, sizeof h.run, "R");
    uint8_t *buf;
    size_t len, plen;
    const uint8_t *p;
    char err[256];
    assert_int_equal(blob_encode(&h, g, sizeof g, &buf, &len, err, sizeof err), 0);
    assert_int_equal(blob_decode(buf, len, &d, &p, &plen, err, sizeof err), 0);
    free(buf);
    assert_string_equal(d.run, "R");
    return d;
}

static void check_key_refuses_a_blob_in_the_wrong_place(void **state)
{
    (void)state;
    blob_header h = durable_log();
    char err[512];
    assert_int_equal(blob_check_key(&h, "dl:{R:1}:log:3:2", err, sizeof err), 0);
    const char *wrong[] = {"dl:{R:0}:log:3:2", "dl:{R:1}:log:4:2", "dl:{R:1}:log:3:1", "dl:{R:1}:snap:3:2",
                           "dl:{S:1}:log:3:2"};
    for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++) {
        err[0] = '\0';
        assert_int_equal(blob_check_key(&h, wrong[i], err, sizeof err), -1);
        char want[256];
        snprintf(want, sizeof want,
                 "%s holds the log entry of shard 1, version 3, epoch 2 (run R), not the one its key names", wrong[i]);
        if (strncmp(err, want, strlen(want)) != 0) fail_msg("%s: '%s'", wrong[i], err);
    }
    /* a blob written before headers carried the run: everything else must still match */
    h.run[0] = '\0';
    assert_int_equal(blob_check_key(&h, "dl:{S:1}:log:3:2", err, sizeof err), 0);
    assert_int_equal(blob_check_key(&h, "dl:{S:2}:log:3:2", err, sizeof err), -1);
    /* a key that is not a durable blob's name */
    assert_int_equal(blob_check_key(&h, "dl:{R}:shards", err, sizeof err), -1);
    assert_non_null(strstr(err, "is not the name of a durable blob"));
    assert_int_equal(blob_check_key(&h, "dl:{R:1}:log:3:2x", err, sizeof err), -1);
}

/* ---- conformance with schemas/blob.md ---- */

/* Keys in backticks in the first column of the "## Header keys" table. */
static size_t read_schema_keys(char keys[][16], size_t max)
{
    FILE *f = fopen(SCHEMA_PATH, "r");
    if (f == NULL) fail_msg("cannot open %s (tests run from the repository root)", SCHEMA_PATH);
    char line[1024];
    int in_section = 0;
    size_t n = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (line[0] == '#') {
            in_section = strncmp(line, "## Header keys", 14) == 0;
            continue;
        }
        if (!in_section || strncmp(line, "| `", 3) != 0) continue;
        const char *start = line + 3;
        const char *end = strchr(start, '`');
        if (end == NULL || (size_t)(end - start) >= 16 || n == max) continue;
        memcpy(keys[n], start, (size_t)(end - start));
        keys[n][end - start] = '\0';
        n++;
    }
    fclose(f);
    return n;
}

static void encoded_header_has_exactly_the_documented_keys(void **state)
{
    (void)state;
    char documented[64][16];
    size_t ndoc = read_schema_keys(documented, 64);
    assert_true(ndoc >= 10);

    float payload[1] = {1};
    blob_header h;
    blob_header_init(&h, "log");
    h.dtype = BLOB_F32;
    h.count = 1;
    h.shard = h.version = h.round = h.epoch = h.inc = h.frag = 1;
    snprintf(h.worker, sizeof h.worker, "w");
    snprintf(h.code, sizeof h.code, "c");
    snprintf(h.text, sizeof h.text, "t");
    snprintf(h.run, sizeof h.run, "r");
    h.lr = 0.5;
    h.mu = 0.5;
    h.flags = 1;
    h.aux = 1;
    uint8_t head[BLOB_HEADER_MAX];
    char err[256];
    int hl = blob_encode_header(&h, payload, sizeof payload, head, sizeof head, err, sizeof err);
    assert_true(hl > 0);

    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&up, (const char *)head, (size_t)hl, &off), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(up.data.type, MSGPACK_OBJECT_MAP);
    assert_int_equal(up.data.via.map.size, ndoc);
    for (uint32_t j = 0; j < up.data.via.map.size; j++) {
        const msgpack_object *k = &up.data.via.map.ptr[j].key;
        assert_int_equal(k->type, MSGPACK_OBJECT_STR);
        int found = 0;
        for (size_t d = 0; d < ndoc; d++)
            found |=
                strlen(documented[d]) == k->via.str.size && memcmp(documented[d], k->via.str.ptr, k->via.str.size) == 0;
        if (!found)
            fail_msg("encoded key '%.*s' is not documented in %s", (int)k->via.str.size, k->via.str.ptr, SCHEMA_PATH);
    }
    msgpack_unpacked_destroy(&up);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip_with_payload_keeps_every_field),
        cmocka_unit_test(round_trip_without_payload_keeps_absent_fields_absent),
        cmocka_unit_test(bf16_payload_and_header_only_decode),
        cmocka_unit_test(largest_header_fits_the_maximum),
        cmocka_unit_test(encode_rejects_inconsistent_headers),
        cmocka_unit_test(rejects_truncated_header_and_garbage),
        cmocka_unit_test(rejects_wrong_magic_and_format),
        cmocka_unit_test(rejects_wrong_types_dtype_and_overflow),
        cmocka_unit_test(rejects_wide_dtype_and_partial_payload_keys),
        cmocka_unit_test(rejects_duplicate_keys_and_empty_op),
        cmocka_unit_test(rejects_strings_too_long),
        cmocka_unit_test(rejects_payload_length_and_checksum_errors),
        cmocka_unit_test(unknown_keys_are_ignored),
        cmocka_unit_test(mutated_blobs_never_crash_or_pass_silently),
        cmocka_unit_test(encoded_header_has_exactly_the_documented_keys),
        cmocka_unit_test(check_key_refuses_a_blob_in_the_wrong_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
