/* init.c: `coordinator init`, which creates a run.
 *
 * It loads the function library (FUNCTION LOAD REPLACE), builds the initial parameters (the model's
 * deterministic init from --seed, model/model.h: the same bytes a worker's trainer starts from), cuts
 * them into shards, writes each shard's version 0 as a snapshot blob dl:{R:k}:snap:0:0, and finally
 * calls dl_init, which creates the control keys atomically. The blobs are written first and are
 * harmless if init fails: nothing references them until dl_init. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/opts.h"
#include "base/util.h"
#include "base/version.h"
#include "checkpoint.h"
#include "coordinator.h"
#include "format/blob.h"
#include "format/keys.h"
#include "format/runconf.h"
#include "from_state.h"
#include "init.h"
#include "layout.h"
#include "math/codec.h"
#include "math/codec_sparse.h"
#include "math/codec_topk.h"
#include "math/outer.h"
#include "model.h"
#include "redis/rconn.h"
#include "snapshot.h"

extern const char lua_library[];
extern const unsigned long lua_library_len;

/* ---- initial parameters and their layout ------------------------------------------------------ */

typedef struct initial_params {
    float *params;
    uint64_t numel;
    model_tensor *tensors;
    int ntensors;
    char model[256];
    float *mom;         /* outer momentum to start from (--from-checkpoint), or NULL */
    float *dnbuf;       /* Delayed Nesterov buffer to start from (--from-checkpoint of a DN run), or NULL */
    uint64_t dn_t0;     /* ... and the DN submissions applied before it (config dn_t0) */
    uint64_t *dn_t0_shards; /* ... per shard, when the checkpoint's shards stood at different points of
                               that schedule (config dn_t0_shards), else NULL */
    uint64_t *ck_bounds;    /* ... and the checkpoint's shard bounds, which the run's must then be */
    int ck_nshards;
    int64_t ck_version; /* the checkpoint's version, -1 without one */
    char *ck_versions;  /* its shards' versions "a,b,..." when they differ, or NULL */
    char ck_run[80];
} initial_params;

static int make_initial_seed(const init_args *a, initial_params *ip, char *err, size_t errlen);

/* A run from a model's state (trainer "state") has no model to rebuild its layout from: it is the
 * checkpoint's own (its metadata). */
static int layout_of_checkpoint(const checkpoint *ck, initial_params *ip, char *err, size_t errlen)
{
    char e2[512];
    if (!ck->layout || layout_parse_json(ck->layout, ck->numel, &ip->tensors, &ip->ntensors, e2, sizeof e2) < 0) {
        err_set(err, errlen, "--from-checkpoint: a run from a model's state takes its layout from the checkpoint: %s",
                ck->layout ? e2 : "this one has none");
        return -1;
    }
    ip->numel = ck->numel;
    snprintf(ip->model, sizeof ip->model, "%s", ck->model);
    return 0;
}

/* The checkpoint holds the model this run asks for (trainer, parameter count, model). 0, or -1 + err. */
static int check_same_model(const init_args *a, const checkpoint *ck, const initial_params *ip, char *err,
                            size_t errlen)
{
    if (strcmp(ck->trainer, a->trainer) == 0 && ck->numel == ip->numel && strcmp(ck->model, ip->model) == 0) return 0;
    err_set(err, errlen,
            "--from-checkpoint %s: layout mismatch: the checkpoint holds a %s model (%s, %" PRIu64
            " parameters), this run asks for a %s model (%s, %" PRIu64 " parameters); drop the trainer and model flags "
            "to take the checkpoint's, or use a checkpoint of this model",
            a->from_checkpoint, ck->trainer, ck->model, ck->numel, a->trainer, ip->model, ip->numel);
    return -1;
}

/* The checkpoint's Delayed Nesterov buffer into ip (unless --reset-momentum). A DN buffer holds the
 * submissions since the last momentum step, counted against the every-N schedule that dn_t fixes: only a
 * run with the same N and variant can continue it. 0, or -1 + err. */
