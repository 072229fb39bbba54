/* checkpoint.c: safetensors export of a run's global state (see checkpoint.h and docs/checkpoints.md):
 * gather each fragment's shards at one version from Redis, write the file and its JSON side file
 * atomically, and keep a folder of them. Reading is checkpoint_read.c, the command line checkpoint_cmd.c. */
#include "checkpoint.h"

#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file_atomic.h"
#include "base/log.h"
#include "base/util.h"
#include "coordinator.h"
#include "format/keys.h"
#include "format/replay.h"
#include "format/runconf.h"
#include "layout.h"
#include "math/outer.h"
#include "math/outer_dn.h"
#include "model.h"
#include "redis/rconn.h"
#include "redis/run_state.h"
#include "redis/runconf_load.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c writes fp32 as in memory: safetensors is little-endian"
#endif

/* ---- the trainer layout, as metadata ------------------------------------------------------------- */

/* [[name, [shape...], offset], ...] of the run's tensors: the layout its config records (every run made
 * since layouts are recorded, and the only source for a --from-state run), else the trainer's computed
 * from the model string; NULL when neither is known (the checkpoint is then still valid, only without
 * the per-tensor map). */
static char *checkpoint_layout(const runconf *rc)
{
    if (rc->layout) return strdup(rc->layout);
    model_spec ms;
    model_tensor *t;
    int nt;
    size_t n;
    if (model_spec_parse(rc->trainer, rc->model, &ms, NULL, 0) < 0 || model_layout(&ms, &t, &nt, &n, NULL, 0) < 0)
        return NULL;
    char *s = n == rc->numel ? layout_json(t, nt) : NULL;
    free(t);
    return s;
}

/* ---- export: gather the state from Redis --------------------------------------------------------- */

typedef struct export_data {
    runconf rc;
    float *params, *mom;
    float *dnbuf; /* the Delayed Nesterov buffer of a run with rc.dn_buffer > 0, else NULL */
    int has_mom;
    int64_t version;   /* the lowest shard version */
    int64_t *versions; /* per shard */
    char (*digests)[17];
    char lr[32], mu[32], nesterov[8];
    int shut_down; /* the run's status is shutdown: its shards may stay at any versions */
} export_data;

static void export_free(export_data *d)
{
    free(d->params);
    free(d->mom);
    free(d->dnbuf);
    free(d->digests);
    free(d->versions);
    runconf_free(&d->rc);
}

static int read_state(rconn *c, const char *run, export_data *d, char *err, size_t errlen)
{
    char key[KEY_MAX];
    redisReply *r =
        rconn_command(c, "HMGET %s outer_lr outer_momentum nesterov status", key_run(key, sizeof key, run, "tunables"));
    if (rconn_reply_error(c, r, err, errlen) < 0) {
        if (r) freeReplyObject(r);
        return -1;
    }
    char *dst[3] = {d->lr, d->mu, d->nesterov};
    size_t cap[3] = {sizeof d->lr, sizeof d->mu, sizeof d->nesterov};
    for (size_t i = 0; i < 3; i++)
        snprintf(dst[i], cap[i], "%s",
                 i < r->elements && r->element[i]->type == REDIS_REPLY_STRING ? r->element[i]->str : "");
    d->shut_down =
        r->elements > 3 && r->element[3]->type == REDIS_REPLY_STRING && !strcmp(r->element[3]->str, "shutdown");
    freeReplyObject(r);
    return 0;
}

/* The run's state from Redis: each fragment's shards at one version (they move together; a Streaming
 * run's fragments never line up while it trains, an async run's count their submissions each), or, once
 * the run is shut down, as they stay: an async run's at whatever versions (a submission delivered to some
 * owners only), a sync run's at each fragment's lowest (a round committed by some owners only is left out:
 * docs/checkpoints.md, "Shards at different versions"). */
static int gather(rconn *c, const char *run, int timeout_ms, export_data *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    if (runconf_load(c, run, &d->rc, err, errlen) < 0) return -1;
    if (read_state(c, run, d, err, errlen) < 0) return -1;
    run_state st;
    if (run_state_alloc(&st, &d->rc, err, errlen) < 0) return -1;
    d->params = st.params; /* export_free frees them from here on */
    d->mom = st.mom;
    d->dnbuf = st.dnbuf;
    d->digests = st.digests;
    d->versions = st.versions;
    int versions = !d->shut_down ? RUN_STATE_FRAGMENTS : d->rc.async ? RUN_STATE_ANY : RUN_STATE_FRAGMENTS_LOWEST;
    if (run_state_read(c, &d->rc, versions, timeout_ms, &st, err, errlen) < 0) return -1;
    d->has_mom = st.has_mom;
    d->version = st.version;
    return 0;
}

