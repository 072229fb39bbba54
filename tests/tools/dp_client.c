/* dp_client.c: a deliberately misbehaving data-plane client, for the bad-input tests.
 *
 * It looks up the owner of a shard in Redis like a worker would, connects, says hello, and sends one
 * bad push: wrong size, a NaN, a corrupted payload (checksum), a push from a worker that never
 * registered, a push for a stale round, a frame whose length prefix is huge, or garbage bytes. It
 * prints the server's reply and exits 0 when the server answered as it must (`err` with the expected
 * code, or closing the connection for a frame it cannot read), 1 otherwise.
 *
 * usage: dp_client --redis URL --run R --case badsize|nan|checksum|unknown|stale|oversize|garbage|
 *                                             wrongsecret|nohello|badcodec|nanscale|badtopk|topkbits|
 *                                             topkwidth [--shard K]
 * (wrongsecret answers the challenge with a made-up secret, nohello pushes without the handshake:
 * both must get `err AUTH` and a closed connection; badcodec pushes int8 or int4 against the run's codec
 * (`err BADCODEC`), nanscale an int8/int4 payload of the run's codec whose second block has a NaN scale;
 * against a topk run: badtopk a payload whose first chunk's index bitmap is empty (`err BADCODEC`),
 * topkbits a payload encoded at another --topk-bits (its size is not the run's: `err BADSIZE`),
 * topkwidth the run's payload with its first chunk's head claiming another width (`err BADCODEC`))
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/opts.h"
#include "base/util.h"
#include "format/blob.h"
#include "format/keys.h"
#include "format/mpmap.h"
#include "format/runconf.h"
#include "math/codec.h"
#include "math/codec_sparse.h"
#include "net/auth.h"
#include "net/frame.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"

typedef struct target {
    rconn *c;
    runconf rc;
    char config_key[KEY_MAX];
    char addr[128];
    long long inc, round;
    char worker[64];
} target;

static int find_owner(target *t, const char *run, int shard, char *err, size_t errlen)
{
    char key[KEY_MAX], field[32];
    snprintf(field, sizeof field, "%d:owner", shard);
    redisReply *r = rconn_command(t->c, "HGET %s %s", key_run(key, sizeof key, run, "shards"), field);
    if (rconn_reply_error(t->c, r, err, errlen) < 0 || r->type != REDIS_REPLY_STRING || !r->str[0]) {
        err_set(err, errlen, "shard %d has no owner", shard);
        return -1;
    }
    char owner[128];
    snprintf(owner, sizeof owner, "%s", r->str);
    freeReplyObject(r);
    r = rconn_command(t->c, "HGET %s %s", key_run(key, sizeof key, run, "servers"), owner);
    int ok = r && r->type == REDIS_REPLY_STRING && mpmap_get_str(r->str, r->len, "addr", t->addr, sizeof t->addr) == 0;
    if (r) freeReplyObject(r);
    if (!ok) err_set(err, errlen, "no address for server %s", owner);
    return ok ? 0 : -1;
}

static int register_worker(target *t, char *err, size_t errlen)
{
    redisReply *r = rconn_command(t->c, "FCALL dl_register 1 %s %s test 1", t->config_key, t->worker);
    if (rconn_reply_error(t->c, r, err, errlen) < 0) return -1;
    t->inc = r->element[0]->integer;
    t->round = r->element[2]->element[0]->integer;
    freeReplyObject(r);
    return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w <= 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Send a push whose payload is altered after the checksum was computed (or not). */
static int send_push(int fd, blob_header *h, float *payload, size_t count, int corrupt)
{
    uint8_t hdr[BLOB_HEADER_MAX];
    char err[256];
    size_t bytes = blob_payload_bytes(h->dtype, count);
    int hl = blob_encode_header(h, payload, bytes, hdr, sizeof hdr, err, sizeof err);
    if (hl < 0) {
        fprintf(stderr, "encode: %s\n", err);
        return -1;
    }
    if (corrupt) ((uint8_t *)payload)[bytes / 2] ^= 0x10;
    uint32_t len = (uint32_t)((size_t)hl + bytes);
    uint8_t prefix[4] = {len & 0xff, (len >> 8) & 0xff, (len >> 16) & 0xff, len >> 24};
    return write_all(fd, prefix, 4) || write_all(fd, hdr, (size_t)hl) || write_all(fd, payload, bytes);
}