static int take_dn_buffer(const init_args *a, checkpoint *ck, initial_params *ip, char *err, size_t errlen)
{
    const char *dnv = a->dn_variant ? a->dn_variant : "paper";
    if (ck->dn_buffer <= 0 || a->reset_momentum) return 0;
    if (!a->async || a->dn_buffer != ck->dn_buffer || strcmp(dnv, ck->dn_variant) != 0) {
        err_set(err, errlen,
                "--from-checkpoint %s: the checkpoint holds a Delayed Nesterov buffer (async, "
                "--dn-buffer-size %d --dn-variant %s, %" PRIu64 " submissions applied), which this run (%s, "
                "--dn-buffer-size %lld --dn-variant %s) cannot continue: add --async (the DN settings then come "
                "from the checkpoint), or --reset-momentum to start the outer optimizer afresh",
                a->from_checkpoint, ck->dn_buffer, ck->dn_variant, ck->dn_t, a->async ? "async" : "sync", a->dn_buffer,
                dnv);
        return -1;
    }
    ip->dnbuf = ck->dnbuf;
    ck->dnbuf = NULL;
    ip->dn_t0 = ck->dn_t;
    if (ck->dn_t_shards) { /* (checked against the run's shards once they are cut: same_dn_shards) */
        ip->dn_t0_shards = ck->dn_t_shards;
        ip->ck_bounds = ck->shard_bounds;
        ip->ck_nshards = ck->nshards;
        ck->dn_t_shards = NULL;
        ck->shard_bounds = NULL;
    }
    return 0;
}

/* A checkpoint whose shards stood at different points of the Delayed Nesterov schedule (dn_t_shards: it was
 * taken with its fragments, or a shut-down run's shards, at different versions) continues shard by shard:
 * the run must cut its shards as the checkpoint did (sb, a->shards). 0, or -1 + err. */
static int same_dn_shards(const init_args *a, const initial_params *ip, const uint64_t *sb, char *err, size_t errlen)
{
    if (!ip->dn_t0_shards) return 0;
    int same = a->shards == ip->ck_nshards;
    for (int k = 0; same && k <= ip->ck_nshards; k++) same = sb[k] == ip->ck_bounds[k];
    if (same) return 0;
    err_set(err, errlen,
            "--from-checkpoint %s: its shards stood at different points of the Delayed Nesterov schedule "
            "(dn_t_shards), which carries on shard by shard: cut the run into the checkpoint's %d shards (drop "
            "--shards and --fsdp-ranks), or start the outer optimizer afresh with --reset-momentum",
            a->from_checkpoint, ip->ck_nshards);
    return -1;
}

/* The run's layout as requested, then the checkpoint's values in place of the seeded ones. */
static int make_initial_checkpoint(const init_args *a, initial_params *ip, char *err, size_t errlen)
{
    memset(ip, 0, sizeof *ip); /* create_run frees it whatever happens */
    ip->ck_version = -1;
    checkpoint ck;
    char e2[1024];
    if (checkpoint_read(a->from_checkpoint, 1, &ck, e2, sizeof e2) < 0) {
        err_set(err, errlen, "--from-checkpoint: %s", e2);
        return -1;
    }
    if ((!strcmp(a->trainer, "state") ? layout_of_checkpoint(&ck, ip, err, errlen)
                                      : make_initial_seed(a, ip, err, errlen)) < 0 ||
        check_same_model(a, &ck, ip, err, errlen) < 0) {
        checkpoint_free(&ck);
        return -1;
    }
    free(ip->params);
    ip->params = ck.params;
    ck.params = NULL;
    if (ck.has_mom && !a->reset_momentum) {
        ip->mom = ck.mom;
        ck.mom = NULL;
    }
    if (take_dn_buffer(a, &ck, ip, err, errlen) < 0) {
        checkpoint_free(&ck);
        return -1;
    }
    ip->ck_version = ck.version;
    if (ck.shard_versions) ip->ck_versions = runconf_format_counts(ck.shard_versions, ck.nshards); /* (NULL: untold) */
    snprintf(ip->ck_run, sizeof ip->ck_run, "%s", ck.run);
    checkpoint_free(&ck);
    return 0;
}

