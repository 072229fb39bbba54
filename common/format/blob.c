/*
 * blob.c: encoding and decoding of blob headers (see blob.h and schemas/blob.md).
 *
 * Encoding packs with msgpack-c straight into the caller's fixed buffer. Decoding first bounds-checks
 * the bytes with mpscan (msgpack-c trusts declared sizes), then unpacks the map with msgpack-c and
 * copies each known key into the C struct, checking its type and size; unknown keys are skipped so
 * that a newer peer can add keys without breaking an older one.
 */
#include "base/util.h"
#include "format/blob.h"
#include "format/keys.h"
#include "format/mpscan.h"
#include "math/codec.h"
#include "math/hash.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Keys on the wire (schemas/blob.md lists the same ones). */
#define K_MAGIC "m"
#define K_FORMAT "f"
#define K_OP "op"
#define K_DTYPE "dt"
#define K_COUNT "n"
#define K_XXH "x"
#define K_SHARD "s"
#define K_VERSION "v"
#define K_ROUND "r"
#define K_EPOCH "e"
#define K_INC "i"
#define K_FRAG "fr"
#define K_WORKER "w"
#define K_CODE "c"
#define K_TEXT "t"
#define K_LR "lr"
#define K_MU "mu"
#define K_FLAGS "fl"
#define K_AUX "a"
#define K_RUN "rn"

void blob_header_init(blob_header *h, const char *op)
{
    memset(h, 0, sizeof *h);
    if (op != NULL) snprintf(h->op, sizeof h->op, "%s", op);
    h->dtype = BLOB_NONE;
    h->shard = h->version = h->round = h->epoch = h->inc = h->frag = -1;
    h->lr = h->mu = NAN;
    h->flags = 0;
    h->aux = -1;
}

size_t blob_dtype_size(int dtype)
{
    switch (dtype) {
    case BLOB_F32: return 4;
    case BLOB_BF16: return 2;
    default: return 0;
    }
}

size_t blob_payload_bytes(int dtype, uint64_t count)
{
    return codec_bytes(dtype, count);
}

/* ---- encoding ---- */

struct fixed_buf {
    uint8_t *buf;
    size_t cap;
    size_t len;
    int overflow;
};

static int fixed_buf_write(void *data, const char *p, size_t n)
{
    struct fixed_buf *fb = data;
    if (fb->overflow || n > fb->cap - fb->len) {
        fb->overflow = 1;
        return -1;
    }
    memcpy(fb->buf + fb->len, p, n);
    fb->len += n;
    return 0;
}

static void pack_key(msgpack_packer *pk, const char *key)
{
    size_t n = strlen(key);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, key, n);
}

static void pack_str_field(msgpack_packer *pk, const char *key, const char *value)
{
    pack_key(pk, key);
    size_t n = strlen(value);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, value, n);
}

static void pack_int_field(msgpack_packer *pk, const char *key, int64_t value)
{
    pack_key(pk, key);
    msgpack_pack_int64(pk, value);
}

static void pack_double_field(msgpack_packer *pk, const char *key, double value)
{
    pack_key(pk, key);
    msgpack_pack_double(pk, value);
}

/* The optional integer fields: wire key, place in the struct, and the value meaning "absent". */
struct int_key {
    const char *key;
    size_t offset;
    int64_t absent;
};

static const struct int_key INT_KEYS[] = {
    {K_SHARD, offsetof(blob_header, shard), -1}, {K_VERSION, offsetof(blob_header, version), -1},
    {K_ROUND, offsetof(blob_header, round), -1}, {K_EPOCH, offsetof(blob_header, epoch), -1},
    {K_INC, offsetof(blob_header, inc), -1},     {K_FRAG, offsetof(blob_header, frag), -1},
    {K_FLAGS, offsetof(blob_header, flags), 0},  {K_AUX, offsetof(blob_header, aux), -1},
};
#define INT_KEY_COUNT (sizeof INT_KEYS / sizeof INT_KEYS[0])

static int64_t *int_slot(blob_header *h, const struct int_key *k)
{
    return (int64_t *)((char *)h + k->offset);
}

static int64_t int_value(const blob_header *h, const struct int_key *k)
{
    int64_t v;
    memcpy(&v, (const char *)h + k->offset, sizeof v);
    return v;
}

static int field_is_set_str(const char *s)
{
    return s[0] != '\0';
}

