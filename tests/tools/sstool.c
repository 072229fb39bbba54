/*
 * sstool.c: the data-plane client of the shard-server scripts (tests/it_shard_server_basic.sh,
 * tests/it_shard_server_ops.sh): a run initialised by hand, pushes and gets as a worker sends them.
 *
 *   sstool init HOST PORT RUN NSHARDS NUMEL [snapshot_every]  v0 snapshots (theta_i = 0.001*i), dl_init
 *   sstool push ADDR SHARD ROUND WORKER INC N f32|bf16 VALUE [nan|badsum|short|oversize]
 *   sstool get ADDR SHARD VERSION WORKER INC              prints: op version digest code text
 *   sstool hello ADDR RUN
 */
#include <inttypes.h>
#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <hiredis/hiredis.h>
#include "format/blob.h"
#include "math/bf16.h"
#include "math/outer.h"
#include "net/frame.h"

static int die(const char *m) { fprintf(stderr, "sstool: %s\n", m); return 1; }


static int init_run(const char *host, int port, const char *run, int S, long long N, const char *snap_every) {
    redisContext *c = redisConnect(host, port);
    if (!c || c->err) return die("connect");
    char bounds[4096] = "", fb[64], key[256];
    float *x = malloc(N * sizeof(float));
    for (long long i = 0; i < N; i++) x[i] = 0.001f * (float)(i % 1000);
    char (*dig)[17] = calloc(S, 17);
    for (int k = 0; k <= S; k++) {
        long long b = N * k / S;
        snprintf(bounds + strlen(bounds), sizeof bounds - strlen(bounds), "%s%lld", k ? "," : "", b);
        if (k == S) break;
        long long e = N * (k + 1) / S, n = e - b;
        blob_header h; blob_header_init(&h, "snap");
        h.shard = k; h.version = 0; h.epoch = 0; h.dtype = BLOB_F32; h.count = n;
        uint8_t *out; size_t len; char err[256];
        if (blob_encode(&h, x + b, n * 4, &out, &len, err, sizeof err)) return die(err);
        snprintf(key, sizeof key, "dl:{%s:%d}:snap:0:0", run, k);
        redisReply *r = redisCommand(c, "SET %s %b", key, out, len);
        freeReplyObject(r); free(out);
        snprintf(dig[k], 17, "%016" PRIx64, digest_f32(x + b, n));
    }
    snprintf(fb, sizeof fb, "0,%d", S);
    char cfg[256], nums[32], ss[16];
    snprintf(cfg, sizeof cfg, "dl:{%s}:config", run);
    snprintf(nums, sizeof nums, "%lld", N); snprintf(ss, sizeof ss, "%d", S);
    const char *argv[64]; int a = 0;
    argv[a++] = "FCALL"; argv[a++] = "dl_init"; argv[a++] = "1"; argv[a++] = cfg;
    argv[a++] = "7";
    argv[a++] = "numel"; argv[a++] = nums; argv[a++] = "shards"; argv[a++] = ss;
    argv[a++] = "fragments"; argv[a++] = "1"; argv[a++] = "shard_bounds"; argv[a++] = bounds;
    argv[a++] = "frag_bounds"; argv[a++] = fb; argv[a++] = "mode"; argv[a++] = "sync";
    argv[a++] = "snapshot_every"; argv[a++] = snap_every;
    argv[a++] = "7";
    argv[a++] = "target_workers"; argv[a++] = "2"; argv[a++] = "min_workers"; argv[a++] = "1";
    argv[a++] = "outer_lr"; argv[a++] = "0.7"; argv[a++] = "outer_momentum"; argv[a++] = "0.9";
    argv[a++] = "nesterov"; argv[a++] = "1"; argv[a++] = "heartbeat_timeout_ms"; argv[a++] = "600000";
    argv[a++] = "lease_ttl_ms"; argv[a++] = "2000";
    argv[a++] = ss;
    for (int k = 0; k < S; k++) argv[a++] = dig[k];
    redisReply *r = redisCommandArgv(c, a, argv, NULL);
    if (!r || r->type == REDIS_REPLY_ERROR) { fprintf(stderr, "dl_init: %s\n", r ? r->str : c->errstr); return 1; }
    printf("init ok\n");
    freeReplyObject(r);
    redisFree(c);
    free(dig);
    free(x);
    return 0;
}

static int roundtrip(const char *addr, blob_header *h, const void *payload, size_t len) {
    char err[256];
    int fd = tcp_connect(addr, 3000, err, sizeof err);
    if (fd < 0) return die(err);
    if (frame_send(fd, h, payload, len, 5000, err, sizeof err) < 0) return die(err);
    size_t cap = 64u << 20;
    uint8_t *buf = malloc(cap);
    const uint8_t *p; size_t plen;
    blob_header r;
    if (frame_recv(fd, buf, cap, &r, &p, &plen, 30000, err, sizeof err) < 0) {
        printf("recv-failed %s\n", err);
        free(buf);
        return 0;
    }
    char dig[17] = "-";
    if (strcmp(r.op, "params") == 0) snprintf(dig, 17, "%016" PRIx64, digest_f32((const float *)p, plen / 4));
    printf("%s %lld %s %s %s\n", r.op, (long long)r.version, dig, r.code[0] ? r.code : "-", r.text[0] ? r.text : "-");
    close(fd);
    free(buf);
    return 0;
}