/* --from-state: the file's values; its layout, or the requested model's when it is exactly that. */
static int make_initial_state(const init_args *a, initial_params *ip, char *err, size_t errlen)
{
    from_state fs;
    memset(ip, 0, sizeof *ip); /* create_run frees it whatever happens */
    if (from_state_read(a->from_state, &fs, err, errlen) < 0) return -1;
    if (strcmp(a->trainer, "state") != 0) {
        char what[300];
        if (make_initial_seed(a, ip, err, errlen) < 0) goto fail;
        snprintf(what, sizeof what, "the %s model %s", a->trainer, ip->model);
        if (from_state_match(&fs, ip->tensors, ip->ntensors, what, err, errlen) < 0) goto fail;
        free(ip->params);
        ip->params = fs.params;
        fs.params = NULL;
        from_state_free(&fs);
        return 0;
    }
    ip->ck_version = -1;
    ip->params = fs.params;
    ip->numel = fs.numel;
    ip->tensors = fs.tensors;
    ip->ntensors = fs.ntensors;
    snprintf(ip->model, sizeof ip->model, "--tensors %d", fs.ntensors);
    return 0;
fail:
    from_state_free(&fs);
    return -1;
}

static int make_initial(const init_args *a, initial_params *ip, char *err, size_t errlen)
{
    if (a->from_checkpoint) return make_initial_checkpoint(a, ip, err, errlen);
    if (a->from_state) return make_initial_state(a, ip, err, errlen);
    return make_initial_seed(a, ip, err, errlen);
}

static int make_initial_seed(const init_args *a, initial_params *ip, char *err, size_t errlen)
{
    memset(ip, 0, sizeof *ip);
    ip->ck_version = -1;
    model_spec ms = {.kind = a->trainer, .gpt = a->gpt, .numel = (size_t)a->numel};
    size_t n;
    if (model_layout(&ms, &ip->tensors, &ip->ntensors, &n, err, errlen) < 0) return -1;
    ip->numel = n;
    if (!(ip->params = malloc(n * sizeof(float)))) {
        err_set(err, errlen, "out of memory for the initial parameters");
        return -1;
    }
    if (model_init_params(&ms, (uint64_t)a->seed, ip->params, n, err, errlen) < 0) return -1;
    model_spec_format(&ms, ip->model, sizeof ip->model);
    return 0;
}

static void free_initial(initial_params *ip)
{
    free(ip->params);
    free(ip->mom);
    free(ip->dnbuf);
    free(ip->dn_t0_shards);
    free(ip->ck_bounds);
    free(ip->ck_versions);
    free(ip->tensors);
}

/* ---- Redis ---------------------------------------------------------------------------------------- */

/* FUNCTION LOAD REPLACE on one server (every master of a cluster: a function runs where its keys are). */
static int load_on_node(redisContext *node, const char *addr, void *arg, char *err, size_t errlen)
{
    (void)arg;
    redisReply *r = redisCommand(node, "FUNCTION LOAD REPLACE %b", lua_library, (size_t)lua_library_len);
    int ok = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
    if (ok < 0) err_set(err, errlen, "%s: %s", addr, r ? r->str : node->errstr);
    if (r) freeReplyObject(r);
    return ok;
}

int coord_load_library(rconn *rc, char *err, size_t errlen)
{
    if (rconn_each_master(rc, load_on_node, NULL, err, errlen) == 0) return 0;
    const char *refusal = strstr(err, "ERR unknown command");
    if (refusal != NULL) rconn_sentinel_error(rc, refusal, err, errlen); /* (a Sentinel: said which URL to give) */
    return -1;
}

static int delete_key(redisContext *node, const char *key, void *arg)
{
    redisReply *d = redisCommand(node, "DEL %s", key);
    if (d) freeReplyObject(d);
    (*(long *)arg)++;
    return 0;
}

/* Delete every key of the run on one node (a cluster's keys are on the node that SCAN found them on). */
static int delete_on_node(redisContext *node, const char *addr, void *arg, char *err, size_t errlen)
{
    const char *run = ((const char **)arg)[0];
    long *deleted = (long *)((const char **)arg)[1];
    char patterns[2][160];
    snprintf(patterns[0], sizeof patterns[0], "dl:{%s}*", run);
    snprintf(patterns[1], sizeof patterns[1], "dl:{%s:*", run);
    for (int p = 0; p < 2; p++)
        if (rconn_scan_node(node, addr, patterns[p], delete_key, deleted, err, errlen) < 0) return -1;
    return 0;
}