/* An int8/int4 push (the run's codec) whose second block's scale is NaN. */
static void make_nan_scale(target *t, blob_header *h, float *x, size_t n)
{
    size_t bad;
    uint8_t *q = malloc(codec_bytes(t->rc.compress, n));
    codec_encode(t->rc.compress, x, n, q, &bad);
    uint8_t *scale = q + codec_offset(t->rc.compress, n > CODEC_BLOCK ? CODEC_BLOCK : 0);
    scale[0] = 0xc0;
    scale[1] = 0x7f;
    memcpy(x, q, codec_bytes(t->rc.compress, n)); /* fits: at most 2 + n bytes per 256 */
    free(q);
    h->dtype = t->rc.compress;
}

/* What a forged topk push gets wrong. */
enum bad_topk { TOPK_EMPTY_BITMAP, TOPK_OTHER_BITS, TOPK_WIDTH_HEAD };

/* A topk push in the run's codec: chunk 0's index bitmap emptied (its size right), encoded at another
 * width than the run's (its size wrong), or chunk 0's head claiming another width (its size right). */
static void make_bad_topk(target *t, blob_header *h, float *x, size_t n, enum bad_topk how)
{
    unsigned bits = t->rc.topk_bits, other = bits == TOPK_BITS_DEFAULT ? 4 : TOPK_BITS_DEFAULT;
    if (how == TOPK_OTHER_BITS) bits = other;
    size_t bytes = sparse_shard_bytes(t->rc.topk_density, bits, n), off = 0, bad;
    uint8_t *q = malloc(bytes);
    for (size_t i = 0; i < n; i++) x[i] = (float)(i % 7) - 3.0f;
    for (size_t c = 0; c < n; c += TOPK_CHUNK) {
        size_t m = n - c < TOPK_CHUNK ? n - c : TOPK_CHUNK;
        uint32_t k = topk_count(t->rc.topk_density, m);
        topk_encode_chunk(x + c, m, k, bits, q + off, &bad);
        off += topk_chunk_bytes(k, m, bits);
    }
    if (how == TOPK_EMPTY_BITMAP) { /* chunk 0's upper bitmap (after its k low parts of l bits) cleared */
        size_t m0 = n < TOPK_CHUNK ? n : TOPK_CHUNK;
        uint32_t k0 = topk_count(t->rc.topk_density, m0);
        unsigned l = 0;
        while (((size_t)k0 << (l + 1)) <= m0) l++;
        size_t upper = 4 + ((size_t)k0 * l + 7) / 8;
        memset(q + upper, 0, (k0 + ((m0 - 1) >> l) + 1 + 7) / 8);
    }
    if (how == TOPK_WIDTH_HEAD) q[1] = (uint8_t)((q[1] & 0x1F) | (other - TOPK_BITS_MIN) << 5); /* codec_topk.h */
    memcpy(x, q, bytes); /* fits: far fewer bytes than the n floats */
    free(q);
    h->dtype = BLOB_TOPK;
    h->count = bytes;
}

/* Expect the connection to be closed (or an err reply) after an unreadable frame. */
static int expect_closed_or_err(int fd)
{
    uint8_t buf[BLOB_HEADER_MAX + 64];
    blob_header h;
    const uint8_t *p;
    size_t pl;
    char err[256];
    if (frame_recv(fd, buf, sizeof buf, &h, &p, &pl, 5000, err, sizeof err) < 0) {
        printf("connection closed: %s\n", err);
        return 0;
    }
    printf("reply %s %s %s\n", h.op, h.code, h.text);
    return strcmp(h.op, "err") == 0 ? 0 : 1;
}