/* Number of map entries pack_header() writes: absent fields are omitted. */
static size_t count_present(const blob_header *h)
{
    size_t n = 3;                      /* m, f, op */
    if (h->dtype != BLOB_NONE) n += 3; /* dt, n, x */
    for (size_t i = 0; i < INT_KEY_COUNT; i++) n += int_value(h, &INT_KEYS[i]) != INT_KEYS[i].absent;
    n += field_is_set_str(h->worker) + field_is_set_str(h->code) + field_is_set_str(h->text) + field_is_set_str(h->run);
    n += !isnan(h->lr) + !isnan(h->mu);
    return n;
}

static void pack_header(msgpack_packer *pk, const blob_header *h)
{
    msgpack_pack_map(pk, count_present(h));
    pack_str_field(pk, K_MAGIC, BLOB_MAGIC);
    pack_int_field(pk, K_FORMAT, BLOB_FORMAT);
    pack_str_field(pk, K_OP, h->op);
    if (h->dtype != BLOB_NONE) {
        pack_int_field(pk, K_DTYPE, h->dtype);
        pack_key(pk, K_COUNT);
        msgpack_pack_uint64(pk, h->count);
        pack_key(pk, K_XXH);
        msgpack_pack_uint64(pk, h->xxh);
    }
    for (size_t i = 0; i < INT_KEY_COUNT; i++)
        if (int_value(h, &INT_KEYS[i]) != INT_KEYS[i].absent)
            pack_int_field(pk, INT_KEYS[i].key, int_value(h, &INT_KEYS[i]));
    if (field_is_set_str(h->worker)) pack_str_field(pk, K_WORKER, h->worker);
    if (field_is_set_str(h->code)) pack_str_field(pk, K_CODE, h->code);
    if (field_is_set_str(h->text)) pack_str_field(pk, K_TEXT, h->text);
    if (field_is_set_str(h->run)) pack_str_field(pk, K_RUN, h->run);
    if (!isnan(h->lr)) pack_double_field(pk, K_LR, h->lr);
    if (!isnan(h->mu)) pack_double_field(pk, K_MU, h->mu);
}

/* Strings are fixed arrays that callers fill themselves: make sure each is terminated. */
static int check_strings_terminated(const blob_header *h, char *err, size_t errlen)
{
    if (strnlen(h->op, sizeof h->op) == sizeof h->op || strnlen(h->worker, sizeof h->worker) == sizeof h->worker ||
        strnlen(h->code, sizeof h->code) == sizeof h->code || strnlen(h->text, sizeof h->text) == sizeof h->text ||
        strnlen(h->run, sizeof h->run) == sizeof h->run) {
        err_set(err, errlen, "blob header has an unterminated string field");
        return -1;
    }
    if (h->op[0] == '\0') {
        err_set(err, errlen, "blob header has no op");
        return -1;
    }
    return 0;
}

static int check_payload_shape(const blob_header *h, size_t payload_len, char *err, size_t errlen)
{
    if (h->dtype == BLOB_NONE) {
        if (h->count != 0 || payload_len != 0) {
            err_set(err, errlen, "blob with dtype none must have no payload (count %llu, %zu bytes)",
                    (unsigned long long)h->count, payload_len);
            return -1;
        }
        return 0;
    }
    if (codec_bytes(h->dtype, 1) == 0) {
        err_set(err, errlen, "unknown blob dtype %d", h->dtype);
        return -1;
    }
    size_t want = codec_bytes(h->dtype, h->count);
    if ((want == 0 && h->count != 0) || want != payload_len) {
        err_set(err, errlen, "payload is %zu bytes but the header says %llu elements of %s (%zu bytes)", payload_len,
                (unsigned long long)h->count, codec_name(h->dtype), want);
        return -1;
    }
    return 0;
}

int blob_encode_header(blob_header *h, const void *payload, size_t payload_len, uint8_t *buf, size_t cap, char *err,
                       size_t errlen)
{
    if (check_payload_shape(h, payload_len, err, errlen) != 0) return -1;
    h->xxh = payload_len > 0 ? hash64(payload, payload_len) : 0;
    return blob_encode_header_hashed(h, payload_len, buf, cap, err, errlen);
}