static int delete_run(rconn *rc, const char *run, char *err, size_t errlen)
{
    long deleted = 0;
    const void *arg[2] = {run, &deleted};
    if (rconn_each_master(rc, delete_on_node, arg, err, errlen) < 0) return -1;
    log_info("--force: deleted %ld keys of run '%s'", deleted, run);
    return 0;
}

static int run_exists(rconn *rc, const char *run, int *exists, char *err, size_t errlen)
{
    char key[KEY_MAX];
    redisReply *r = rconn_command(rc, "EXISTS %s", key_run(key, sizeof key, run, "config"));
    if (rconn_reply_error(rc, r, err, errlen) < 0) {
        if (r) freeReplyObject(r);
        return -1;
    }
    *exists = r->integer > 0;
    freeReplyObject(r);
    return 0;
}

/* HLEN of one of the run's hashes (0 when Redis does not answer: only a warning depends on it). */
static long long run_hash_len(rconn *rc, const char *run, const char *name)
{
    char key[KEY_MAX];
    redisReply *r = rconn_command(rc, "HLEN %s", key_run(key, sizeof key, run, name));
    long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    if (r) freeReplyObject(r);
    return n;
}

/* --force over a run that still has registered workers or shard-servers. Each finds out at its next beat,
 * which names the making of the run it loaded and is refused RECREATED: a shard-server starts again and
 * serves the new run, a worker stops (exit 1; started again, it joins the new run). Said before it happens. */
static void warn_if_live(rconn *rc, const char *run)
{
    long long workers = run_hash_len(rc, run, "workers"), servers = run_hash_len(rc, run, "servers");
    if (workers == 0 && servers == 0) return;
    fprintf(stderr,
            "coordinator init: warning: run '%s' still has %lld registered worker(s) and %lld shard-server(s); "
            "--force replaces it under them: the shard-servers start again to serve the new run, the workers "
            "stop (exit 1) and join it once started again (`coordinator status --run %s` lists them)\n",
            run, workers, servers, run);
}

static void random_secret(char *out, size_t cap)
{
    unsigned char b[16] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(b, 1, sizeof b, f) != sizeof b) memset(b, 0, sizeof b);
        fclose(f);
    }
    for (size_t i = 0; i < sizeof b && 2 * i + 2 < cap; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* x in the fewest digits that read back as the same double ("0.02", not "0.020000000000000000416"):
 * every process computes the run's top-k counts from the value read back. */
static void format_exact(double x, char *buf, size_t cap)
{
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, cap, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) return;
    }
}

/* dl_init's field values, formatted as the strings it takes. */
typedef struct init_values {
    char *layout;                           /* layout_json (call_dl_init frees it) */
    char *dnt0s;                            /* dn_t0_shards, or NULL (call_dl_init frees it) */
    const char *shard_bounds, *frag_bounds; /* format_config's static buffers */
    char numel[32], shards[16], frags[16], seed[32], snap[16], secret[40];
    char dnb[24], dnt0[24], wref[24], sref[24], minrep[16], window[24], frac[32];
    char tkd[32], tkb[32], tkw[8], ahead[32];
    int rebase; /* --async-rule rebase */
    char target[16], minw[16], lr[32], mu[32], nest[4], hbt[32], dylu[4], dbase[24], stale[24];
    char nconfig[8], nstate[8]; /* how many fields of each follow */
} init_values;