/* A well-formed push on a connection that skipped the handshake: err AUTH, then the server hangs up. */
static int push_without_hello(target *t, int fd, int shard)
{
    size_t n = (size_t)runconf_shard_numel(&t->rc, shard);
    float *x = calloc(n, sizeof(float));
    blob_header h;
    blob_header_init(&h, "push");
    h.shard = shard;
    h.round = t->round;
    h.inc = t->inc;
    h.dtype = BLOB_F32;
    h.count = n;
    snprintf(h.worker, sizeof h.worker, "%s", t->worker);
    int sent = send_push(fd, &h, x, n, 0);
    free(x);
    if (sent != 0) return 1;
    uint8_t buf[BLOB_HEADER_MAX + 64];
    const uint8_t *p;
    size_t pl;
    char err[256];
    if (frame_recv(fd, buf, sizeof buf, &h, &p, &pl, 5000, err, sizeof err) < 0) {
        printf("no reply: %s\n", err);
        return 1;
    }
    printf("reply %s %s %s\n", h.op, h.code, h.text);
    if (strcmp(h.op, "err") != 0 || strcmp(h.code, "AUTH") != 0) return 1;
    int closed = frame_recv(fd, buf, sizeof buf, &h, &p, &pl, 5000, err, sizeof err) < 0;
    printf("%s\n", closed ? "connection closed" : "connection still open");
    return closed ? 0 : 1;
}

