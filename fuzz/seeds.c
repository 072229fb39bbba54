/* seeds.c: writes the seed corpora of the fuzz targets that read blobs, msgpack, RESP and URLs
 * (fuzz/corpus/NAME/, see docs/fuzzing.md); fuzz/seeds_checkpoint.py writes those of safetensors and
 * checkpoint. `make fuzz-seeds` runs both.
 *
 * The seeds are what the real encoders produce (common/format/blob.c for every op of schemas/blob.md, the
 * Lua library's msgpack records, a Redis Cluster's replies, a run's config hash), plus the crafted headers of issue 17
 * (a dtype of 2^32 + 1, a checksum without a dtype) and a key given twice, so the fuzzer starts from
 * deep inside each decoder and a regression on any of them fails `make test` at once. */
#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/blob.h"
#include "math/codec_sparse.h"

static const char *root;

static void put(const char *target, const char *name, const void *data, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "seeds: cannot write %s\n", path);
        exit(1);
    }
}

static void put_str(const char *target, const char *name, const char *s)
{
    put(target, name, s, strlen(s));
}

/* a whole blob in a malloc'd buffer */
static uint8_t *blob(blob_header *h, const void *payload, size_t plen, size_t *len)
{
    uint8_t *out;
    char err[256];
    if (blob_encode(h, payload, plen, &out, len, err, sizeof err) != 0) {
        fprintf(stderr, "seeds: %s\n", err);
        exit(1);
    }
    return out;
}

/* ---- blob headers and blobs ------------------------------------------------------------------------ */

static float floats[1000];

static void blobs(void)
{
    static const char *const ops[] = {"hello", "challenge", "auth", "wait",  "pull",
                                      "get",   "ack",       "need", "moved", "err"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        blob_header h;
        blob_header_init(&h, ops[i]);
        h.shard = 3, h.version = 17, h.epoch = 2;
        snprintf(h.worker, sizeof h.worker, "w1");
        snprintf(h.text, sizeof h.text, "%s", i % 2 ? "127.0.0.1:7001" : "w2,w3");
        if (!strcmp(ops[i], "err")) snprintf(h.code, sizeof h.code, "STALE");
        size_t len;
        uint8_t *b = blob(&h, NULL, 0, &len);
        char name[64];
        snprintf(name, sizeof name, "%s.bin", ops[i]);
        put("blob_header", name, b, len);
        put("blob", name, b, len);
        free(b);
    }
    blob_header h;
    blob_header_init(&h, "push");
    h.dtype = BLOB_F32, h.count = 4, h.shard = 0, h.version = 3, h.round = 3, h.frag = 0, h.inc = 1, h.aux = 40;
    snprintf(h.worker, sizeof h.worker, "w1");
    size_t len;
    uint8_t *b = blob(&h, floats, 16, &len);
    put("blob", "push-f32.bin", b, len);
    put("blob_header", "push-f32.bin", b, len);
    free(b);
    uint16_t bf[4] = {0x3f80, 0x4000, 0xbf80, 0};
    h.dtype = BLOB_BF16;
    b = blob(&h, bf, sizeof bf, &len);
    put("blob", "push-bf16.bin", b, len);
    free(b);
    blob_header_init(&h, "log");
    h.dtype = BLOB_F32, h.count = 4, h.shard = 1, h.version = 4, h.round = 4, h.lr = 0.7, h.mu = 0.9, h.flags = 3;
    h.aux = 2;
    b = blob(&h, floats, 16, &len);
    put("blob", "log.bin", b, len);
    put("blob_header", "log.bin", b, len);
    free(b);
}