int blob_encode_header_hashed(blob_header *h, size_t payload_len, uint8_t *buf, size_t cap, char *err, size_t errlen)
{
    if (check_strings_terminated(h, err, errlen) != 0 || check_payload_shape(h, payload_len, err, errlen) != 0)
        return -1;
    struct fixed_buf fb = {.buf = buf, .cap = cap < BLOB_HEADER_MAX ? cap : BLOB_HEADER_MAX};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &fb, fixed_buf_write);
    pack_header(&pk, h);
    if (fb.overflow) {
        err_set(err, errlen, "blob header does not fit in %zu bytes", fb.cap);
        return -1;
    }
    return (int)fb.len;
}

/* ---- decoding ---- */

static int key_is(const msgpack_object *k, const char *name)
{
    size_t n = strlen(name);
    return k->via.str.size == n && memcmp(k->via.str.ptr, name, n) == 0;
}

static int get_str(const msgpack_object *v, const char *key, char *dst, size_t cap, char *err, size_t errlen)
{
    if (v->type != MSGPACK_OBJECT_STR) {
        err_set(err, errlen, "blob header key '%s' must be a string", key);
        return -1;
    }
    if (v->via.str.size >= cap) {
        err_set(err, errlen, "blob header key '%s' is too long (%u bytes, max %zu)", key, v->via.str.size, cap - 1);
        return -1;
    }
    if (v->via.str.size == 0) { /* msgpack-c's pointer is then NULL, which memchr and memcpy must not see */
        dst[0] = '\0';
        return 0;
    }
    if (memchr(v->via.str.ptr, '\0', v->via.str.size) != NULL) {
        err_set(err, errlen, "blob header key '%s' contains a NUL byte", key);
        return -1;
    }
    memcpy(dst, v->via.str.ptr, v->via.str.size);
    dst[v->via.str.size] = '\0';
    return 0;
}

static int get_int(const msgpack_object *v, const char *key, int64_t *out, char *err, size_t errlen)
{
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = v->via.i64;
        return 0;
    }
    if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 <= INT64_MAX) {
        *out = (int64_t)v->via.u64;
        return 0;
    }
    err_set(err, errlen, "blob header key '%s' must be an integer in int64 range", key);
    return -1;
}

static int get_uint(const msgpack_object *v, const char *key, uint64_t *out, char *err, size_t errlen)
{
    if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
        err_set(err, errlen, "blob header key '%s' must be a non-negative integer", key);
        return -1;
    }
    *out = v->via.u64;
    return 0;
}

static int get_double(const msgpack_object *v, const char *key, double *out, char *err, size_t errlen)
{
    /* Integers are accepted too: some msgpack writers (Lua's) encode 1.0 as 1. */
    if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64)
        *out = v->via.f64;
    else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        *out = (double)v->via.u64;
    else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *out = (double)v->via.i64;
    else {
        err_set(err, errlen, "blob header key '%s' must be a number", key);
        return -1;
    }
    return 0;
}

/* which of the keys with rules on their presence were in the map */
struct required_seen {
    int magic, format, op, dtype, count, xxh;
};

static int decode_field(blob_header *h, const msgpack_object *k, const msgpack_object *v, struct required_seen *seen,
                        char *err, size_t errlen)
{
    char magic[8];
    int64_t i;
    for (size_t j = 0; j < INT_KEY_COUNT; j++)
        if (key_is(k, INT_KEYS[j].key)) return get_int(v, INT_KEYS[j].key, int_slot(h, &INT_KEYS[j]), err, errlen);
    if (key_is(k, K_MAGIC)) {
        if (get_str(v, K_MAGIC, magic, sizeof magic, err, errlen) != 0 || strcmp(magic, BLOB_MAGIC) != 0) {
            err_set(err, errlen, "not a blob: wrong magic (want \"%s\")", BLOB_MAGIC);
            return -1;
        }
        seen->magic = 1;
        return 0;
    }
    if (key_is(k, K_FORMAT)) {
        if (get_int(v, K_FORMAT, &i, err, errlen) != 0) return -1;
        if (i != BLOB_FORMAT) {
            err_set(err, errlen, "unsupported blob format version %lld (this build reads %d)", (long long)i,
                    BLOB_FORMAT);
            return -1;
        }
        seen->format = 1;
        return 0;
    }
    if (key_is(k, K_OP)) {
        seen->op = 1;
        return get_str(v, K_OP, h->op, sizeof h->op, err, errlen);
    }
    if (key_is(k, K_DTYPE)) {
        /* checked as int64, before narrowing: 0x100000001 must not pass as F32 */
        seen->dtype = 1;
        if (get_int(v, K_DTYPE, &i, err, errlen) != 0) return -1;
        if (i <= BLOB_NONE || i > BLOB_DTYPE_MAX || codec_bytes((int)i, 1) == 0) {
            err_set(err, errlen, "unknown blob dtype %lld", (long long)i);
            return -1;
        }
        h->dtype = (int)i;
        return 0;
    }
    if (key_is(k, K_COUNT)) {
        seen->count = 1;
        return get_uint(v, K_COUNT, &h->count, err, errlen);
    }
    if (key_is(k, K_XXH)) {
        seen->xxh = 1;
        return get_uint(v, K_XXH, &h->xxh, err, errlen);
    }
    if (key_is(k, K_WORKER)) return get_str(v, K_WORKER, h->worker, sizeof h->worker, err, errlen);
    if (key_is(k, K_CODE)) return get_str(v, K_CODE, h->code, sizeof h->code, err, errlen);
    if (key_is(k, K_TEXT)) return get_str(v, K_TEXT, h->text, sizeof h->text, err, errlen);
    if (key_is(k, K_RUN)) return get_str(v, K_RUN, h->run, sizeof h->run, err, errlen);
    if (key_is(k, K_LR)) return get_double(v, K_LR, &h->lr, err, errlen);
    if (key_is(k, K_MU)) return get_double(v, K_MU, &h->mu, err, errlen);
    return 0; /* unknown key: ignored for forward compatibility */
}