/* Frames frame_send would never produce: a corrupted payload, an impossible length prefix. */
static int rawpush(const char *addr, blob_header *h, void *payload, size_t len, const char *mode) {
    char err[256];
    uint8_t hdr[BLOB_HEADER_MAX];
    int fd = tcp_connect(addr, 3000, err, sizeof err);
    if (fd < 0) return die(err);
    int hl = blob_encode_header(h, payload, len, hdr, sizeof hdr, err, sizeof err);
    if (hl < 0) return die(err);
    ((uint8_t *)payload)[len / 2] ^= 0x40;
    uint32_t L = !strcmp(mode, "oversize") ? 0x7ffffff0u : (uint32_t)(hl + len);
    uint8_t pre[4] = { (uint8_t)L, (uint8_t)(L >> 8), (uint8_t)(L >> 16), (uint8_t)(L >> 24) };
    if (write(fd, pre, 4) != 4 || write(fd, hdr, hl) != hl) return die("write");
    if (strcmp(mode, "oversize") != 0 && write(fd, payload, len) != (ssize_t)len) return die("write");
    uint8_t buf[4096]; const uint8_t *p; size_t plen; blob_header r;
    if (frame_recv(fd, buf, sizeof buf, &r, &p, &plen, 10000, err, sizeof err) < 0) { printf("recv-failed %s\n", err); return 0; }
    printf("%s %lld - %s %s\n", r.op, (long long)r.version, r.code[0] ? r.code : "-", r.text[0] ? r.text : "-");
    if (!strcmp(mode, "oversize")) { /* the server must close the connection */
        /* closed with our unread bytes in its buffer, the server's kernel may reset the connection:
         * a reset is as closed as an orderly end of stream */
        ssize_t n = read(fd, buf, 1);
        printf("closed %s\n", n == 0 || (n < 0 && errno == ECONNRESET) ? "yes" : "no");
    }
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return die("usage");
    if (!strcmp(argv[1], "init") && argc >= 7)
        return init_run(argv[2], atoi(argv[3]), argv[4], atoi(argv[5]), atoll(argv[6]), argc > 7 ? argv[7] : "8");
    if (!strcmp(argv[1], "push") && argc >= 10) {
        /* push ADDR SHARD ROUND WORKER INC N DTYPE VALUE [mode] */
        blob_header h; blob_header_init(&h, "push");
        h.shard = atoi(argv[3]); h.round = atoll(argv[4]);
        snprintf(h.worker, sizeof h.worker, "%s", argv[5]); h.inc = atoll(argv[6]);
        long long n = atoll(argv[7]); int bf = !strcmp(argv[8], "bf16"); float v = strtof(argv[9], NULL);
        const char *mode = argc > 10 ? argv[10] : "";
        h.dtype = bf ? BLOB_BF16 : BLOB_F32; h.count = n; h.frag = 0;
        float *x = malloc(n * 4 + 8); for (long long i = 0; i < n; i++) x[i] = v * (float)(1 + i % 7);
        if (!strcmp(mode, "nan")) x[n / 2] = NAN;
        void *payload = x; size_t len = n * 4;
        uint16_t *b = NULL;
        if (bf) { b = malloc(n * 2 + 4); bf16_encode(x, b, n); payload = b; len = n * 2; }
        if (!strcmp(mode, "short")) { h.count = n - 1; len -= bf ? 2 : 4; }
        int rc = !strcmp(mode, "badsum") || !strcmp(mode, "oversize") ? rawpush(argv[2], &h, payload, len, mode)
                                                                       : roundtrip(argv[2], &h, payload, len);
        free(x);
        free(b);
        return rc;
    }
    if (!strcmp(argv[1], "get") && argc >= 7) {
        blob_header h; blob_header_init(&h, "get");
        h.shard = atoi(argv[3]); h.version = atoll(argv[4]);
        snprintf(h.worker, sizeof h.worker, "%s", argv[5]); h.inc = atoll(argv[6]);
        return roundtrip(argv[2], &h, NULL, 0);
    }
    if (!strcmp(argv[1], "hello") && argc >= 4) {
        blob_header h; blob_header_init(&h, "hello");
        snprintf(h.worker, sizeof h.worker, "t"); snprintf(h.text, sizeof h.text, "%s", argv[3]);
        return roundtrip(argv[2], &h, NULL, 0);
    }
    return die("bad command");
}