/* the crafted headers of issue 17 and a repeated key, packed by hand: no encoder writes them */
static void crafted_headers(void)
{
    struct {
        const char *name;
        int wide_dt, x_only, twice;
    } c[] = {{"crafted-dtype-2p32-plus-1.bin", 1, 0, 0},
             {"crafted-x-without-dt.bin", 0, 1, 0},
             {"crafted-key-twice.bin", 0, 0, 1}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, c[i].wide_dt ? 6 : c[i].x_only ? 4 : 5);
        const char *kv[] = {"m", "DLB", "op", "push"};
        for (int k = 0; k < 4; k += 2) {
            msgpack_pack_str_with_body(&pk, kv[k], strlen(kv[k]));
            msgpack_pack_str_with_body(&pk, kv[k + 1], strlen(kv[k + 1]));
        }
        msgpack_pack_str_with_body(&pk, "f", 1);
        msgpack_pack_int(&pk, 1);
        if (c[i].wide_dt) {
            msgpack_pack_str_with_body(&pk, "dt", 2);
            msgpack_pack_uint64(&pk, 0x100000001ull);
            msgpack_pack_str_with_body(&pk, "n", 1);
            msgpack_pack_uint64(&pk, 0);
            msgpack_pack_str_with_body(&pk, "x", 1);
            msgpack_pack_uint64(&pk, 0);
        } else if (c[i].x_only) {
            msgpack_pack_str_with_body(&pk, "x", 1);
            msgpack_pack_uint64(&pk, 0x1234);
        } else {
            msgpack_pack_str_with_body(&pk, "s", 1);
            msgpack_pack_int(&pk, 1);
            msgpack_pack_str_with_body(&pk, "s", 1);
            msgpack_pack_int(&pk, 2);
        }
        put("blob_header", c[i].name, sb.data, sb.size);
        put("blob", c[i].name, sb.data, sb.size);
        put("mpscan", c[i].name, sb.data, sb.size);
        msgpack_sbuffer_destroy(&sb);
    }
}

/* ---- frames: byte 0 picks the reader (0 frame_recv, 1 frame_recv_place), then frames ------------- */

static void frames(void)
{
    for (int reader = 0; reader < 2; reader++) {
        uint8_t *out = malloc(16384);
        size_t used = 1;
        out[0] = (uint8_t)reader;
        size_t counts[2] = {4, 1000}; /* 1000 fp32: more than the target's 2048-byte buffer */
        for (int i = 0; i < 2; i++) {
            blob_header h;
            blob_header_init(&h, "params");
            h.dtype = BLOB_F32, h.count = counts[i], h.shard = 0, h.version = 5, h.epoch = 1;
            size_t len;
            uint8_t *b = blob(&h, floats, counts[i] * 4, &len);
            for (int k = 0; k < 4; k++) out[used++] = (uint8_t)(len >> (8 * k));
            memcpy(out + used, b, len);
            used += len;
            free(b);
        }
        put("frame", reader ? "params-place.bin" : "params.bin", out, used);
        free(out);
    }
}

/* ---- msgpack records of the control plane (as the Lua library packs them with cmsgpack) ----------- */

