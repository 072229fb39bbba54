/* bench/sync_round.c -> bin/bench-sync_round: the pieces of the sync-round benchmark (bench/sync_round
 * runs them; see docs/benchmarks.md).
 *
 *   bin/bench-sync_round worker --redis URL --run R --id W --numel N --start-ms T [--rounds 8] [--gap-ms 1000]
 *                               [--no-bf16] [--error-feedback]
 *       A DiLoCo worker with no training: libdiloco on a flat buffer, one diloco_force_sync per round.
 *       The "inner training" between rounds is a 1e-3 nudge of every parameter; round r starts at wall
 *       clock T + r * gap (ms), so every worker starts its round at the same instant and rounds never
 *       overlap. Prints one line per round:
 *         round R first_send_us pushed_us get_us last_recv_us bytes_up bytes_down stale cpu_s confirm_s
 *       (CLOCK_REALTIME microseconds, from diloco_sync_info; cpu_s: this process's CPU seconds in the sync;
 *       confirm_s: time this sync spent, before its first byte, confirming the previous round durable).
 *   bin/bench-sync_round tcp --numel N [--workers 2] [--servers 2] [--reps 5] [--start-ms S --tick-ms T --offset-ms O]
 *                            [--up-bpp 2 --down-bpp 4]
 *       The same worker bytes over plain loopback TCP, same topology as the run: every worker has one
 *       connection (and thread) per server, sends its bf16 share (2*N/servers bytes) to each server;
 *       a server answers once it has every worker's upload, with the fp32 share (4*N/servers bytes); with
 *       --up-bpp/--down-bpp, that many bytes per parameter instead (the sizes of another codec).
 *       Preallocated buffers, no framing, no checksums. Prints "tcp seconds S cpu C" per repetition
 *       (C: CPU seconds of both ends, all threads). With
 *       --tick-ms, repetition r starts at wall clock S + r * T + O (between the rounds of a concurrent
 *       `worker` run with the same start and --gap-ms T), so both see the same background load.
 *   bin/bench-sync_round redis --redis URL --numel N [--workers 2] [--reps 3] [--up-bpp 2 --down-bpp 4]
 *       The same worker bytes through one Redis connection: per worker SET of its 2*N-byte
 *       pseudo-gradient, then per worker GET of a 4*N-byte parameter value. Prints "redis seconds S".
 *   bin/bench-sync_round floor --numel N [--compress bf16] [--download params] [--error-feedback] [--reps 5]
 *       What the CPU must do with N parameters in every round, whatever the network: the kernels of
 *       libdiloco and of the shard-server, alone, in one thread, on warm memory. Inside the round time:
 *       "serve", the servers' commit of all N (two pseudo-gradients' checksums, their mean, with
 *       --download update encoded once, the outer step into a new version, its digest:
 *       shard-server/commit_compute.c), and "take", one worker's receipt (with --download update the
 *       update's checksum, decode, the outer step on its parameters and momentum, their digest:
 *       worker/diloco/update.c; with params the parameters' checksum). Before the round's first byte:
 *       "encode", one worker's Δ, kept error, codec and checksum (worker/diloco/delta.c). Prints
 *       "floor seconds take T serve S encode E" per repetition.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/opts.h"
#include "base/util.h"
#include "diloco.h"
#include "math/bf16.h"
#include "math/codec.h"
#include "math/hash.h"
#include "math/outer.h"
#include "net/frame.h"

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds (user + system, every thread) this process has used so far. */
static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: see the comment at the top of bench/sync_round.c\n");
}

/* ---- worker ---------------------------------------------------------------------------------- */

