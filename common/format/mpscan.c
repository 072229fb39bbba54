/*
 * mpscan.c: the msgpack bounds scan of mpscan.h. It walks the bytes once without recursion: it keeps
 * the number of objects still to read, adding a container's elements when it meets one.
 */
#include "base/util.h"
#include "format/mpscan.h"

/* What one msgpack type byte announces. */
struct mp_token {
    size_t fixed;      /* bytes of this token before any variable body (type byte included) */
    size_t len_bytes;  /* size of a big-endian length/count field following the type byte, 0 if none */
    size_t extra;      /* bytes between the length field and the body (the ext type byte) */
    int container;     /* 0 none, 1 array (count elements), 2 map (2*count elements) */
    uint64_t inline_n; /* count/length encoded in the type byte itself (fix types) */
};

static int classify(uint8_t b, struct mp_token *t)
{
    *t = (struct mp_token){.fixed = 1};
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return 0;
    if (b >= 0x80 && b <= 0x8f) {
        t->container = 2;
        t->inline_n = b & 0x0f;
        return 0;
    }
    if (b >= 0x90 && b <= 0x9f) {
        t->container = 1;
        t->inline_n = b & 0x0f;
        return 0;
    }
    if (b >= 0xa0 && b <= 0xbf) {
        t->inline_n = b & 0x1f;
        return 0;
    }
    switch (b) {
    case 0xc4:
    case 0xd9: t->len_bytes = 1; return 0; /* bin8, str8 */
    case 0xc5:
    case 0xda: t->len_bytes = 2; return 0; /* bin16, str16 */
    case 0xc6:
    case 0xdb: t->len_bytes = 4; return 0; /* bin32, str32 */
    case 0xc7:
        t->len_bytes = 1;
        t->extra = 1;
        return 0; /* ext8 */
    case 0xc8:
        t->len_bytes = 2;
        t->extra = 1;
        return 0; /* ext16 */
    case 0xc9:
        t->len_bytes = 4;
        t->extra = 1;
        return 0; /* ext32 */
    case 0xca: t->fixed = 5; return 0;
    case 0xcb: t->fixed = 9; return 0;
    case 0xcc:
    case 0xd0: t->fixed = 2; return 0;
    case 0xcd:
    case 0xd1: t->fixed = 3; return 0;
    case 0xce:
    case 0xd2: t->fixed = 5; return 0;
    case 0xcf:
    case 0xd3: t->fixed = 9; return 0;
    case 0xd4: t->fixed = 3; return 0;
    case 0xd5: t->fixed = 4; return 0;
    case 0xd6: t->fixed = 6; return 0;
    case 0xd7: t->fixed = 10; return 0;
    case 0xd8: t->fixed = 18; return 0;
    case 0xdc:
        t->len_bytes = 2;
        t->container = 1;
        return 0;
    case 0xdd:
        t->len_bytes = 4;
        t->container = 1;
        return 0;
    case 0xde:
        t->len_bytes = 2;
        t->container = 2;
        return 0;
    case 0xdf:
        t->len_bytes = 4;
        t->container = 2;
        return 0;
    default: return -1; /* 0xc1 is never used */
    }
}

static uint64_t read_be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

int mpscan_object(const uint8_t *buf, size_t len, size_t *object_len, char *err, size_t errlen)
{
    size_t pos = 0;
    uint64_t pending = 1;
    while (pending > 0) {
        struct mp_token t;
        if (pos >= len) goto truncated;
        if (classify(buf[pos], &t) != 0) {
            err_set(err, errlen, "invalid msgpack byte 0x%02x at offset %zu", buf[pos], pos);
            return -1;
        }
        uint64_t n = t.inline_n;
        if (t.len_bytes > 0) {
            if (len - pos < 1 + t.len_bytes) goto truncated;
            n = read_be(buf + pos + 1, t.len_bytes);
        }
        pos += t.fixed + t.len_bytes + t.extra;
        pending--;
        if (t.container != 0) {
            uint64_t elements = t.container == 2 ? 2 * n : n;
            size_t left = len - (pos < len ? pos : len);
            /* We cannot tell a cut-off buffer from a lying count; either way the object is unusable. */
            if (pending + elements > left) {
                err_set(err, errlen,
                        "truncated msgpack or impossible element count %llu at offset %zu (%zu bytes left)",
                        (unsigned long long)n, pos, left);
                return -1;
            }
            pending += elements;
        } else if (t.fixed == 1 && (t.len_bytes > 0 || t.inline_n > 0)) {
            /* str/bin/ext body: n bytes */
            if (pos > len || n > len - pos) goto truncated;
            pos += n;
        }
    }
    if (pos > len) goto truncated;
    *object_len = pos;
    return 0;

truncated:
    err_set(err, errlen, "truncated msgpack (needs more than %zu bytes)", len);
    return -1;
}