/* ---- export: write the file ---------------------------------------------------------------------- */

void checkpoint_side_path(const char *path, char *out, size_t cap)
{
    size_t n = strlen(path), sl = strlen(".safetensors");
    if (n > sl && !strcmp(path + n - sl, ".safetensors"))
        snprintf(out, cap, "%.*s.json", (int)(n - sl), path);
    else
        snprintf(out, cap, "%s.json", path);
}

static void meta_set(json_t *m, const char *k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void meta_set(json_t *m, const char *k, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_object_set_new(m, k, json_string(buf));
}

/* A per-shard value of the export (meta_list). */
typedef uint64_t (*shard_value_fn)(const export_data *d, int k);

static uint64_t shard_version(const export_data *d, int k)
{
    return (uint64_t)d->versions[k];
}

/* The DN submissions applied to shard k (the run's count before its version 0, plus its version). */
static uint64_t shard_dn_t(const export_data *d, int k)
{
    return runconf_dn_t0(&d->rc, k) + (uint64_t)d->versions[k];
}

/* Metadata name = "v0,v1,..." of value(d, k) for every shard, unless every shard has the same (then nothing:
 * a checkpoint of shards at one version reads as before). -1 when out of memory. */
static int meta_list(json_t *m, const char *name, const export_data *d, shard_value_fn value)
{
    int S = d->rc.nshards, same = 1;
    for (int k = 1; k < S; k++) same &= value(d, k) == value(d, 0);
    if (same) return 0;
    uint64_t *v = malloc((size_t)S * sizeof *v);
    for (int k = 0; v && k < S; k++) v[k] = value(d, k);
    char *list = v ? runconf_format_counts(v, S) : NULL;
    free(v);
    if (list == NULL) return -1;
    json_object_set_new(m, name, json_string(list));
    free(list);
    return 0;
}

/* The lowest of value(d, k) over the shards. */
static uint64_t lowest(const export_data *d, shard_value_fn value)
{
    uint64_t lo = value(d, 0);
    for (int k = 1; k < d->rc.nshards; k++)
        if (value(d, k) < lo) lo = value(d, k);
    return lo;
}

/* The run's identity and shape: format, run, version, model, shards and fragments with their bounds,
 * seed, snapshots. -1 when out of memory. */
static int meta_run(json_t *m, const char *run, const export_data *d)
{
    const runconf *rc = &d->rc;
    int S = rc->nshards, F = rc->nfragments;
    size_t cap = (size_t)S * 24 + 64;
    char *buf = malloc(cap);
    if (buf == NULL) return -1;
    meta_set(m, "format", "%s", CKPT_FORMAT);
    meta_set(m, "format_version", "%s", CKPT_FORMAT_VERSION);
    meta_set(m, "run", "%s", run);
    meta_set(m, "version", "%" PRId64, d->version);
    if (meta_list(m, "shard_versions", d, shard_version) < 0) {
        free(buf);
        return -1;
    }
    meta_set(m, "numel", "%" PRIu64, rc->numel);
    meta_set(m, "trainer", "%s", rc->trainer);
    meta_set(m, "model", "%s", rc->model);
    meta_set(m, "mode", "%s", rc->async ? "async" : "sync");
    meta_set(m, "shards", "%d", S);
    runconf_format_bounds_u64(rc->shard_bounds, S, buf, cap);
    json_object_set_new(m, "shard_bounds", json_string(buf));
    meta_set(m, "fragments", "%d", F);
    size_t used = 0;
    for (int f = 0; f <= F && used < cap; f++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%d", f ? "," : "", rc->frag_bounds[f]);
    json_object_set_new(m, "frag_bounds", json_string(buf));
    meta_set(m, "seed", "%" PRIu64, rc->seed);
    meta_set(m, "snapshot_every", "%d", rc->snapshot_every);
    free(buf);
    return 0;
}

/* What a reader checks the file against: each shard's digest, each tensor's xxh3, and the Delayed
 * Nesterov buffer's settings and schedule when there is one. -1 when out of memory. */
static int meta_digests(json_t *m, const export_data *d)
{
    const runconf *rc = &d->rc;
    char *dg = malloc((size_t)rc->nshards * 17 + 1);
    if (dg == NULL) return -1;
    dg[0] = '\0';
    for (int k = 0; k < rc->nshards; k++) {
        if (k) strcat(dg, ",");
        strcat(dg, d->digests[k]);
    }
    json_object_set_new(m, "shard_digests", json_string(dg));
    free(dg);
    meta_set(m, "params_xxh3", "%016" PRIx64, digest_f32(d->params, rc->numel));
    meta_set(m, "momentum_xxh3", "%016" PRIx64, digest_f32(d->mom, rc->numel));
    if (d->dnbuf) {
        meta_set(m, "dn_buffer", "%d", rc->dn_buffer);
        meta_set(m, "dn_variant", "%s", rc->dn_variant == DN_FORGATHER ? "forgather" : "paper");
        meta_set(m, "dn_t", "%" PRIu64, lowest(d, shard_dn_t));
        if (meta_list(m, "dn_t_shards", d, shard_dn_t) < 0) return -1;
        meta_set(m, "dn_buffer_xxh3", "%016" PRIx64, digest_f32(d->dnbuf, rc->numel));
    }
    return 0;
}

/* The header's __metadata__; NULL when out of memory (write_checkpoint then cannot build the header). */
static json_t *build_metadata(const char *run, const export_data *d)
{
    json_t *m = json_object();
    if (m == NULL || meta_run(m, run, d) < 0) {
        json_decref(m);
        return NULL;
    }
    meta_set(m, "outer_lr", "%s", d->lr);
    meta_set(m, "outer_momentum", "%s", d->mu);
    meta_set(m, "nesterov", "%s", d->nesterov);
    meta_set(m, "has_momentum", "%s", d->has_mom ? "true" : "false");
    if (meta_digests(m, d) < 0) {
        json_decref(m);
        return NULL;
    }
    meta_set(m, "created_ms", "%" PRIu64, wall_ms());
    char *layout = checkpoint_layout(&d->rc);
    if (layout) json_object_set_new(m, "layout", json_string(layout));
    free(layout);
    return m;
}

static json_t *tensor_entry(uint64_t numel, uint64_t begin)
{
    return json_pack("{s:s, s:[I], s:[I,I]}", "dtype", "F32", "shape", (json_int_t)numel, "data_offsets",
                     (json_int_t)begin, (json_int_t)(begin + numel * sizeof(float)));
}

/* The safetensors header: its length (8 bytes, little-endian), then the JSON padded with spaces so that
 * the data starts 8-byte aligned; *size = all of it. NULL when out of memory. */
static char *pad_header(const char *hdr, size_t *size)
{
    size_t hlen = strlen(hdr), padded = (hlen + 7) & ~(size_t)7;
    char *h = malloc(8 + padded);
    if (!h) return NULL;
    uint64_t le = padded;
    memcpy(h, &le, 8);
    memcpy(h + 8, hdr, hlen);
    memset(h + 8 + hlen, ' ', padded - hlen);
    *size = 8 + padded;
    return h;
}

/* The side file's text: the same metadata and tensor table (root's), readable. NULL on failure. */
static char *side_text(const char *path, json_t *meta, json_t *root)
{
    json_t *side = json_pack("{s:s, s:O, s:{s:O, s:O}}", "file", strrchr(path, '/') ? strrchr(path, '/') + 1 : path,
                             "metadata", meta, "tensors", "params", json_object_get(root, "params"), "momentum",
                             json_object_get(root, "momentum"));
    if (side && json_object_get(root, "dn_buffer"))
        json_object_set(json_object_get(side, "tensors"), "dn_buffer", json_object_get(root, "dn_buffer"));
    char *text = side ? json_dumps(side, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(side);
    return text;
}

/* The side file beside path: text and a newline, written atomically. */
static int write_side_file(const char *path, char *text, char *err, size_t errlen)
{
    char sp[4200];
    checkpoint_side_path(path, sp, sizeof sp);
    size_t sl = strlen(text);
    text[sl] = '\n'; /* replaces the NUL: written with its length */
    file_chunk sc[1] = {{text, sl + 1}};
    return file_write_atomic(sp, sc, 1, err, errlen);
}

/* After a failed write: on a full disk, what it needs and what to do. A folder pruned with --keep still holds
 * the older checkpoints then: they are deleted only once a new one is written, so that a failed save leaves
 * them all (a disk that holds one checkpoint and no more never takes the next). */
static void say_if_full(const export_data *d, char *err, size_t errlen)
{
    if (!strstr(err, "No space left on device")) return;
    size_t n = strlen(err);
    double kb = (double)d->rc.numel * sizeof(float) * (d->dnbuf ? 3 : 2) / 1e3;
    snprintf(err + n, errlen > n ? errlen - n : 0,
             " (the disk is full: a checkpoint of this run needs %.*f %s there besides the ones kept; --keep deletes "
             "older ones only after a save succeeds: free space or save elsewhere)",
             kb < 1e3 ? 0 : 1, kb < 1e3 ? kb : kb / 1e3, kb < 1e3 ? "KB" : "MB");
}

static int write_checkpoint(const char *path, const char *run, const export_data *d, char *err, size_t errlen)
{
    uint64_t n = d->rc.numel;
    json_t *meta = build_metadata(run, d);
    json_t *root = json_object();
    json_object_set(root, "__metadata__", meta);
    json_object_set_new(root, "params", tensor_entry(n, 0));
    json_object_set_new(root, "momentum", tensor_entry(n, n * sizeof(float)));
    if (d->dnbuf) json_object_set_new(root, "dn_buffer", tensor_entry(n, 2 * n * sizeof(float)));
    char *hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER), *side = side_text(path, meta, root);
    json_decref(root);
    json_decref(meta);
    size_t hsize = 0;
    int built = hdr && side;
    char *h = built ? pad_header(hdr, &hsize) : NULL;
    free(hdr);
    if (!h) {
        free(side);
        err_set(err, errlen, built ? "out of memory" : "cannot build the checkpoint header");
        return -1;
    }
    file_chunk chunks[4] = {{h, hsize},
                            {d->params, n * sizeof(float)},
                            {d->mom, n * sizeof(float)},
                            {d->dnbuf, d->dnbuf ? n * sizeof(float) : 0}};
    int rc = file_write_atomic(path, chunks, d->dnbuf ? 4 : 3, err, errlen);
    free(h);
    if (rc == 0) rc = write_side_file(path, side, err, errlen);
    free(side);
    if (rc != 0) say_if_full(d, err, errlen);
    return rc;
}

int checkpoint_export_ex(rconn *c, const char *run, const char *path, int timeout_ms, int64_t *version, char *err,
                         size_t errlen)
{
    export_data d;
    int rc = -1;
    if (gather(c, run, timeout_ms, &d, err, errlen) == 0 && write_checkpoint(path, run, &d, err, errlen) == 0) {
        if (version) *version = d.version;
        rc = 0;
    }
    export_free(&d);
    return rc;
}

int checkpoint_export(rconn *c, const char *run, const char *path, char *err, size_t errlen)
{
    return checkpoint_export_ex(c, run, path, CKPT_DEFAULT_TIMEOUT_MS, NULL, err, errlen);
}

/* ---- a folder of checkpoints ------------------------------------------------------------------------ */

/* version of "checkpoint-<v>.safetensors", or -1 */
static long long dir_entry_version(const char *name)
{
    const char *p = "checkpoint-", *s = ".safetensors";
    size_t n = strlen(name), pl = strlen(p), sl = strlen(s);
    if (n <= pl + sl || strncmp(name, p, pl) || strcmp(name + n - sl, s)) return -1;
    char num[32];
    if (n - pl - sl >= sizeof num) return -1;
    memcpy(num, name + pl, n - pl - sl);
    num[n - pl - sl] = '\0';
    long long v;
    return parse_int(num, 0, INT64_MAX, &v) < 0 ? -1 : v;
}

static int cmp_desc(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void prune_dir(const char *dir, int keep)
{
    DIR *dh = opendir(dir);
    if (!dh) return;
    long long *vs = NULL;
    size_t nv = 0, cap = 0;
    for (struct dirent *e; (e = readdir(dh));) {
        long long v = dir_entry_version(e->d_name);
        if (v < 0) continue;
        if (nv == cap) {
            cap = cap ? 2 * cap : 16;
            long long *nvs = realloc(vs, cap * sizeof *vs);
            if (!nvs) break;
            vs = nvs;
        }
        vs[nv++] = v;
    }
    closedir(dh);
    if (vs == NULL || nv <= (size_t)keep) { /* nothing read (qsort wants an array), or nothing to delete */
        free(vs);
        return;
    }
    qsort(vs, nv, sizeof *vs, cmp_desc);
    for (size_t i = (size_t)keep; i < nv; i++) {
        char p[4200], sp[4200];
        snprintf(p, sizeof p, "%s/checkpoint-%lld.safetensors", dir, vs[i]);
        checkpoint_side_path(p, sp, sizeof sp);
        if (unlink(p) == 0) log_info("checkpoint: deleted %s (keeping the newest %d)", p, keep);
        unlink(sp);
    }
    free(vs);
}

int checkpoint_save_dir(rconn *c, const char *run, const char *dir, int keep, int timeout_ms, char *path_out,
                        size_t path_cap, int64_t *version, char *err, size_t errlen)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        err_set(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    export_data d;
    int rc = -1;
    if (gather(c, run, timeout_ms, &d, err, errlen) == 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/checkpoint-%" PRId64 ".safetensors", dir, d.version);
        if (write_checkpoint(path, run, &d, err, errlen) == 0) {
            if (path_out) snprintf(path_out, path_cap, "%s", path);
            if (version) *version = d.version;
            if (keep > 0) prune_dir(dir, keep);
            rc = 0;
        }
    }
    export_free(&d);
    return rc;
}