/* The config fields (fixed for the run's life); random_secret draws its secret. */
static void format_config(const init_args *a, const initial_params *ip, const uint64_t *sb, const uint64_t *fb,
                          init_values *v)
{
    static char sbuf[RUNCONF_MAX_SHARDS * 12], fbuf[RUNCONF_MAX_FRAGMENTS * 8];
    runconf_format_bounds_u64(sb, (int)a->shards, sbuf, sizeof sbuf);
    runconf_format_bounds_u64(fb, (int)a->fragments, fbuf, sizeof fbuf);
    v->shard_bounds = sbuf;
    v->frag_bounds = fbuf;
    snprintf(v->numel, sizeof v->numel, "%" PRIu64, ip->numel);
    snprintf(v->shards, sizeof v->shards, "%lld", a->shards);
    snprintf(v->frags, sizeof v->frags, "%lld", a->fragments);
    snprintf(v->seed, sizeof v->seed, "%lld", a->seed);
    snprintf(v->snap, sizeof v->snap, "%lld", a->snapshot_every);
    random_secret(v->secret, sizeof v->secret);
    snprintf(v->dnb, sizeof v->dnb, "%lld", a->dn_buffer);
    snprintf(v->dnt0, sizeof v->dnt0, "%" PRIu64, ip->dn_t0);
    snprintf(v->wref, sizeof v->wref, "%lld", a->weight_ref > 0 ? a->weight_ref : 1);
    snprintf(v->minrep, sizeof v->minrep, "%lld", a->min_replicas);
    snprintf(v->sref, sizeof v->sref, "%lld", a->stale_ref);
    format_exact(a->topk_density, v->tkd, sizeof v->tkd);
    format_exact(a->async_lookahead, v->ahead, sizeof v->ahead);
    snprintf(v->tkw, sizeof v->tkw, "%lld", a->topk_bits);
    format_exact(a->topk_beta, v->tkb, sizeof v->tkb);
    v->rebase = a->async_rule != NULL && strcmp(a->async_rule, "rebase") == 0;
    snprintf(v->window, sizeof v->window, "%lld", v->rebase ? a->max_staleness : 0);
    snprintf(v->frac, sizeof v->frac, "%.9g", a->rebase_fraction);
}

/* The state fields: the settings an operator may change later (control.c). */
static void format_state(const init_args *a, init_values *v)
{
    snprintf(v->target, sizeof v->target, "%lld", a->workers);
    snprintf(v->minw, sizeof v->minw, "%lld", a->min_workers);
    snprintf(v->lr, sizeof v->lr, "%.9g", a->outer_lr);
    snprintf(v->mu, sizeof v->mu, "%.9g", a->outer_momentum);
    snprintf(v->nest, sizeof v->nest, "%d", a->nesterov);
    snprintf(v->hbt, sizeof v->hbt, "%lld", (long long)(a->heartbeat_timeout * 1000));
    snprintf(v->dylu, sizeof v->dylu, "%d", a->dylu);
    snprintf(v->dbase, sizeof v->dbase, "%lld", a->dylu_base > 0 ? a->dylu_base : 500);
    snprintf(v->stale, sizeof v->stale, "%lld", a->max_staleness);
}

/* The most fields of each group call_dl_init has room for (29 and 10 today). */
#define DL_INIT_CONFIG_MAX 40
#define DL_INIT_STATE_MAX 24

/* dl_init's config fields, name and value, into out; returns how many. */
static size_t config_fields(const init_args *a, const initial_params *ip, const init_values *v, const char **out)
{
    const char *f[][2] = {
        {"layout", v->layout},
        {"numel", v->numel},
        {"shards", v->shards},
        {"fragments", v->frags},
        {"mode", a->async ? "async" : "sync"},
        {"shard_bounds", v->shard_bounds},
        {"frag_bounds", v->frag_bounds},
        {"trainer", a->trainer},
        {"model", ip->model},
        {"seed", v->seed},
        {"snapshot_every", v->snap},
        {"secret", v->secret},
        {"dn_buffer", v->dnb},
        {"dn_variant", a->dn_variant ? a->dn_variant : "paper"},
        {"dn_t0", v->dnt0},
        {"weight_by", a->weight_by ? a->weight_by : "none"},
        {"weight_ref_tokens", v->wref},
        {"stale_weight", a->stale_weight ? a->stale_weight : "none"},
        {"stale_ref", v->sref},
        {"async_rule", v->rebase ? "rebase" : "plain"},
        {"rebase_window", v->window},
        {"rebase_fraction", v->frac},
        {"compress", a->compress ? a->compress : "bf16"},
        {"min_replicas", v->minrep},
        {"download", a->download ? a->download : "params"},
        {"topk_density", v->tkd},
        {"topk_beta", v->tkb},
        {"topk_bits", v->tkw},
        {"async_lookahead", v->ahead},
    };
    _Static_assert(sizeof f / sizeof *f + 1 <= DL_INIT_CONFIG_MAX, "init: raise DL_INIT_CONFIG_MAX");
    memcpy(out, f, sizeof f);
    size_t n = sizeof f / sizeof *f;
    if (v->dnt0s) { /* (only a run from a checkpoint whose shards stood at different points of the schedule) */
        out[2 * n] = "dn_t0_shards";
        out[2 * n + 1] = v->dnt0s;
        n++;
    }
    return n;
}