static void records(void)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "addr", 4);
    msgpack_pack_str_with_body(&pk, "127.0.0.1:7001", 14);
    msgpack_pack_str_with_body(&pk, "pid", 3);
    msgpack_pack_str_with_body(&pk, "4242", 4);
    msgpack_pack_str_with_body(&pk, "last", 4);
    msgpack_pack_uint64(&pk, 1764140000000ull);
    put("mpmap", "server.bin", sb.data, sb.size);
    put("mpscan", "server.bin", sb.data, sb.size);
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 4);
    msgpack_pack_str_with_body(&pk, "speed", 5);
    msgpack_pack_double(&pk, 1234.5);
    msgpack_pack_str_with_body(&pk, "inc", 3);
    msgpack_pack_int(&pk, -3);
    msgpack_pack_str_with_body(&pk, "tags", 4);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_nil(&pk);
    msgpack_pack_true(&pk);
    msgpack_pack_float(&pk, 0.5f);
    msgpack_pack_str_with_body(&pk, "bin", 3);
    msgpack_pack_bin_with_body(&pk, "\x01\x02\x03", 3);
    put("mpmap", "worker.bin", sb.data, sb.size);
    put("mpscan", "worker.bin", sb.data, sb.size);
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_ext_with_body(&pk, "abcd", 4, 7);
    put("mpscan", "ext.bin", sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

/* ---- replay: [n | DN bits, N], then 2-byte-length-prefixed blobs: a snapshot, then log entries ------ */

static void append(uint8_t *out, size_t *used, const uint8_t *b, size_t len)
{
    out[(*used)++] = (uint8_t)len;
    out[(*used)++] = (uint8_t)(len >> 8);
    memcpy(out + *used, b, len);
    *used += len;
}

static void replays(void)
{
    for (int dn = 0; dn < 2; dn++) {
        uint8_t out[4096];
        size_t used = 0, len;
        out[used++] = (uint8_t)(3 | (dn ? 128 : 0)); /* n = 4 */
        out[used++] = 3;                             /* N = 3 */
        blob_header h;
        blob_header_init(&h, "snap");
        h.dtype = BLOB_F32, h.count = dn ? 12 : 8, h.shard = 0, h.version = 2, h.flags = dn ? 3 : 1;
        uint8_t *b = blob(&h, floats, h.count * 4, &len);
        append(out, &used, b, len);
        free(b);
        for (int v = 3; v <= 5; v++) {
            blob_header_init(&h, "log");
            h.dtype = BLOB_F32, h.count = 4, h.shard = 0, h.version = v, h.lr = 0.7, h.mu = 0.9;
            h.flags = dn ? 4 | 1 : (v == 3 ? 3 : 1);
            h.aux = v == 4 ? 0 : 2; /* version 4: a no-op round */
            b = blob(&h, floats + v, 16, &len);
            append(out, &used, b, len);
            free(b);
        }
        put("replay", dn ? "snap-dn-logs.bin" : "snap-logs.bin", out, used);
    }
}

/* ---- URLs and RESP -------------------------------------------------------------------------------- */

/* fuzz_topk's input: byte 0 (bit 0 an update; bits 1-3 a push's width - 2), n in bytes 1-2, the density
 * byte ((b + 1) / 1024), then a shard of n elements encoded as a worker does (codec_sparse.h). */
static size_t topk_shard(unsigned bits, size_t n, double density, uint8_t *out)
{
    static float e[2 * TOPK_CHUNK];
    for (size_t i = 0; i < n; i++) e[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    size_t off = 0, bad;
    for (size_t c = 0; c < n; c += TOPK_CHUNK) {
        size_t m = n - c < TOPK_CHUNK ? n - c : TOPK_CHUNK;
        uint32_t k = topk_count(density, m);
        topk_encode_chunk(e + c, m, k, bits, out + off, &bad);
        off += topk_chunk_bytes(k, m, bits);
    }
    return off;
}

static void topk(void)
{
    enum { N = 4796, DBYTE = 19 };
    static uint8_t in[4 + 8 + 2 * 4 + 2 * 1024]; /* (a payload at 8 bits: 192 bytes) */
    const double density = (DBYTE + 1) / 1024.0;
    const unsigned widths[] = {2, 4, 8};
    const char *tag[] = {"", "4bits-", "8bits-"};
    for (int w = 0; w < 3; w++) {
        in[0] = (uint8_t)((widths[w] - TOPK_BITS_MIN) << 1), in[1] = N & 0xFF, in[2] = N >> 8, in[3] = DBYTE;
        size_t p = topk_shard(widths[w], N, density, in + 4);
        char name[64];
        snprintf(name, sizeof name, "push-%s%d.bin", tag[w], N);
        put("topk", name, in, 4 + p);
        /* the update of two participants with weights 1/2: the same payload twice */
        float half[2] = {0.5f, 0.5f};
        uint8_t *u = in + 4;
        memmove(u + 16, u, p);
        sparse_update_head(u, 2, p, half);
        memcpy(u + 16 + p, u + 16, p);
        in[0] = 1;
        snprintf(name, sizeof name, "update-%s2x%d.bin", tag[w], N);
        put("topk", name, in, 4 + sparse_update_bytes(2, p));
    }
}

static void urls(void)
{
    static const char *const u[] = {"redis://127.0.0.1",
                                    "redis://worker:s3cret@redis.example:6380/5",
                                    "redis://:p%40ss@h/0",
                                    "redis://[::1]:6379/2",
                                    "unix:///run/redis.sock?db=2",
                                    "unix://user:pass@/tmp/r.sock",
                                    "redis://h:65535",
                                    "redis://h:0",
                                    "redis://n1:7000,n2:7001,[::1]:7002",
                                    "redis+sentinel://s1,s2:26380/mymaster/1",
                                    "redis+sentinel://u:p@s1/m?sentinel_username=a&sentinel_password=b"};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "url-%zu.txt", i);
        put_str("url", name, u[i]);
    }
}