static int run_worker(int argc, char **argv)
{
    const char *url = NULL, *run = NULL, *id = NULL;
    int rounds = 8, gap = 1000, no_bf16 = 0, error_feedback = 0;
    long long numel_ll = 0, start_ll = 0;
    const opt_spec specs[] = {
        {.name = "redis", .kind = OPT_STRING, .dest = &url},
        {.name = "run", .kind = OPT_STRING, .dest = &run},
        {.name = "id", .kind = OPT_STRING, .dest = &id},
        {.name = "rounds", .kind = OPT_INT, .dest = &rounds, .lo = 0, .hi = 1000000},
        {.name = "gap-ms", .kind = OPT_INT, .dest = &gap, .lo = 0, .hi = 86400000},
        {.name = "numel", .kind = OPT_LLONG, .dest = &numel_ll, .lo = 0, .hi = 1LL << 34},
        {.name = "start-ms", .kind = OPT_LLONG, .dest = &start_ll, .lo = 0, .hi = INT64_MAX},
        {.name = "no-bf16", .kind = OPT_FLAG, .dest = &no_bf16},
        {.name = "error-feedback", .kind = OPT_FLAG, .dest = &error_feedback},
        {0},
    };
    int prc = opts_parse_cmd("bench-sync_round worker", usage, specs, argc, argv, 0, NULL, NULL);
    if (prc != 0) return opts_exit_status(prc);
    size_t numel = (size_t)numel_ll;
    uint64_t start_ms = (uint64_t)start_ll;
    if (!url || !run || !id || numel == 0) {
        fprintf(stderr, "worker: --redis, --run, --id and --numel are required\n");
        return 2;
    }
    diloco_options o;
    diloco_options_default(&o);
    o.redis_url = url;
    o.run = run;
    o.worker_id = id;
    o.sync_every = 1 << 30;
    o.bf16 = !no_bf16;
    o.error_feedback = error_feedback;
    o.heartbeat_interval_ms = 2000;
    float *params = malloc(numel * sizeof(float));
    if (!params) return 1;
    char err[512];
    diloco *d;
    if (diloco_open(&o, params, numel, &d, err, sizeof err) < 0) {
        fprintf(stderr, "worker %s: %s\n", id, err);
        return 1;
    }
    for (int r = 0; r < rounds; r++) {
        for (size_t i = 0; i < numel; i++) params[i] -= 1e-3f;
        /* every worker starts round r at the same instant, --start-ms + r * --gap-ms (wall clock) */
        uint64_t now = wall_ms(), start = start_ms + (uint64_t)r * (uint64_t)gap;
        if (start > now) sleep_ms((unsigned)(start - now));
        double cpu0 = cpu_seconds();
        if (diloco_force_sync(d, err, sizeof err) != 1) {
            fprintf(stderr, "worker %s: sync failed: %s\n", id, err);
            diloco_close(d);
            return 1;
        }
        diloco_sync_info s;
        diloco_last_sync(d, &s);
        double cpu = cpu_seconds() - cpu0;
        printf("round %lld %llu %llu %llu %llu %llu %llu %d %.4f %.4f\n", (long long)s.round,
               (unsigned long long)s.t_first_send_us, (unsigned long long)s.t_pushed_us, (unsigned long long)s.t_get_us,
               (unsigned long long)s.t_last_recv_us, (unsigned long long)s.bytes_up, (unsigned long long)s.bytes_down,
               s.stale, cpu, s.confirm_seconds);
        fflush(stdout);
    }
    diloco_close(d);
    free(params);
    return 0;
}

/* ---- plain TCP ------------------------------------------------------------------------------- */

typedef struct tcp_server {
    int lfd, port;
    int nworkers;
    size_t up, down;            /* bytes per connection */
    pthread_barrier_t uploaded; /* every worker's upload is in */
} tcp_server;

typedef struct tcp_end {
    tcp_server *srv;
    int fd;
    uint8_t *buf;
    size_t up, down;
} tcp_end;

static pthread_barrier_t g_start;