static int run_case(target *t, int fd, const char *which, int shard)
{
    size_t n = (size_t)runconf_shard_numel(&t->rc, shard);
    float *x = calloc(n + 1, sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = 1e-3f;
    blob_header h;
    blob_header_init(&h, "push");
    h.shard = shard;
    h.round = t->round;
    h.inc = t->inc;
    h.frag = 0;
    h.dtype = BLOB_F32;
    h.count = n;
    snprintf(h.worker, sizeof h.worker, "%s", t->worker);
    const char *want = NULL;
    if (!strcmp(which, "badsize")) {
        h.count = n - 1;
        want = "BADSIZE";
    } else if (!strcmp(which, "nan")) {
        x[n / 3] = NAN;
        want = "NAN";
    } else if (!strcmp(which, "checksum"))
        want = "CHECKSUM";
    else if (!strcmp(which, "unknown"))
        want = "UNKNOWN_WORKER";
    else if (!strcmp(which, "stale")) {
        h.round = t->round + 5;
        want = "STALE";
    } else if (!strcmp(which, "badcodec")) {
        h.dtype = t->rc.compress == BLOB_I4 ? BLOB_I8 : BLOB_I4;
        want = "BADCODEC";
    } else if (!strcmp(which, "badtopk") && t->rc.compress == BLOB_TOPK &&
               topk_count(t->rc.topk_density, n < TOPK_CHUNK ? n : TOPK_CHUNK) >= 2) {
        make_bad_topk(t, &h, x, n, TOPK_EMPTY_BITMAP);
        want = "BADCODEC";
    } else if (!strcmp(which, "topkbits") && t->rc.compress == BLOB_TOPK) {
        make_bad_topk(t, &h, x, n, TOPK_OTHER_BITS);
        /* (a shard so small that both widths give one size is refused for its chunks' heads) */
        want = h.count != sparse_shard_bytes(t->rc.topk_density, t->rc.topk_bits, n) ? "BADSIZE" : "BADCODEC";
    } else if (!strcmp(which, "topkwidth") && t->rc.compress == BLOB_TOPK) {
        make_bad_topk(t, &h, x, n, TOPK_WIDTH_HEAD);
        want = "BADCODEC";
    } else if (!strcmp(which, "nanscale") && codec_is_block(t->rc.compress)) {
        make_nan_scale(t, &h, x, n);
        want = "NAN";
    }
    if (!strcmp(which, "oversize")) {
        uint8_t prefix[4] = {0xff, 0xff, 0xff, 0x7f};
        write_all(fd, prefix, 4);
        free(x);
        return expect_closed_or_err(fd);
    }
    if (!strcmp(which, "garbage")) {
        uint8_t junk[68] = {64, 0, 0, 0, 0xc1, 0xc1, 0xde, 0xad, 0xbe, 0xef};
        write_all(fd, junk, sizeof junk);
        free(x);
        return expect_closed_or_err(fd);
    }
    if (!want) {
        fprintf(stderr, "unknown case %s\n", which);
        return 2;
    }
    if (send_push(fd, &h, x, h.count, !strcmp(which, "checksum")) < 0) return 1;
    free(x);
    uint8_t buf[BLOB_HEADER_MAX + 64];
    const uint8_t *p;
    size_t pl;
    char err[256];
    if (frame_recv(fd, buf, sizeof buf, &h, &p, &pl, 10000, err, sizeof err) < 0) {
        printf("no reply: %s\n", err);
        return 1;
    }
    printf("reply %s %s %s\n", h.op, h.code, h.text);
    return strcmp(h.op, "err") == 0 && strcmp(h.code, want) == 0 ? 0 : 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: dp_client --redis URL --run R --case NAME [--shard K]\n");
}

int main(int argc, char **argv)
{
    const char *url = NULL, *run = NULL, *which = NULL;
    int shard = 0;
    const opt_spec specs[] = {
        {.name = "redis", .kind = OPT_STRING, .dest = &url},
        {.name = "run", .kind = OPT_STRING, .dest = &run},
        {.name = "case", .kind = OPT_STRING, .dest = &which},
        {.name = "shard", .kind = OPT_INT, .dest = &shard, .lo = 0, .hi = 1 << 20},
        {0},
    };
    int prc = opts_parse_cmd("dp_client", usage, specs, argc, argv, 1, NULL, NULL);
    if (prc != 0) return opts_exit_status(prc);
    if (!url || !run || !which) {
        usage(stderr);
        return OPTS_EXIT_USAGE;
    }
    char err[512];
    redis_url u;
    target t = {0};
    if (redis_url_parse(url, &u, err, sizeof err) < 0 || !(t.c = rconn_connect(&u, 5000, err, sizeof err)) ||
        runconf_load(t.c, run, &t.rc, err, sizeof err) < 0 || find_owner(&t, run, shard, err, sizeof err) < 0) {
        fprintf(stderr, "dp_client: %s\n", err);
        return 1;
    }
    key_run(t.config_key, sizeof t.config_key, run, "config");
    snprintf(t.worker, sizeof t.worker, "bad-%s-%d", which, (int)getpid());
    if (strcmp(which, "unknown") != 0 && register_worker(&t, err, sizeof err) < 0) {
        fprintf(stderr, "dp_client: register: %s\n", err);
        return 1;
    }
    if (!strcmp(which, "unknown")) {
        t.inc = 999999;
        redisReply *r = rconn_command(t.c, "HGET dl:{%s}:state round:0", run);
        t.round = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        if (r) freeReplyObject(r);
    }
    int fd = tcp_connect(t.addr, 5000, err, sizeof err);
    if (fd < 0) {
        fprintf(stderr, "dp_client: %s\n", err);
        return 1;
    }
    int rc;
    if (!strcmp(which, "wrongsecret")) {
        rc = auth_client_hello(fd, "not-the-secret", t.worker, run, 5000, NULL, 0, err, sizeof err) == 0;
        printf("%s\n", rc ? "accepted with a wrong secret" : err);
        rc = rc || strstr(err, "AUTH") == NULL;
    } else if (!strcmp(which, "nohello")) {
        rc = push_without_hello(&t, fd, shard);
    } else if (auth_client_hello(fd, t.rc.secret, t.worker, run, 5000, NULL, 0, err, sizeof err) < 0) {
        fprintf(stderr, "dp_client: hello: %s\n", err);
        return 1;
    } else {
        rc = run_case(&t, fd, which, shard);
    }
    close(fd);
    if (strcmp(which, "unknown") != 0) {
        redisReply *r = rconn_command(t.c, "FCALL dl_deregister 1 %s %s %lld", t.config_key, t.worker, t.inc);
        if (r) freeReplyObject(r);
    }
    runconf_free(&t.rc);
    rconn_free(t.c);
    return rc;
}