static void resp(void)
{
    put_str("cluster", "slots.resp",
            "*3\r\n"
            "*3\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$3\r\nid1\r\n"
            "*4\r\n:5461\r\n:10922\r\n*3\r\n$9\r\n127.0.0.1\r\n:7001\r\n$3\r\nid2\r\n"
            "*3\r\n$9\r\n127.0.0.1\r\n:7101\r\n$3\r\nid4\r\n"
            "*3\r\n:10923\r\n:16383\r\n*3\r\n$0\r\n\r\n:7002\r\n$3\r\nid3\r\n");
    put_str("cluster", "moved.resp", "-MOVED 3999 127.0.0.1:6381\r\n-ASK 12182 [::1]:7002\r\n-MOVED 5 :6380\r\n");
    put_str("cluster", "bad-port.resp", "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$1\r\nh\r\n:70000\r\n");
    put_str("cluster", "fcall.resp",
            "*5\r\n$5\r\nFCALL\r\n$9\r\ndl_arrive\r\n$1\r\n1\r\n$9\r\ndl:{r}:st\r\n$1\r\nx\r\n");
    put_str("cluster", "get.resp", "*2\r\n$3\r\nGET\r\n$14\r\ndl:{r:3}:snap:1\r\n");
}

/* HGETALL dl:{R}:config as a Redis answers it, from name/value pairs */
static void config_reply(const char *name, const char *const *kv, size_t n)
{
    char buf[4096];
    size_t used = (size_t)snprintf(buf, sizeof buf, "*%zu\r\n", n);
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(buf + used, sizeof buf - used, "$%zu\r\n%s\r\n", strlen(kv[i]), kv[i]);
    put("runconf", name, buf, used);
}

static void configs(void)
{
    static const char *const sync_run[] = {"numel",          "200000",
                                           "shard_bounds",   "0,25000,50000,75000,100000,125000,150000,175000,200000",
                                           "frag_bounds",    "0,8",
                                           "mode",           "sync",
                                           "snapshot_every", "2",
                                           "seed",           "7",
                                           "trainer",        "quadratic",
                                           "model",          "--numel 200000",
                                           "secret",         "0123456789abcdef0123456789abcdef",
                                           "weight_by",      "examples",
                                           "layout",         "[[\"x\",[200000],0]]"};
    static const char *const async_dn[] = {"numel",
                                           "40000",
                                           "shard_bounds",
                                           "0,10000,20000,30000,40000",
                                           "frag_bounds",
                                           "0,2,4",
                                           "mode",
                                           "async",
                                           "dn_buffer",
                                           "3",
                                           "dn_variant",
                                           "forgather",
                                           "dn_t0",
                                           "8",
                                           "dn_t0_shards",
                                           "8,8,9,9",
                                           "weight_by",
                                           "tokens",
                                           "weight_ref_tokens",
                                           "4096"};
    config_reply("sync.resp", sync_run, sizeof sync_run / sizeof sync_run[0]);
    config_reply("async-dn.resp", async_dn, sizeof async_dn / sizeof async_dn[0]);
    put_str("runconf", "not-a-hash.resp", "-ERR wrong kind\r\n:7\r\n*2\r\n$5\r\nnumel\r\n:5\r\n");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR   (writes DIR/<target>/ seed files; make fuzz-seeds)\n", argv[0]);
        return 2;
    }
    root = argv[1];
    mkdir(root, 0755);
    for (int i = 0; i < 1000; i++) floats[i] = (float)i * 0.25f - 3.0f;
    blobs();
    crafted_headers();
    frames();
    records();
    replays();
    topk();
    urls();
    resp();
    configs();
    return 0;
}