/* whether the j-th key of the map (a string) is one of the keys before it */
static int key_repeats(const msgpack_object *root, uint32_t j)
{
    const msgpack_object *k = &root->via.map.ptr[j].key;
    for (uint32_t i = 0; i < j; i++) {
        const msgpack_object *o = &root->via.map.ptr[i].key;
        if (o->via.str.size == k->via.str.size &&
            (k->via.str.size == 0 || memcmp(o->via.str.ptr, k->via.str.ptr, k->via.str.size) == 0))
            return 1;
    }
    return 0;
}

static int decode_map(const msgpack_object *root, blob_header *h, char *err, size_t errlen)
{
    struct required_seen seen = {0};
    if (root->type != MSGPACK_OBJECT_MAP) {
        err_set(err, errlen, "not a blob: the header is not a msgpack map");
        return -1;
    }
    for (uint32_t j = 0; j < root->via.map.size; j++) {
        const msgpack_object_kv *kv = &root->via.map.ptr[j];
        if (kv->key.type != MSGPACK_OBJECT_STR) {
            err_set(err, errlen, "blob header has a non-string key");
            return -1;
        }
        if (key_repeats(root, j)) {
            err_set(err, errlen, "blob header has the key '%.*s' twice",
                    (int)(kv->key.via.str.size < 16 ? kv->key.via.str.size : 16), kv->key.via.str.ptr);
            return -1;
        }
        if (decode_field(h, &kv->key, &kv->val, &seen, err, errlen) != 0) return -1;
    }
    if (!seen.magic) {
        err_set(err, errlen, "not a blob: missing magic \"%s\"", BLOB_MAGIC);
        return -1;
    }
    if (!seen.format || !seen.op) {
        err_set(err, errlen, "blob header misses the %s", seen.format ? "op" : "format version");
        return -1;
    }
    if (h->op[0] == '\0') {
        err_set(err, errlen, "blob header has an empty op");
        return -1;
    }
    if (seen.dtype + seen.count + seen.xxh != 0 && seen.dtype + seen.count + seen.xxh != 3) {
        char has[16] = "";
        snprintf(has, sizeof has, "%s%s%s", seen.dtype ? " dt" : "", seen.count ? " n" : "", seen.xxh ? " x" : "");
        err_set(err, errlen, "blob header has%s but not all of dt, n and x (all three with a payload, none without)",
                has);
        return -1;
    }
    if (h->dtype != BLOB_NONE && h->count != 0 && codec_bytes(h->dtype, h->count) == 0) {
        err_set(err, errlen, "blob element count %llu overflows", (unsigned long long)h->count);
        return -1;
    }
    return 0;
}