static int send_n(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int recv_n(int fd, uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t k = recv(fd, p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void *server_end(void *p)
{
    tcp_end *e = p;
    if (recv_n(e->fd, e->buf, e->up) < 0) perror("server recv");
    pthread_barrier_wait(&e->srv->uploaded);
    if (send_n(e->fd, e->buf, e->down) < 0) perror("server send");
    return NULL;
}

static void *client_end(void *p)
{
    tcp_end *e = p;
    pthread_barrier_wait(&g_start);
    if (send_n(e->fd, e->buf, e->up) < 0) perror("client send");
    if (recv_n(e->fd, e->buf, e->down) < 0) perror("client recv");
    return NULL;
}

static int run_tcp(int argc, char **argv)
{
    long long numel_ll = 25000000, tstart_ll = 0;
    int nw = 2, ns = 2, reps = 5;
    double up_bpp = 2, down_bpp = 4;
    long long tick = 0, offset = 0;
    const opt_spec specs[] = {
        {.name = "numel", .kind = OPT_LLONG, .dest = &numel_ll, .lo = 1, .hi = 1LL << 34},
        {.name = "workers", .kind = OPT_INT, .dest = &nw, .lo = 1, .hi = 1024},
        {.name = "servers", .kind = OPT_INT, .dest = &ns, .lo = 1, .hi = 1024},
        {.name = "reps", .kind = OPT_INT, .dest = &reps, .lo = 0, .hi = 1000000},
        {.name = "up-bpp", .kind = OPT_DOUBLE, .dest = &up_bpp, .min = 0, .max = 64},
        {.name = "down-bpp", .kind = OPT_DOUBLE, .dest = &down_bpp, .min = 0, .max = 64},
        {.name = "tick-ms", .kind = OPT_LLONG, .dest = &tick, .lo = 0, .hi = 86400000},
        {.name = "offset-ms", .kind = OPT_LLONG, .dest = &offset, .lo = 0, .hi = 86400000},
        {.name = "start-ms", .kind = OPT_LLONG, .dest = &tstart_ll, .lo = 0, .hi = INT64_MAX},
        {0},
    };
    int prc = opts_parse_cmd("bench-sync_round tcp", usage, specs, argc, argv, 0, NULL, NULL);
    if (prc != 0) return opts_exit_status(prc);
    size_t numel = (size_t)numel_ll;
    size_t up = (size_t)(up_bpp * (double)numel) / (size_t)ns, down = (size_t)(down_bpp * (double)numel) / (size_t)ns;
    int nc = nw * ns;
    tcp_server *srv = calloc((size_t)ns, sizeof *srv);
    tcp_end *cl = calloc((size_t)nc, sizeof *cl), *sv = calloc((size_t)nc, sizeof *sv);
    for (int s = 0; s < ns; s++) {
        srv[s].lfd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t al = sizeof a;
        if (bind(srv[s].lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(srv[s].lfd, 16) != 0 ||
            getsockname(srv[s].lfd, (struct sockaddr *)&a, &al) != 0) {
            perror("listen");
            return 1;
        }
        srv[s].port = ntohs(a.sin_port);
        srv[s].nworkers = nw;
    }
    /* connection (w, s): the client side like libdiloco's (tcp_connect: TCP_NODELAY, autotuned buffers),
     * the server side like the shard-server's (accepted socket, TCP_NODELAY) */
    for (int w = 0; w < nw; w++)
        for (int s = 0; s < ns; s++) {
            int i = w * ns + s;
            char addr[64], err[256];
            snprintf(addr, sizeof addr, "127.0.0.1:%d", srv[s].port);
            cl[i].fd = tcp_connect(addr, 5000, err, sizeof err);
            if (cl[i].fd < 0) {
                fprintf(stderr, "tcp: %s\n", err);
                return 1;
            }
            sv[i].fd = accept(srv[s].lfd, NULL, NULL);
            int one = 1;
            setsockopt(sv[i].fd, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof one);
            cl[i].up = sv[i].up = up;
            cl[i].down = sv[i].down = down;
            cl[i].buf = malloc(down);
            sv[i].buf = malloc(down);
            memset(cl[i].buf, 0x3c, down);
            memset(sv[i].buf, 0x3d, down);
            sv[i].srv = &srv[s];
        }
    pthread_t *th = calloc((size_t)(2 * nc), sizeof *th);
    uint64_t tstart = (uint64_t)tstart_ll;
    for (int r = 0; r < reps; r++) {
        if (tick > 0) { /* between the rounds of a concurrent `worker` run: at start + r * tick + offset */
            uint64_t now = wall_ms(), at = tstart + (uint64_t)r * (uint64_t)tick + (uint64_t)offset;
            if (at > now + 20) sleep_ms((unsigned)(at - now - 20)); /* the start barrier below takes ~20 ms */
        }
        for (int s = 0; s < ns; s++) pthread_barrier_init(&srv[s].uploaded, NULL, (unsigned)nw);
        pthread_barrier_init(&g_start, NULL, (unsigned)nc + 1);
        for (int i = 0; i < nc; i++) {
            pthread_create(&th[i], NULL, server_end, &sv[i]);
            pthread_create(&th[nc + i], NULL, client_end, &cl[i]);
        }
        usleep(20000);
        double cpu0 = cpu_seconds();
        pthread_barrier_wait(&g_start);
        double t0 = mono();
        for (int i = 0; i < nc; i++) pthread_join(th[nc + i], NULL);
        double t = mono() - t0;
        for (int i = 0; i < nc; i++) pthread_join(th[i], NULL);
        printf("tcp seconds %.4f cpu %.4f\n", t, cpu_seconds() - cpu0);
        fflush(stdout);
        for (int s = 0; s < ns; s++) pthread_barrier_destroy(&srv[s].uploaded);
        pthread_barrier_destroy(&g_start);
    }
    return 0;
}

/* ---- one Redis connection -------------------------------------------------------------------- */

static int run_redis(int argc, char **argv)
{
    const char *url = "redis://127.0.0.1:6379";
    long long numel_ll = 25000000;
    int nw = 2, reps = 3;
    double up_bpp = 2, down_bpp = 4;
    const opt_spec specs[] = {
        {.name = "redis", .kind = OPT_STRING, .dest = &url},
        {.name = "numel", .kind = OPT_LLONG, .dest = &numel_ll, .lo = 1, .hi = 1LL << 34},
        {.name = "workers", .kind = OPT_INT, .dest = &nw, .lo = 1, .hi = 1024},
        {.name = "reps", .kind = OPT_INT, .dest = &reps, .lo = 0, .hi = 1000000},
        {.name = "up-bpp", .kind = OPT_DOUBLE, .dest = &up_bpp, .min = 0, .max = 64},
        {.name = "down-bpp", .kind = OPT_DOUBLE, .dest = &down_bpp, .min = 0, .max = 64},
        {0},
    };
    int prc = opts_parse_cmd("bench-sync_round redis", usage, specs, argc, argv, 0, NULL, NULL);
    if (prc != 0) return opts_exit_status(prc);
    size_t numel = (size_t)numel_ll;
    const char *hp = strstr(url, "://");
    hp = hp ? hp + 3 : url;
    char host[128];
    int port = 6379;
    snprintf(host, sizeof host, "%s", hp);
    char *colon = strrchr(host, ':');
    if (colon) {
        *colon = '\0';
        port = atoi(colon + 1);
    }
    redisContext *c = redisConnect(host, port);
    if (!c || c->err) {
        fprintf(stderr, "redis: cannot connect to %s:%d\n", host, port);
        return 1;
    }
    size_t up = (size_t)(up_bpp * (double)numel), down = (size_t)(down_bpp * (double)numel);
    char *buf = malloc(down);
    memset(buf, 0x5a, down);
    redisReply *r = redisCommand(c, "SET bench:sync_round:params %b", buf, down);
    freeReplyObject(r);
    for (int rep = 0; rep < reps; rep++) {
        double t0 = mono();
        for (int w = 0; w < nw; w++) {
            r = redisCommand(c, "SET bench:sync_round:delta:%d %b", w, buf, up);
            if (!r || r->type == REDIS_REPLY_ERROR) return 1;
            freeReplyObject(r);
        }
        double t1 = mono();
        for (int w = 0; w < nw; w++) {
            r = redisCommand(c, "GET bench:sync_round:params");
            if (!r || r->type != REDIS_REPLY_STRING || (size_t)r->len != down) return 1;
            freeReplyObject(r);
        }
        double t2 = mono();
        printf("redis seconds %.4f set %.4f get %.4f\n", t2 - t0, t1 - t0, t2 - t1);
        fflush(stdout);
    }
    r = redisCommand(c, "DEL bench:sync_round:params bench:sync_round:delta:0 bench:sync_round:delta:1");
    freeReplyObject(r);
    redisFree(c);
    free(buf);
    return 0;
}

/* ---- the round's kernels alone ---------------------------------------------------------------- */

/* The chunk sizes of worker/diloco/update.c and delta.c and of the shard-server's codec commit
 * (shard-server/commit_compute.c): each chunk is still in the cache for its next kernel. */
#define FLOOR_TAKE_CHUNK 4096
#define FLOOR_ENCODE_CHUNK 16384
#define FLOOR_SERVE_CHUNK 4096

/* Two workers' pseudo-gradients (q, q2), the parameters and momentum of a worker (theta, mom) and of a
 * server's new version (theta2, mom2), the encoded mean (gq), one chunk of g. */
typedef struct floor_bufs {
    float *theta, *mom, *theta2, *mom2, *anchor, *ef, *g;
    uint8_t *q, *q2, *gq;
} floor_bufs;

/* Before the round: Δ = anchor - theta (plus the kept error) in the codec, and the payload's checksum. */
static int floor_encode(const floor_bufs *b, int dtype, size_t n)
{
    XXH3_state_t *xs = XXH3_createState();
    XXH3_64bits_reset(xs);
    int rc = 0;
    for (size_t c = 0; c < n && rc == 0; c += FLOOR_ENCODE_CHUNK) {
        size_t len = n - c < FLOOR_ENCODE_CHUNK ? n - c : FLOOR_ENCODE_CHUNK, bad;
        uint8_t *q = b->q + codec_offset(dtype, c);
        if (codec_is_block(dtype)) {
            rc = codec_encode_delta(dtype, b->anchor + c, b->theta + c, b->ef ? b->ef + c : NULL, len, q, &bad);
        } else if (dtype == BLOB_BF16) {
            rc = bf16_encode_diff(b->anchor + c, b->theta + c, (uint16_t *)(void *)q, len, &bad);
        } else {
            float *x = (float *)(void *)q;
            for (size_t i = 0; i < len; i++) x[i] = b->anchor[c + i] - b->theta[c + i];
            rc = outer_check_finite(x, len, &bad);
        }
        hash_update(xs, q, codec_bytes(dtype, len));
    }
    (void)XXH3_64bits_digest(xs);
    XXH3_freeState(xs);
    return rc;
}

/* The servers' commit of the round for all n parameters, as a codec commit of shard-server/
 * commit_compute.c runs it: the two pseudo-gradients' checksums, their mean (with --download update
 * encoded once and decoded back), the outer step into a new version, its digest. */
static void floor_serve(const floor_bufs *b, int dtype, int update, size_t n)
{
    size_t qbytes = codec_bytes(dtype, n), bad;
    (void)hash64(b->q, qbytes);
    (void)hash64(b->q2, qbytes);
    XXH3_state_t *xs = XXH3_createState();
    XXH3_64bits_reset(xs);
    for (size_t c = 0; c < n; c += FLOOR_SERVE_CHUNK) {
        size_t len = n - c < FLOOR_SERVE_CHUNK ? n - c : FLOOR_SERVE_CHUNK, off = codec_offset(dtype, c);
        uint8_t *gq = update ? b->gq + off : NULL;
        if (codec_is_block(dtype)) {
            const uint8_t *in[2] = {b->q + off, b->q2 + off};
            (void)codec_mean(dtype, in, 2, len, b->g, gq, &bad);
        } else {
            outer_sum_zero(b->g, len);
            for (int w = 0; w < 2; w++) {
                const uint8_t *x = (w ? b->q2 : b->q) + off;
                if (dtype == BLOB_BF16)
                    outer_sum_add_bf16(b->g, (const uint16_t *)(const void *)x, len);
                else
                    outer_sum_add_f32(b->g, (const float *)(const void *)x, len);
            }
            outer_mean_finish(b->g, len, 2);
            if (gq) (void)codec_round_trip(dtype, b->g, len, gq, &bad);
        }
        outer_sgd_step_to(b->theta2 + c, b->mom2 + c, b->theta + c, b->mom + c, 0, b->g, len,
                          (float)OUTER_DEFAULT_LR, (float)OUTER_DEFAULT_MOMENTUM, 1);
        hash_update(xs, b->theta2 + c, len * sizeof(float));
    }
    (void)XXH3_64bits_digest(xs);
    XXH3_freeState(xs);
}

/* Inside the round, on a worker: check the received payload, and apply an update as libdiloco does. */
static void floor_take(const floor_bufs *b, int dtype, int update, size_t n)
{
    if (!update) {
        (void)hash64(b->theta2, n * sizeof(float));
        return;
    }
    (void)hash64(b->gq, codec_bytes(dtype, n));
    XXH3_state_t *xs = XXH3_createState();
    XXH3_64bits_reset(xs);
    for (size_t c = 0; c < n; c += FLOOR_TAKE_CHUNK) {
        size_t len = n - c < FLOOR_TAKE_CHUNK ? n - c : FLOOR_TAKE_CHUNK;
        codec_decode(dtype, b->gq + codec_offset(dtype, c), len, b->g);
        outer_sgd_step(b->theta + c, b->mom + c, 0, b->g, len, (float)OUTER_DEFAULT_LR, (float)OUTER_DEFAULT_MOMENTUM,
                       1);
        hash_update(xs, b->theta + c, len * sizeof(float));
    }
    (void)XXH3_64bits_digest(xs);
    XXH3_freeState(xs);
}

static void floor_free(floor_bufs *b)
{
    free(b->theta);
    free(b->mom);
    free(b->theta2);
    free(b->mom2);
    free(b->anchor);
    free(b->ef);
    free(b->g);
    free(b->q);
    free(b->q2);
    free(b->gq);
}

static int floor_alloc(floor_bufs *b, int dtype, size_t n, int error_feedback)
{
    size_t fb = n * sizeof(float), qb = codec_bytes(dtype, n) + 1;
    *b = (floor_bufs){malloc(fb), calloc(n, sizeof(float)), malloc(fb), malloc(fb), malloc(fb),
                      error_feedback ? calloc(n, sizeof(float)) : NULL, malloc(FLOOR_SERVE_CHUNK * sizeof(float)),
                      malloc(qb), malloc(qb), malloc(qb)};
    if (!b->theta || !b->mom || !b->theta2 || !b->mom2 || !b->anchor || (error_feedback && !b->ef) || !b->g || !b->q ||
        !b->q2 || !b->gq) {
        floor_free(b);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        b->theta[i] = (float)(i % 1000) * 1e-3f;
        b->anchor[i] = b->theta[i] + 1e-4f * (float)(i % 7);
    }
    return 0;
}

static int run_floor(int argc, char **argv)
{
    long long numel_ll = 25000000;
    const char *compress = "bf16", *download = "params";
    int reps = 5, error_feedback = 0;
    const opt_spec specs[] = {
        {.name = "numel", .kind = OPT_LLONG, .dest = &numel_ll, .lo = 1, .hi = 1LL << 34},
        {.name = "compress", .kind = OPT_STRING, .dest = &compress},
        {.name = "download", .kind = OPT_STRING, .dest = &download},
        {.name = "error-feedback", .kind = OPT_FLAG, .dest = &error_feedback},
        {.name = "reps", .kind = OPT_INT, .dest = &reps, .lo = 1, .hi = 1000000},
        {0},
    };
    int prc = opts_parse_cmd("bench-sync_round floor", usage, specs, argc, argv, 0, NULL, NULL);
    if (prc != 0) return opts_exit_status(prc);
    int dtype = codec_parse(compress), update = !strcmp(download, "update");
    if (dtype == 0 || (!update && strcmp(download, "params"))) {
        fprintf(stderr, "floor: unknown --compress %s or --download %s\n", compress, download);
        return 2;
    }
    size_t n = (size_t)numel_ll;
    floor_bufs b;
    if (floor_alloc(&b, dtype, n, error_feedback) != 0) {
        fprintf(stderr, "floor: out of memory for %zu parameters\n", n);
        return 1;
    }
    for (int r = 0; r < reps; r++) {
        double t0 = mono();
        if (floor_encode(&b, dtype, n) != 0) {
            fprintf(stderr, "floor: the encoder refused the test values\n");
            floor_free(&b);
            return 1;
        }
        memcpy(b.q2, b.q, codec_bytes(dtype, n)); /* the other worker's Δ: the same values, its own memory */
        double t1 = mono();
        floor_serve(&b, dtype, update, n);
        double t2 = mono();
        floor_take(&b, dtype, update, n);
        printf("floor seconds take %.4f serve %.4f encode %.4f\n", mono() - t2, t2 - t1, t1 - t0);
        fflush(stdout);
    }
    floor_free(&b);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "worker")) return run_worker(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "tcp")) return run_tcp(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "redis")) return run_redis(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "floor")) return run_floor(argc - 2, argv + 2);
    fprintf(stderr, "usage: bin/bench-sync_round worker|tcp|redis|floor ... (see bench/sync_round)\n");
    return 2;
}
