/* group_worker.c: a process group of R ranks as one worker of a run, for the group tests.
 *
 * Each rank is a thread with its own libdiloco session (diloco.h "Process groups") and its own copy of
 * the quadratic trainer of the group's worker id, so the ranks train identical parameters as DDP
 * ranks would. The group's two collectives are shared memory: allgather copies every rank's message
 * into one table between two barriers, broadcast copies the root's slice of the buffer libdiloco handed it
 * (its parameters, or with --device-hooks libdiloco's own copy of the global ones) into the others'. Every
 * sync of every rank is one line on stdout:
 *
 *   sync rank <r> version <v> digest <16 hex> up <bytes> down <bytes> stale <0|1> seconds <s> wait <s>
 *        at <call> <first send> <pushed> <get> <last recv> <return> fragment <f> local <16 hex>
 *        shards <16 hex> step <n>
 *
 * (the phase stamps in wall-clock microseconds: diloco_after_step called, diloco_sync_info's four, and
 * diloco_after_step returned; bench/group_round splits a round's time with them), the fragment synced
 * (Streaming; 0 otherwise: versions are numbered per fragment), and the digest of the
 * rank's own parameters as it trained them, before the sync (the ranks of a group hold the same: DDP).
 * With --ranks 1 it is one process of its own (no group): bench/group_round's reference. shards is
 * diloco_sync_info.shards_digest (the whole run's, on every member), step the rank's inner steps so far.
 *
 * With --sharded the group is a sharded one (FSDP, fully_shard: diloco.h "Sharded groups"): rank r hands
 * libdiloco only its dim-0 chunk of every tensor of the run's layout (model_dim0_chunk, as fully_shard
 * holds them; the run made with coordinator init --fsdp-ranks R), in a buffer of those elements alone.
 * The quadratic problem is separable (each element trains on its own), so the rank's trainer still runs
 * on a whole vector of this tool's, and its slices are copied into the rank's buffer before every
 * diloco_after_step and back after a sync: what libdiloco sees and moves is the rank's part only. A sync
 * line's digest is then the XXH3 of the rank's part, local the digest of its part before the sync.
 *
 * Every rank asks its session its version (diloco_version) after every inner step, as a host's progress
 * line may (tests/it_tsan_worker.sh runs that under ThreadSanitizer while a Streaming fragment's round writes
 * it on its thread), and fails if it ever goes down.
 *
 * A rank whose session fails prints "error rank <r>: <message>" and the program exits 1.
 *
 * With --trainer gpt (bench/quality's group configurations) every rank trains the run's GPT instead, on
 * its own part of the data (the GPT flags after "--", as bin/worker takes them; rank r reads part
 * --shard-index + r), data-parallel inside the group as DDP does: after each backward the ranks' gradients
 * are replaced by their mean (summed in rank order, the same bytes on every rank; gpt_options.grad_reduce),
 * so every rank takes the same AdamW step and the ranks' parameters stay identical.
 *
 * With --steps 0 the ranks train until the run is shut down (coordinator control shutdown), as bin/worker
 * does; every rank stops when diloco_stop_requested says so, and prints "stopped rank <r> step <n>" (the
 * inner steps it trained). --stop-rank R asks rank R's session alone to stop: diloco_request_stop after its
 * inner step --stop-step N, or (--stop-file PATH) its diloco_options.stop flag set from another thread once
 * PATH exists, as a host's signal handler would, wherever the rank is then (at a barrier, joining): the group
 * stops together, each rank prints the same line, and a round a stop ended is not an error.
 *
 * usage: group_worker --redis URL --run RUN --worker-id ID --ranks R --steps N --sync-every H
 *                     [--no-bf16] [--error-feedback] [--heartbeat-ms MS] [--sync-timeout-ms MS (30000)]
 *                     [--net-timeout-ms MS (diloco_options')] [--latency-ms MS (each round waits MS first:
 *                     diloco_options.simulate_latency_ms)] [--final-sync (after the steps, diloco_force_sync; then
 *                     "final rank <r> version <v> local <16 hex>")] [--sharded]
 *                     [--step-delay-ms MS] (every rank sleeps MS after each inner step: a slower machine)
 *                     [--dylu] (follow the H the run's DyLU assigns the group: diloco_options.dylu)
 *                     [--fragment-alpha A] [--fragments-in-flight D] (Streaming: diloco_options')
 *                     [--trainer gpt [-- GPT FLAGS (--data, --batch, --lr, --num-shards, --shard-index...)]]
 *                     [--rank-netns NS0,NS1,...] (root: rank r's thread enters network namespace NSr before it
 *                     connects, so each rank uses a link of its own, as on a node with a NIC per GPU;
 *                     bench/group_round --nics)
 *                     [--bad SIZE|RUN|H|NUMEL] (rank 1 is given another group size, run, H or parameter
 *                     count, a model of another layout: a bad-input test)
 *                     [--bad OVERLAP|UNSHARDED] (with --sharded: rank 1 passes rank 0's slices, or none)
 *                     [--bad RESTART] (after its first sync rank 1 opens a new session, as a rank restarted
 *                     alone would, while rank 0 goes on in the group)
 *                     [--stop-rank R (--stop-step N | --stop-file PATH)] (rank R alone is asked to stop)
 *                     [--device-hooks host|cuda] (every rank's session reaches its parameters through device
 *                     hooks only: worker/trainers/host_device.h's host-memory stand-in, as bin/worker
 *                     --device-hooks host, or a CUDA device of its own (rank_device below); with --sharded the
 *                     device holds the rank's part; at the end "hooks rank <r> delta <n> snapshot <n> copy <n>
 *                     mix <n>": the hooks' calls) */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <unistd.h>