/* dl_init's state fields, name and value, into out; returns how many. */
static size_t state_fields(const init_values *v, const char **out)
{
    const char *f[][2] = {
        {"target_workers", v->target},      {"expected_workers", v->target},
        {"min_workers", v->minw},           {"outer_lr", v->lr},
        {"outer_momentum", v->mu},          {"nesterov", v->nest},
        {"heartbeat_timeout_ms", v->hbt},   {"dylu", v->dylu},
        {"dylu_base_sync_every", v->dbase}, {"max_staleness", v->stale},
    };
    _Static_assert(sizeof f / sizeof *f <= DL_INIT_STATE_MAX, "init: raise DL_INIT_STATE_MAX");
    memcpy(out, f, sizeof f);
    return sizeof f / sizeof *f;
}

/* A group of fields at argv[n]: its count (formatted into buf), then its k name/value pairs (already
 * at argv[n + 1]). Returns the index after the group. */
static size_t count_group(const char **argv, size_t n, char *buf, size_t cap, size_t k)
{
    snprintf(buf, cap, "%zu", k);
    argv[n] = buf;
    return n + 1 + 2 * k;
}

/* dl_init with the config and state fields and one digest per shard:
 * FCALL dl_init 1 KEY NCONFIG config... NSTATE state... S digest_0 ... digest_{S-1} */
static int call_dl_init(rconn *rc, const init_args *a, const initial_params *ip, const uint64_t *sb, const uint64_t *fb,
                        char digests[][17], char *err, size_t errlen)
{
    init_values v;
    if (!(v.layout = layout_json(ip->tensors, ip->ntensors))) {
        err_set(err, errlen, "out of memory for the layout");
        return -1;
    }
    v.dnt0s = ip->dn_t0_shards ? runconf_format_counts(ip->dn_t0_shards, ip->ck_nshards) : NULL;
    if (ip->dn_t0_shards && !v.dnt0s) {
        free(v.layout);
        err_set(err, errlen, "out of memory");
        return -1;
    }
    format_config(a, ip, sb, fb, &v);
    format_state(a, &v);
    const char **argv = calloc(7 + 2 * (DL_INIT_CONFIG_MAX + DL_INIT_STATE_MAX) + (size_t)a->shards, sizeof *argv);
    if (!argv) {
        free(v.layout);
        free(v.dnt0s);
        err_set(err, errlen, "out of memory");
        return -1;
    }
    char key[KEY_MAX];
    size_t n = 0;
    argv[n++] = "FCALL";
    argv[n++] = "dl_init";
    argv[n++] = "1";
    argv[n++] = key_run(key, sizeof key, a->c.run, "config");
    n = count_group(argv, n, v.nconfig, sizeof v.nconfig, config_fields(a, ip, &v, argv + n + 1));
    n = count_group(argv, n, v.nstate, sizeof v.nstate, state_fields(&v, argv + n + 1));
    argv[n++] = v.shards;
    for (long long k = 0; k < a->shards; k++) argv[n++] = digests[k];
    redisReply *r = rconn_command_argv(rc, (int)n, argv, NULL);
    free(argv);
    free(v.layout);
    free(v.dnt0s);
    int ok = rconn_reply_error(rc, r, err, errlen);
    if (r) freeReplyObject(r);
    return ok;
}

/* init's summary of a topk run: what a worker sends, its bytes per parameter per round up and down (from
 * the shards' payload sizes: codec_sparse.h), and the defaults the codec changed. */