int blob_decode_header(const uint8_t *buf, size_t len, blob_header *h, size_t *header_len, char *err, size_t errlen)
{
    size_t hlen;
    char why[200];
    int rc = -1;
    blob_header_init(h, NULL);
    size_t scan_len = len < BLOB_HEADER_MAX ? len : BLOB_HEADER_MAX;
    if (mpscan_object(buf, scan_len, &hlen, why, sizeof why) != 0) {
        err_set(err, errlen, "bad blob header: %s%s", why,
                scan_len == BLOB_HEADER_MAX ? " (or longer than the 1024-byte maximum)" : "");
        return -1;
    }
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    if (msgpack_unpack_next(&up, (const char *)buf, hlen, &off) != MSGPACK_UNPACK_SUCCESS || off != hlen) {
        err_set(err, errlen, "bad blob header: msgpack-c cannot parse it");
        goto error;
    }
    if (decode_map(&up.data, h, err, errlen) != 0) goto error;
    *header_len = hlen;
    rc = 0;

error:
    msgpack_unpacked_destroy(&up);
    return rc;
}

int blob_check_payload(const blob_header *h, const void *payload, size_t len, char *err, size_t errlen)
{
    return blob_check_payload_hashed(h, len, len > 0 ? hash64(payload, len) : 0, err, errlen);
}

int blob_check_payload_hashed(const blob_header *h, size_t len, uint64_t got, char *err, size_t errlen)
{
    uint64_t want = codec_bytes(h->dtype, h->count); /* overflow already rejected by the decoder */
    if (len != want) {
        err_set(err, errlen, "payload length mismatch: %s (%zu bytes, header says %llu elements = %llu bytes)",
                len < want ? "short" : "long", len, (unsigned long long)h->count, (unsigned long long)want);
        return -1;
    }
    if (got != h->xxh) {
        err_set(err, errlen, "payload checksum mismatch (xxh3 %016llx, header says %016llx)", (unsigned long long)got,
                (unsigned long long)h->xxh);
        return -1;
    }
    return 0;
}

int blob_encode(blob_header *h, const void *payload, size_t payload_len, uint8_t **out, size_t *outlen, char *err,
                size_t errlen)
{
    uint8_t head[BLOB_HEADER_MAX];
    int hl = blob_encode_header(h, payload, payload_len, head, sizeof head, err, errlen);
    if (hl < 0) return -1;
    uint8_t *buf = malloc((size_t)hl + payload_len);
    if (buf == NULL) {
        err_set(err, errlen, "out of memory for a %zu-byte blob", (size_t)hl + payload_len);
        return -1;
    }
    memcpy(buf, head, (size_t)hl);
    if (payload_len > 0) memcpy(buf + hl, payload, payload_len);
    *out = buf;
    *outlen = (size_t)hl + payload_len;
    return 0;
}

int blob_decode(const uint8_t *buf, size_t len, blob_header *h, const uint8_t **payload, size_t *payload_len, char *err,
                size_t errlen)
{
    size_t hl;
    if (blob_decode_header(buf, len, h, &hl, err, errlen) != 0) return -1;
    if (blob_check_payload(h, buf + hl, len - hl, err, errlen) != 0) return -1;
    *payload = buf + hl;
    *payload_len = len - hl;
    return 0;
}

/* ---- durable blobs and their keys ---- */

/* What a durable blob is, in words: "the log entry of shard 2, version 4, epoch 1 (run R)". */
static void describe_durable(const blob_header *h, char *buf, size_t cap)
{
    const char *what = !strcmp(h->op, "snap") ? "snapshot" : !strcmp(h->op, "log") ? "log entry" : NULL;
    char op[sizeof h->op + 8];
    if (what == NULL) snprintf(op, sizeof op, "'%s' blob", h->op);
    snprintf(buf, cap, "the %s of shard %lld, version %lld, epoch %lld%s%s%s", what ? what : op, (long long)h->shard,
             (long long)h->version, (long long)h->epoch, h->run[0] ? " (run " : "", h->run, h->run[0] ? ")" : "");
}

int blob_check_key(const blob_header *h, const char *key, char *err, size_t errlen)
{
    key_blob_name k;
    if (key_parse_blob(key, &k) != 0) {
        err_set(err, errlen, "%s is not the name of a durable blob (dl:{RUN:SHARD}:KIND:VERSION:EPOCH)", key);
        return -1;
    }
    if (strcmp(h->op, k.kind) != 0 || h->shard != k.shard || h->version != k.version || h->epoch != k.epoch ||
        (h->run[0] != '\0' && strcmp(h->run, k.run) != 0)) {
        char is[256];
        describe_durable(h, is, sizeof is);
        err_set(err, errlen, "%s holds %s, not the one its key names (a blob copied to the wrong place?)", key, is);
        return -1;
    }
    return 0;
}