#include <stdarg.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "diloco.h"
#include "format/runconf.h"
#include "gpt/gpt.h"
#include "math/hash.h"
#include "model.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"
#include "redis/url.h"
#include "trainers/host_device.h"
#ifdef DILOCO_HAVE_CUDA
#include "cuda/diloco_cuda.h"
#endif
#include "trainers/quadratic.h"

#define MAX_RANKS 16
#define SLOT_MAX 4096
#define MAX_SLICES 512 /* --sharded: slices (tensors) per rank */

typedef struct shared {
    int ranks;
    pthread_barrier_t bar;
    unsigned char slots[MAX_RANKS][SLOT_MAX];
    float *bcast[MAX_RANKS]; /* the buffer each rank passed to the broadcast under way */
    float *grads[MAX_RANKS]; /* --trainer gpt: each rank's gradients at the reduction, and their mean */
    float *mean;
    pthread_mutex_t out_mu;
    int done; /* every rank ended (--stop-file's thread gives up); under out_mu */
} shared;

typedef struct rank_ctx {
    shared *sh;
    int rank;
    const char *redis, *run, *worker_id, *bad;
    char netns[64]; /* --rank-netns: this rank's network namespace ("" : the process's) */
    long steps;
    int sync_every, bf16, error_feedback, heartbeat_ms, sync_timeout_ms, net_timeout_ms, step_delay_ms, dylu, in_flight;
    int latency_ms, final_sync;
    double alpha;
    size_t numel;
    uint64_t seed;
    const runconf *rc;
    int gpt, ngpt; /* --trainer gpt, with the GPT flags gpt_argv[0..ngpt) */
    int sharded;   /* --sharded: this rank holds its dim-0 chunks only */
    const char *dev_kind; /* --device-hooks host|cuda: libdiloco reaches the parameters through hooks only */
    int stop_rank; /* --stop-rank (-1: none), asked after its inner step stop_step, or once stop_file exists */
    long stop_step;
    const char *stop_file;
    int stop_flag; /* this rank's diloco_options.stop (--stop-file sets it, atomically) */
    char **gpt_argv;
    int failed;
} rank_ctx;

static int allgather(void *ctx, const void *in, size_t len, void *out, char *err, size_t errlen)
{
    rank_ctx *c = ctx;
    if (len > SLOT_MAX) {
        snprintf(err, errlen, "message of %zu bytes is over the test's %d", len, SLOT_MAX);
        return -1;
    }
    memcpy(c->sh->slots[c->rank], in, len);
    pthread_barrier_wait(&c->sh->bar);
    for (int r = 0; r < c->sh->ranks; r++) memcpy((unsigned char *)out + (size_t)r * len, c->sh->slots[r], len);
    pthread_barrier_wait(&c->sh->bar);
    return 0;
}