static void print_topk_summary(const init_args *a, const uint64_t *sb, uint64_t numel)
{
    size_t up = 0;
    for (long long k = 0; k < a->shards; k++)
        up += sparse_shard_bytes(a->topk_density, (unsigned)a->topk_bits, (size_t)(sb[k + 1] - sb[k]));
    double upp = (double)up / (double)numel, w = (double)a->workers;
    int update = a->download && !strcmp(a->download, "update");
    /* an update: per shard u32 W, u32 P, W weights and the W payloads (sparse_update_bytes) */
    double down = update ? w * upp + (double)a->shards * (8 + 4 * w) / (double)numel : 4.0;
    uint32_t k = topk_count(a->topk_density, TOPK_CHUNK); /* what a chunk sends: rounded, at least 1 */
    printf("top-k (SparseLoCo): each worker sends %u of every %d entries (density %.3g) of its accumulator e = "
           "%g*e + pseudo-gradient at %lld bits and keeps the rest: %.4f bytes per parameter per round up, %.4f "
           "down (%s); outer momentum %g%s; outer lr %g%s\n",
           k, TOPK_CHUNK, (double)k / TOPK_CHUNK, a->topk_beta, a->topk_bits, upp, down,
           update ? "--download update: the sets of the workers in the round, here of the expected ones"
                  : "--download params: fp32 parameters",
           a->outer_momentum, a->outer_momentum == 0 ? " (the default for topk: the accumulator is the momentum)" : "",
           a->outer_lr,
           a->outer_lr == 2.0 ? " (the default for topk: an entry one worker sent is divided by the workers in "
                                "the mean; docs/compression.md)"
                              : "");
}

/* The shard bounds sb (at --shards, then also at --fsdp-ranks' chunks: a->shards may grow) and the
 * fragment bounds fb. 0, or -1 + err. */
static int cut_run(init_args *a, const initial_params *ip, uint64_t *sb, uint64_t *fb, char *err, size_t errlen)
{
    if (layout_cut_shards(ip->tensors, ip->ntensors, ip->numel, (int)a->shards, sb, err, errlen) < 0) return -1;
    if (a->nfsdp_ranks > 0) {
        int ns = (int)a->shards;
        if (layout_cut_fsdp(ip->tensors, ip->ntensors, a->fsdp_ranks, a->nfsdp_ranks, sb, &ns, err, errlen) < 0)
            return -1;
        a->shards = ns;
    }
    if (a->nfsdp_ranks > 0) /* each fragment whole tensors: every rank of a sharded group holds a part of it */
        return layout_cut_fragments_at_tensors(ip->tensors, ip->ntensors, sb, (int)a->shards, (int)a->fragments, fb,
                                               err, errlen);
    return layout_cut_fragments((int)a->shards, (int)a->fragments, fb, err, errlen) < 0 ? -1 : 0;
}

/* Version 0 of every shard as a snapshot blob (with the momentum and DN buffer it starts from), its
 * digest into digests. 0, or -1 + err. */
static int write_version0(rconn *rc, const init_args *a, const initial_params *ip, const uint64_t *sb,
                          char digests[][17], char *err, size_t errlen)
{
    for (int k = 0; k < a->shards; k++)
        if (coord_write_snapshot(rc, a->c.run, k, 0, 0, ip->params + sb[k], ip->mom ? ip->mom + sb[k] : NULL,
                                 ip->dnbuf ? ip->dnbuf + sb[k] : NULL, sb[k + 1] - sb[k], 0, digests[k], err,
                                 errlen) < 0)
            return -1;
    return 0;
}

/* What init made, on stdout: the run in one line, then top-k's figures and where version 0 came from
 * when they apply. */
static void print_created(const init_args *a, const initial_params *ip, const uint64_t *sb)
{
    char asy[200] = "", rule[64] = "", look[40] = "";
    if (a->async_rule != NULL && strcmp(a->async_rule, "rebase") == 0)
        snprintf(rule, sizeof rule, ", rebase x %.9g on the last %lld versions", a->rebase_fraction, a->max_staleness);
    if (a->async_lookahead > 0) snprintf(look, sizeof look, ", workers start %.9g ahead", a->async_lookahead);
    if (a->async)
        snprintf(asy, sizeof asy, "async (Delayed Nesterov %lld%s%s%s%s), ", a->dn_buffer,
                 a->stale_weight && strcmp(a->stale_weight, "none") ? ", staleness weight " : "",
                 a->stale_weight && strcmp(a->stale_weight, "none") ? a->stale_weight : "", rule, look);
    printf("run '%s' created: %s%s trainer (%s), %" PRIu64 " parameters in %lld shards, %lld fragment(s), "
           "waiting for %lld worker(s), outer lr %g momentum %g%s, pseudo-gradients %s, download %s\n",
           a->c.run, asy, a->trainer, ip->model, ip->numel, a->shards, a->fragments, a->workers, a->outer_lr,
           a->outer_momentum, a->nesterov ? " nesterov" : "", a->compress ? a->compress : "bf16",
           a->download ? a->download : "params");
    if (a->compress && !strcmp(a->compress, "topk")) print_topk_summary(a, sb, ip->numel);
    if (a->from_checkpoint)
        printf("version 0 = checkpoint %s (run '%s' at version %" PRId64 "%s%s), %s%s%s\n", a->from_checkpoint,
               ip->ck_run, ip->ck_version, ip->ck_versions ? "; its shards at " : "",
               ip->ck_versions ? ip->ck_versions : "",
               ip->mom ? "with its outer momentum" : "outer momentum starts afresh",
               ip->dnbuf ? ", with its Delayed Nesterov buffer" : "",
               ip->dn_t0_shards ? " (its every-N schedule carried on shard by shard)" : "");
    if (a->from_state)
        printf("version 0 = the %d tensors of %s (layout stored in the run's config)\n", ip->ntensors, a->from_state);
}

/* The run made from the flags. With replace (--force over a run that exists), the old run's keys are deleted
 * only once the new run's parameters are made and cut (where a wrong setting is found: fragments above the
 * shards, a model shape that does not divide, a checkpoint that does not fit), and before version 0 is
 * written under the same key names. Before (3 December), a --force whose settings were refused deleted the
 * old run first and created nothing. */
static int create_run(rconn *rc, const init_args *given, int replace, char *err, size_t errlen)
{
    initial_params ip;
    init_args cut = *given, *a = &cut; /* a->shards: --fsdp-ranks may add shards to the --shards cut */
    uint64_t *sb = calloc(RUNCONF_MAX_SHARDS + 1, sizeof *sb), fb[RUNCONF_MAX_FRAGMENTS + 1];
    char(*digests)[17] = calloc(RUNCONF_MAX_SHARDS, sizeof *digests);
    int rc_ = -1;
    if (!sb || !digests) {
        err_set(err, errlen, "out of memory");
        goto done;
    }
    if (make_initial(a, &ip, err, errlen) < 0 || cut_run(a, &ip, sb, fb, err, errlen) < 0 ||
        same_dn_shards(a, &ip, sb, err, errlen) < 0)
        goto done_ip;
    if (replace) warn_if_live(rc, a->c.run);
    if ((replace && delete_run(rc, a->c.run, err, errlen) < 0) ||
        write_version0(rc, a, &ip, sb, digests, err, errlen) < 0 ||
        call_dl_init(rc, a, &ip, sb, fb, digests, err, errlen) < 0)
        goto done_ip;
    print_created(a, &ip, sb);
    rc_ = 0;
done_ip:
    free_initial(&ip);
done:
    free(sb);
    free(digests);
    return rc_;
}

int cmd_init(int argc, char **argv)
{
    init_args a;
    int prc = parse_init(argc, argv, &a);
    if (prc == INIT_BAD_FILE) return 1;
    if (prc != 0) return opts_exit_status(prc);
    rconn *rc;
    int st = coord_connect(&a.c, &rc);
    if (st != 0) return st;
    char err[512];
    int exists = 0, status = 1;
    if (coord_load_library(rc, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator init: loading the function library: %s\n", err);
        goto done;
    }
    if (run_exists(rc, a.c.run, &exists, err, sizeof err) < 0) goto fail;
    if (exists && !a.force) {
        fprintf(stderr,
                "coordinator init: run '%s' already exists; choose another --run or add --force to "
                "replace it\n",
                a.c.run);
        goto done;
    }
    if (create_run(rc, &a, exists, err, sizeof err) < 0) goto fail;
    status = 0;
    goto done;
fail:
    fprintf(stderr, "coordinator init: %s\n", err);
done:
    rconn_free(rc);
    return status;
}