static int broadcast(void *ctx, float *params, size_t off, size_t n, int root, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    rank_ctx *c = ctx;
    c->sh->bcast[c->rank] = params; /* (libdiloco's params, or with device hooks its own host copy: base) */
    pthread_barrier_wait(&c->sh->bar);
    if (c->rank != root) memcpy(params + off, c->sh->bcast[root] + off, n * sizeof(float));
    pthread_barrier_wait(&c->sh->bar);
    return 0;
}

/* DDP's all-reduce of the gradients over shared memory: rank r sums slice r of the vector over the ranks
 * (in rank order) into the shared mean, then every rank copies the whole mean. */
static int grad_mean(void *ctx, float *grads, size_t n, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    rank_ctx *c = ctx;
    shared *sh = c->sh;
    sh->grads[c->rank] = grads;
    pthread_barrier_wait(&sh->bar);
    size_t lo = n * (size_t)c->rank / (size_t)sh->ranks, hi = n * (size_t)(c->rank + 1) / (size_t)sh->ranks;
    float inv = 1.0f / (float)sh->ranks;
    for (size_t i = lo; i < hi; i++) {
        float s = 0;
        for (int r = 0; r < sh->ranks; r++) s += sh->grads[r][i];
        sh->mean[i] = s * inv;
    }
    pthread_barrier_wait(&sh->bar);
    memcpy(grads, sh->mean, n * sizeof(float));
    return 0;
}

/* The run's GPT with the GPT flags, as bin/worker builds it (worker/main.c make_gpt), reading part
 * --shard-index + rank, its gradients averaged over the ranks. */
static trainer *make_gpt(rank_ctx *c, char *err, size_t errlen)
{
    char model[256];
    snprintf(model, sizeof model, "%s", c->rc->model);
    char *argv[160];
    int argc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(model, " ", &save); tok && argc < 64; tok = strtok_r(NULL, " ", &save))
        argv[argc++] = tok;
    for (int i = 0; i < c->ngpt && argc < 158; i++) argv[argc++] = c->gpt_argv[i];
    argv[argc] = NULL;
    gpt_options o;
    gpt_options_default(&o);
    o.seed = c->rc->seed;
    o.total_steps = c->steps;
    int seq_given = 0;
    for (int i = 0; i < c->ngpt; i++)
        seq_given |= !strcmp(c->gpt_argv[i], "--seq") || !strncmp(c->gpt_argv[i], "--seq=", 6);
    int consumed = gpt_options_parse(&o, argc, argv, err, errlen);
    if (consumed < 0) return NULL;
    if (argc - consumed > 0) {
        snprintf(err, errlen, "unknown GPT option %s", argv[0]);
        return NULL;
    }
    if (!seq_given && o.seq > o.model.ctx) o.seq = o.model.ctx; /* the default, 256, fits no shorter context */
    o.shard_index += c->rank;
    if (c->sh->ranks > 1) {
        o.grad_reduce = grad_mean;
        o.grad_reduce_ctx = c;
    }
    return gpt_trainer_create(&o, err, errlen);
}

static void say(rank_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(rank_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&c->sh->out_mu);
    vprintf(fmt, ap);
    fflush(stdout);
    pthread_mutex_unlock(&c->sh->out_mu);
    va_end(ap);
}

/* Enter network namespace name (ip netns's /var/run/netns/name) for this thread and the threads it makes. */
static int enter_netns(const char *name, char *err, size_t errlen)
{
    char path[128];
    snprintf(path, sizeof path, "/var/run/netns/%s", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
        snprintf(err, errlen, "cannot enter network namespace %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* --sharded: rank r's dim-0 chunk of every tensor of the run's layout (offset, count pairs into sl, cap
 * pairs), as fully_shard holds them; the number of slices, or -1. */
static int rank_slices(const rank_ctx *c, int rank, uint64_t *sl, int cap, size_t *total, char *err, size_t errlen)
{
    model_spec ms;
    model_tensor *t;
    int nt, n = 0;
    size_t numel;
    if (model_spec_parse(c->rc->trainer, c->rc->model, &ms, err, errlen) < 0 ||
        model_layout(&ms, &t, &nt, &numel, err, errlen) < 0)
        return -1;
    *total = 0;
    for (int i = 0; i < nt; i++) {
        size_t off, cnt = model_dim0_chunk(&t[i], c->sh->ranks, rank, &off);
        if (cnt == 0) continue;
        if (n == cap) {
            snprintf(err, errlen, "more than %d slices", cap);
            free(t);
            return -1;
        }
        sl[2 * n] = off;
        sl[2 * n + 1] = cnt;
        *total += cnt;
        n++;
    }
    free(t);
    return n;
}

/* --sharded: the rank's slices of the trainer's vector into its part (to_part), or back. */
static void copy_slices(float *full, float *part, const uint64_t *sl, int n, int to_part)
{
    for (int i = 0; i < n; i++) {
        float *f = full + sl[2 * i];
        size_t bytes = sl[2 * i + 1] * sizeof(float);
        if (to_part) memcpy(part, f, bytes);
        else memcpy(f, part, bytes);
        part += sl[2 * i + 1];
    }
}

/* ---- --device-hooks: the rank's device ---------------------------------------------------------- */

/* The rank's parameters behind libdiloco's device hooks, which it reaches through them only (it is given
 * no params pointer). host: worker/trainers/host_device's stand-in, over the rank's buffer itself. cuda: a
 * CUDA device (the backend bin/worker loads, or $DILOCO_CUDA_BACKEND's: tests/it_cuda_emu.sh names the CPU
 * emulator's), a device buffer of the rank's numel of its own (worker/cuda/diloco_cuda.h), into which the
 * rank's trained values are uploaded before each diloco_after_step and out of which they are downloaded
 * after a sync, where a CUDA trainer's would already be. The hooks' calls are counted on the way (on the
 * rank's training thread only: diloco.h) and printed at the end. */
typedef struct rank_device {
    diloco_device_ops inner;
    host_device *host;
    void *cuda; /* a dl_cuda (DILOCO_HAVE_CUDA builds) */
    float *buf; /* the rank's buffer: the device itself (host), or what it mirrors (cuda) */
    size_t numel;
    unsigned long delta, load[3];
} rank_device;

static int counted_delta(void *ctx, size_t off, size_t n, int bf16, void *out, size_t *bad, char *err, size_t errlen)
{
    rank_device *v = ctx;
    v->delta++;
    return v->inner.delta(v->inner.ctx, off, n, bf16, out, bad, err, errlen);
}

static int counted_load(void *ctx, const float *base, size_t off, size_t n, int mode, double alpha, char *err,
                        size_t errlen)
{
    rank_device *v = ctx;
    if (mode >= 0 && mode < 3) v->load[mode]++;
    return v->inner.load(v->inner.ctx, base, off, n, mode, alpha, err, errlen);
}

static void *device_host_alloc(void *ctx, size_t bytes)
{
    rank_device *v = ctx;
    return v->inner.host_alloc(v->inner.ctx, bytes);
}

static void device_host_free(void *ctx, void *p)
{
    rank_device *v = ctx;
    v->inner.host_free(v->inner.ctx, p);
}

/* kind "host" or "cuda" over buf[0, numel); ops takes the counted hooks. 0, or -1 with err. */
static int device_open(rank_device *v, const char *kind, float *buf, size_t numel, diloco_device_ops *ops, char *err,
                       size_t errlen)
{
    *v = (rank_device){.buf = buf, .numel = numel};
    if (!strcmp(kind, "host")) {
        if (!(v->host = host_device_create(buf, numel, err, errlen))) return -1;
        host_device_ops(v->host, &v->inner);
    } else if (!strcmp(kind, "cuda")) {
#ifdef DILOCO_HAVE_CUDA
        dl_cuda *c = dl_cuda_create(NULL, numel, NULL, err, errlen);
        if (!c) return -1;
        v->cuda = c;
        dl_cuda_ops(c, &v->inner);
#else
        snprintf(err, errlen, "--device-hooks cuda: this build has no CUDA backend (nvcc was missing)");
        return -1;
#endif
    } else {
        snprintf(err, errlen, "--device-hooks %s: want host or cuda", kind);
        return -1;
    }
    *ops = (diloco_device_ops){.ctx = v, .delta = counted_delta, .load = counted_load};
    if (v->inner.host_alloc) {
        ops->host_alloc = device_host_alloc;
        ops->host_free = device_host_free;
    }
    return 0;
}

/* cuda: the rank's buffer into the device (push: after a training step) or out of it (pull: after a sync
 * loaded new parameters); host: nothing, the buffer is the device. */
static int device_move(rank_device *v, int push, char *err, size_t errlen)
{
    if (!v->cuda) return 0;
#ifdef DILOCO_HAVE_CUDA
    return push ? dl_cuda_params_upload(v->cuda, v->buf, 0, v->numel, err, errlen)
                : dl_cuda_params_download(v->cuda, v->buf, 0, v->numel, err, errlen);
#else
    (void)push;
    snprintf(err, errlen, "no CUDA backend");
    return -1;
#endif
}

static void device_close(rank_device *v)
{
    host_device_free(v->host);
#ifdef DILOCO_HAVE_CUDA
    dl_cuda_free(v->cuda);
#endif
    v->host = NULL;
    v->cuda = NULL;
}

static void *rank_main(void *p)
{
    rank_ctx *c = p;
    char err[1024];
    if (c->netns[0] && enter_netns(c->netns, err, sizeof err) < 0) {
        say(c, "error rank %d: %s\n", c->rank, err);
        c->failed = 1;
        return NULL;
    }
    trainer *t;
    if (c->gpt) {
        t = make_gpt(c, err, sizeof err);
    } else {
        quadratic_options q;
        quadratic_options_default(&q);
        q.numel = c->numel;
        q.seed = c->seed;
        q.worker_id = c->worker_id;
        t = quadratic_trainer_create(&q, err, sizeof err);
    }
    if (!t) {
        say(c, "error rank %d: %s\n", c->rank, err);
        c->failed = 1;
        return NULL;
    }
    diloco_options o;
    diloco_options_default(&o);
    o.redis_url = c->redis;
    o.run = c->run;
    o.worker_id = c->rank == 0 ? c->worker_id : NULL; /* the others take rank 0's */
    o.sync_every = c->sync_every;
    o.bf16 = c->bf16;
    o.error_feedback = c->error_feedback;
    o.dylu = c->dylu;
    o.fragment_alpha = c->alpha;
    if (c->in_flight > 0) o.fragments_in_flight = c->in_flight;
    o.heartbeat_interval_ms = c->heartbeat_ms;
    o.sync_timeout_ms = c->sync_timeout_ms;
    if (c->net_timeout_ms > 0) o.net_timeout_ms = c->net_timeout_ms;
    o.simulate_latency_ms = c->latency_ms;
    o.stop = &c->stop_flag;
    o.group = (diloco_group_ops){
        .size = c->sh->ranks, .rank = c->rank, .ctx = c, .allgather = allgather, .broadcast = broadcast};
    if (c->bad && c->rank == 1) {
        if (!strcmp(c->bad, "SIZE")) o.group.size = c->sh->ranks + 1;
        if (!strcmp(c->bad, "RUN")) o.run = "not-this-run";
        if (!strcmp(c->bad, "H")) o.sync_every = c->sync_every + 1;
    }
    size_t numel = c->bad && !strcmp(c->bad, "NUMEL") && c->rank == 1 ? t->numel - 1 : t->numel;
    float *mine = t->params; /* what libdiloco holds: the whole vector, or (--sharded) this rank's part */
    static uint64_t slices[MAX_RANKS][2 * MAX_SLICES];
    uint64_t *sl = slices[c->rank];
    int nsl = 0;
    int bad1 = c->bad && c->rank == 1;
    if (c->sharded && !(bad1 && !strcmp(c->bad, "UNSHARDED"))) {
        int as = bad1 && !strcmp(c->bad, "OVERLAP") ? 0 : c->rank; /* OVERLAP: rank 1 takes rank 0's slices */
        nsl = rank_slices(c, as, sl, MAX_SLICES, &numel, err, sizeof err);
        mine = nsl >= 0 ? malloc((numel ? numel : 1) * sizeof(float)) : NULL;
        if (!mine) {
            say(c, "error rank %d: %s\n", c->rank, nsl < 0 ? err : "out of memory");
            c->failed = 1;
            t->destroy(t);
            return NULL;
        }
        o.group.slices = sl;
        o.group.nslices = nsl;
        o.group.broadcast = NULL; /* a sharded group exchanges nothing */
    }
    rank_device dev = {0}; /* --device-hooks: libdiloco reaches what the rank holds through them only */
    if (c->dev_kind && device_open(&dev, c->dev_kind, mine, numel, &o.device, err, sizeof err) < 0) {
        say(c, "error rank %d: %s\n", c->rank, err);
        c->failed = 1;
        device_close(&dev);
        if (mine != t->params) free(mine);
        t->destroy(t);
        return NULL;
    }
    diloco *d;
    int opened = diloco_open(&o, c->dev_kind ? NULL : mine, numel, &d, err, sizeof err);
    if (opened == DILOCO_STOPPED) /* (not an error: a stop, of this rank or another, ended the join) */
        say(c, "stopped rank %d while joining: %s\n", c->rank, err);
    if (opened < 0) {
        if (opened != DILOCO_STOPPED) say(c, "error rank %d: %s\n", c->rank, err);
        c->failed = opened != DILOCO_STOPPED;
        if (mine != t->params) free(mine);
        device_close(&dev);
        t->destroy(t);
        return NULL;
    }
    if (device_move(&dev, 0, err, sizeof err) < 0) { /* (the join loaded the global parameters into it) */
        say(c, "error rank %d: %s\n", c->rank, err);
        c->failed = 1;
    }
    if (mine != t->params) copy_slices(t->params, mine, sl, nsl, 0);
    trainer_stats st;
    int64_t version = diloco_version(d);
    long step = 1;
    for (; !c->failed && (c->steps == 0 || step <= c->steps) && !diloco_stop_requested(d); step++) {
        if (t->step(t, &st, err, sizeof err) < 0) break;
        if (c->step_delay_ms > 0) sleep_ms((unsigned)c->step_delay_ms);
        diloco_report(d, st.loss, st.tokens);
        if (mine != t->params) copy_slices(t->params, mine, sl, nsl, 1);
        if (device_move(&dev, 1, err, sizeof err) < 0) {
            say(c, "error rank %d: %s\n", c->rank, err);
            c->failed = 1;
            break;
        }
        uint64_t local = diloco_steps_to_sync(d) == 1 ? hash64(mine, numel * sizeof(float)) : 0; /* (a boundary) */
        if (c->rank == c->stop_rank && step == c->stop_step) diloco_request_stop(d);
        uint64_t t_call = wall_us();
        int rc = diloco_after_step(d, err, sizeof err);
        uint64_t t_ret = wall_us();
        if (rc == 1 && device_move(&dev, 0, err, sizeof err) < 0) rc = -1;
        if (rc == 1 && mine != t->params) copy_slices(t->params, mine, sl, nsl, 0);
        if (rc < 0 && diloco_stop_requested(d)) { /* a round a stop ended: the step was trained */
            step++;
            break;
        }
        if (rc < 0) {
            say(c, "error rank %d: %s\n", c->rank, err);
            c->failed = 1;
            break;
        }
        /* asked after every step, as a host's progress line may (Streaming: while fragment 0 is in flight) */
        int64_t now_at = diloco_version(d);
        if (now_at < version) {
            say(c, "error rank %d: diloco_version went down from %" PRId64 " to %" PRId64 "\n", c->rank, version,
                now_at);
            c->failed = 1;
            break;
        }
        version = now_at;
        diloco_sync_info s;
        if (rc == 1 && diloco_last_sync(d, &s) == 0)
            say(c,
                "sync rank %d version %" PRId64 " digest %016" PRIx64 " up %" PRIu64 " down %" PRIu64
                " stale %d seconds %.4f wait %.4f at %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
                " %" PRIu64 " fragment %d local %016" PRIx64 " shards %016" PRIx64 " step %ld\n",
                c->rank, s.version, s.digest, s.bytes_up, s.bytes_down, s.stale, s.seconds, s.wait_seconds, t_call,
                s.t_first_send_us, s.t_pushed_us, s.t_get_us, s.t_last_recv_us, t_ret, s.fragment, local,
                s.shards_digest, step);
        if (rc == 1 && c->bad && !strcmp(c->bad, "RESTART") && c->rank == 1) {
            diloco *again; /* the old session stays open: the group, with rank 0 in it, goes on */
            if (diloco_open(&o, t->params, t->numel, &again, err, sizeof err) == 0) {
                say(c, "rank 1 opened again\n");
                diloco_close(again);
            } else {
                say(c, "error rank %d: %s\n", c->rank, err);
                c->failed = 1;
            }
            break;
        }
    }
    if ((c->steps == 0 || diloco_stop_requested(d)) && !c->failed)
        say(c, "stopped rank %d step %ld\n", c->rank, step - 1);
    if (c->final_sync && !c->failed) { /* every fragment at once, the rounds in flight settled first */
        if (diloco_force_sync(d, err, sizeof err) < 0 || device_move(&dev, 0, err, sizeof err) < 0) {
            say(c, "error rank %d: %s\n", c->rank, err);
            c->failed = 1;
        } else {
            if (mine != t->params) copy_slices(t->params, mine, sl, nsl, 0);
            say(c, "final rank %d version %" PRId64 " local %016" PRIx64 "\n", c->rank, diloco_version(d),
                hash64(mine, numel * sizeof(float)));
        }
    }
    diloco_close(d);
    if (c->dev_kind) /* what went through the hooks (the test checks that the device path was the one taken) */
        say(c, "hooks rank %d delta %lu snapshot %lu copy %lu mix %lu\n", c->rank, dev.delta, dev.load[0], dev.load[1],
            dev.load[2]);
    if (mine != t->params) free(mine);
    device_close(&dev);
    t->destroy(t);
    return NULL;
}

/* --stop-file: once the file exists, rank stop_rank's stop flag (c: that rank's context) is set from this
 * thread, as a host's signal handler would, wherever that rank is. */
static void *stop_watch(void *p)
{
    rank_ctx *c = p;
    for (;;) {
        pthread_mutex_lock(&c->sh->out_mu);
        int done = c->sh->done;
        pthread_mutex_unlock(&c->sh->out_mu);
        if (done) return NULL;
        if (access(c->stop_file, F_OK) == 0) {
            __atomic_store_n(&c->stop_flag, 1, __ATOMIC_RELAXED);
            return NULL;
        }
        sleep_ms(20);
    }
}

/* The run's config (the quadratic trainer's problem comes from numel and seed, the GPT from the model). */
static int read_run(const char *url_s, const char *run, runconf *rc)
{
    char err[512];
    redis_url url;
    if (redis_url_parse(url_s, &url, err, sizeof err) < 0) return -1;
    rconn *c = rconn_connect(&url, 5000, err, sizeof err);
    if (!c || runconf_load(c, run, rc, err, sizeof err) < 0) {
        fprintf(stderr, "group_worker: %s\n", err);
        if (c) rconn_free(c);
        return -1;
    }
    rconn_free(c);
    return 0;
}

int main(int argc, char **argv)
{
    gpt_openblas_autotune(argv); /* may re-execute us with faster BLAS kernels: must come first */
    static shared sh;
    rank_ctx base = {.sh = &sh, .bf16 = 1, .heartbeat_ms = 1000, .sync_timeout_ms = 30000, .stop_rank = -1};
    int ranks = 2;
    const char *netns = NULL;
    static struct option opts[] = {{"redis", 1, 0, 'r'},
                                   {"run", 1, 0, 'n'},
                                   {"worker-id", 1, 0, 'w'},
                                   {"ranks", 1, 0, 'R'},
                                   {"steps", 1, 0, 's'},
                                   {"sync-every", 1, 0, 'H'},
                                   {"no-bf16", 0, 0, 'b'},
                                   {"error-feedback", 0, 0, 'e'},
                                   {"heartbeat-ms", 1, 0, 'm'},
                                   {"sync-timeout-ms", 1, 0, 'T'},
                                   {"net-timeout-ms", 1, 0, 'W'},
                                   {"latency-ms", 1, 0, 'L'},
                                   {"final-sync", 0, 0, 'Z'},
                                   {"bad", 1, 0, 'x'},
                                   {"trainer", 1, 0, 't'},
                                   {"rank-netns", 1, 0, 'N'},
                                   {"sharded", 0, 0, 'S'},
                                   {"step-delay-ms", 1, 0, 'd'},
                                   {"dylu", 0, 0, 'D'},
                                   {"fragment-alpha", 1, 0, 'A'},
                                   {"fragments-in-flight", 1, 0, 'F'},
                                   {"stop-rank", 1, 0, 'P'},
                                   {"stop-step", 1, 0, 'p'},
                                   {"stop-file", 1, 0, 'f'},
                                   {"device-hooks", 1, 0, 'V'},
                                   {0, 0, 0, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (ch) {
        case 'r': base.redis = optarg; break;
        case 'n': base.run = optarg; break;
        case 'w': base.worker_id = optarg; break;
        case 'R': ranks = atoi(optarg); break;
        case 's': base.steps = atol(optarg); break;
        case 'H': base.sync_every = atoi(optarg); break;
        case 'b': base.bf16 = 0; break;
        case 'e': base.error_feedback = 1; break;
        case 'm': base.heartbeat_ms = atoi(optarg); break;
        case 'T': base.sync_timeout_ms = atoi(optarg); break;
        case 'W': base.net_timeout_ms = atoi(optarg); break;
        case 'L': base.latency_ms = atoi(optarg); break;
        case 'Z': base.final_sync = 1; break;
        case 'x': base.bad = optarg; break;
        case 't': base.gpt = !strcmp(optarg, "gpt"); break;
        case 'N': netns = optarg; break;
        case 'S': base.sharded = 1; break;
        case 'd': base.step_delay_ms = atoi(optarg); break;
        case 'D': base.dylu = 1; break;
        case 'A': base.alpha = atof(optarg); break;
        case 'F': base.in_flight = atoi(optarg); break;
        case 'P': base.stop_rank = atoi(optarg); break;
        case 'p': base.stop_step = atol(optarg); break;
        case 'f': base.stop_file = optarg; break;
        case 'V': base.dev_kind = optarg; break;
        default: fprintf(stderr, "usage: see the comment at the top of tests/tools/group_worker.c\n"); return 2;
        }
    }
    if (!base.redis || !base.run || !base.worker_id || ranks < 1 || ranks > MAX_RANKS || base.sync_every < 1 ||
        base.stop_rank >= ranks || (base.stop_rank >= 0 && !base.stop_step && !base.stop_file)) {
        fprintf(stderr, "usage: see the comment at the top of tests/tools/group_worker.c\n");
        return 2;
    }
    base.gpt_argv = argv + optind;
    base.ngpt = argc - optind;
    if (base.ngpt > 0 && !base.gpt) {
        fprintf(stderr, "group_worker: %s: GPT flags need --trainer gpt\n", argv[optind]);
        return 2;
    }
    runconf rc;
    if (read_run(base.redis, base.run, &rc) < 0) return 1;
    base.rc = &rc;
    base.numel = (size_t)rc.numel;
    base.seed = rc.seed;
    if (base.gpt && !(sh.mean = malloc(base.numel * sizeof(float)))) return 1;
    sh.ranks = ranks;
    pthread_barrier_init(&sh.bar, NULL, (unsigned)ranks);
    pthread_mutex_init(&sh.out_mu, NULL);
    rank_ctx ctx[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < ranks; r++) {
        ctx[r] = base;
        ctx[r].rank = r;
        const char *ns = netns; /* the r-th name of the comma list */
        for (int k = 0; ns && k < r; k++) ns = (ns = strchr(ns, ',')) ? ns + 1 : NULL;
        if (ns) snprintf(ctx[r].netns, sizeof ctx[r].netns, "%.*s", (int)strcspn(ns, ","), ns);
        pthread_create(&th[r], NULL, rank_main, &ctx[r]);
    }
    pthread_t watch;
    int watching =
        base.stop_rank >= 0 && base.stop_file && pthread_create(&watch, NULL, stop_watch, &ctx[base.stop_rank]) == 0;
    int failed = 0;
    for (int r = 0; r < ranks; r++) {
        pthread_join(th[r], NULL);
        failed |= ctx[r].failed;
    }
    pthread_mutex_lock(&sh.out_mu);
    sh.done = 1;
    pthread_mutex_unlock(&sh.out_mu);
    if (watching) pthread_join(watch, NULL);
    free(sh.mean);
    runconf_free(&rc);
    return failed ? 1 : 0;
}
