/* checkpoint.c: safetensors export of a run's global state, reading it back, and the
 * `coordinator checkpoint` subcommand (see checkpoint.h and docs/checkpoints.md). */
#include "checkpoint.h"

#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coordinator.h"
#include "keys.h"
#include "log.h"
#include "model.h"
#include "outer.h"
#include "outer_dn.h"
#include "rconn.h"
#include "replay.h"
#include "run_state.h"
#include "runconf.h"
#include "util.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c writes fp32 as in memory: safetensors is little-endian"
#endif

#define HEADER_MAX (100u << 20) /* safetensors' own limit on the JSON header */

void checkpoint_free(checkpoint *ck) {
    free(ck->params);
    free(ck->mom);
    free(ck->dnbuf);
    free(ck->shard_bounds);
    memset(ck, 0, sizeof *ck);
}

/* ---- the trainer layout, as metadata ------------------------------------------------------------- */

/* [[name, [shape...], offset], ...] of the trainer's tensors, or NULL when the model string is not
 * one we can parse (the checkpoint is then still valid, only without the per-tensor map). */
static char *layout_json(const char *trainer, const char *model, uint64_t numel) {
    model_spec ms;
    model_tensor *t;
    int nt;
    size_t n;
    if (model_spec_parse(trainer, model, &ms, NULL, 0) < 0 || model_layout(&ms, &t, &nt, &n, NULL, 0) < 0) return NULL;
    json_t *arr = NULL;
    if (n == numel) {
        arr = json_array();
        for (int i = 0; i < nt; i++) {
            json_t *shape = json_array();
            for (int d = 0; d < t[i].ndim; d++) json_array_append_new(shape, json_integer((json_int_t)t[i].shape[d]));
            json_array_append_new(arr, json_pack("[s,o,I]", t[i].name, shape, (json_int_t)t[i].offset));
        }
    }
    free(t);
    char *s = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return s;
}

/* ---- export: gather the state from Redis --------------------------------------------------------- */

typedef struct export_data {
    runconf rc;
    float *params, *mom;
    float *dnbuf;        /* the Delayed Nesterov buffer of a run with rc.dn_buffer > 0, else NULL */
    int has_mom;
    int64_t version;
    char (*digests)[17];
    char lr[32], mu[32], nesterov[8];
} export_data;

static void export_free(export_data *d) {
    free(d->params);
    free(d->mom);
    free(d->dnbuf);
    free(d->digests);
    runconf_free(&d->rc);
}

static int read_state(rconn *c, const char *run, export_data *d, char *err, size_t errlen) {
    char key[KEY_MAX];
    redisReply *r = rconn_command(c, "HMGET %s outer_lr outer_momentum nesterov", key_run(key, sizeof key, run, "tunables"));
    if (rconn_reply_error(c, r, err, errlen) < 0) {
        if (r) freeReplyObject(r);
        return -1;
    }
    char *dst[3] = {d->lr, d->mu, d->nesterov};
    size_t cap[3] = {sizeof d->lr, sizeof d->mu, sizeof d->nesterov};
    for (size_t i = 0; i < 3; i++)
        snprintf(dst[i], cap[i], "%s", i < r->elements && r->element[i]->type == REDIS_REPLY_STRING ?
                 r->element[i]->str : "");
    freeReplyObject(r);
    return 0;
}

static int gather(rconn *c, const char *run, int timeout_ms, export_data *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    if (runconf_load(c, run, &d->rc, err, errlen) < 0) return -1;
    if (read_state(c, run, d, err, errlen) < 0) return -1;
    run_state st;
    if (run_state_alloc(&st, &d->rc, err, errlen) < 0) return -1;
    d->params = st.params; /* export_free frees them from here on */
    d->mom = st.mom;
    d->dnbuf = st.dnbuf;
    d->digests = st.digests;
    if (run_state_read(c, &d->rc, 0, timeout_ms, &st, err, errlen) < 0) return -1;
    d->has_mom = st.has_mom;
    d->version = st.version;
    return 0;
}

/* ---- export: write the file ---------------------------------------------------------------------- */

static void side_path(const char *path, char *out, size_t cap) {
    size_t n = strlen(path), sl = strlen(".safetensors");
    if (n > sl && !strcmp(path + n - sl, ".safetensors")) snprintf(out, cap, "%.*s.json", (int)(n - sl), path);
    else snprintf(out, cap, "%s.json", path);
}

static int fsync_dir_of(const char *path) {
    char *dup = strdup(path);
    if (!dup) return -1;
    char *slash = strrchr(dup, '/');
    const char *dir = slash ? (slash == dup ? "/" : (*slash = '\0', dup)) : ".";
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    int rc = fd < 0 ? -1 : fsync(fd);
    if (fd >= 0) close(fd);
    free(dup);
    return rc;
}

/* Write the chunks to path atomically: path.tmp.<pid> in the same folder, fsync, rename, fsync folder. */
typedef struct chunk { const void *p; size_t len; } chunk;
static int write_atomic(const char *path, const chunk *chunks, int nchunks, char *err, size_t errlen) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        err_set(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    for (int i = 0; i < nchunks; i++) {
        const char *p = chunks[i].p;
        size_t left = chunks[i].len;
        while (left > 0) {
            ssize_t w = write(fd, p, left > (1u << 30) ? (1u << 30) : left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                err_set(err, errlen, "writing %s: %s", tmp, w < 0 ? strerror(errno) : "short write");
                goto fail;
            }
            p += w;
            left -= (size_t)w;
        }
    }
    if (fsync(fd) < 0) {
        err_set(err, errlen, "fsync %s: %s", tmp, strerror(errno));
        goto fail;
    }
    if (close(fd) < 0) {
        fd = -1;
        err_set(err, errlen, "closing %s: %s", tmp, strerror(errno));
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) < 0) {
        err_set(err, errlen, "rename %s -> %s: %s", tmp, path, strerror(errno));
        goto fail;
    }
    fsync_dir_of(path);
    return 0;
fail:
    if (fd >= 0) close(fd);
    unlink(tmp);
    return -1;
}

static void meta_set(json_t *m, const char *k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void meta_set(json_t *m, const char *k, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_object_set_new(m, k, json_string(buf));
}

static json_t *build_metadata(const char *run, const export_data *d) {
    const runconf *rc = &d->rc;
    json_t *m = json_object();
    int S = rc->nshards, F = rc->nfragments;
    size_t cap = (size_t)S * 24 + 64;
    char *buf = malloc(cap), *dg = malloc((size_t)S * 17 + 1);
    meta_set(m, "format", "%s", CKPT_FORMAT);
    meta_set(m, "format_version", "%s", CKPT_FORMAT_VERSION);
    meta_set(m, "run", "%s", run);
    meta_set(m, "version", "%" PRId64, d->version);
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
    meta_set(m, "outer_lr", "%s", d->lr);
    meta_set(m, "outer_momentum", "%s", d->mu);
    meta_set(m, "nesterov", "%s", d->nesterov);
    meta_set(m, "has_momentum", "%s", d->has_mom ? "true" : "false");
    dg[0] = '\0';
    for (int k = 0; k < S; k++) {
        if (k) strcat(dg, ",");
        strcat(dg, d->digests[k]);
    }
    json_object_set_new(m, "shard_digests", json_string(dg));
    meta_set(m, "params_xxh3", "%016" PRIx64, digest_f32(d->params, rc->numel));
    meta_set(m, "momentum_xxh3", "%016" PRIx64, digest_f32(d->mom, rc->numel));
    if (d->dnbuf) {
        meta_set(m, "dn_buffer", "%d", rc->dn_buffer);
        meta_set(m, "dn_variant", "%s", rc->dn_variant == DN_FORGATHER ? "forgather" : "paper");
        meta_set(m, "dn_t", "%" PRIu64, rc->dn_t0 + (uint64_t)d->version);
        meta_set(m, "dn_buffer_xxh3", "%016" PRIx64, digest_f32(d->dnbuf, rc->numel));
    }
    meta_set(m, "created_ms", "%" PRIu64, wall_ms());
    char *layout = layout_json(rc->trainer, rc->model, rc->numel);
    if (layout) json_object_set_new(m, "layout", json_string(layout));
    free(layout);
    free(buf);
    free(dg);
    return m;
}

static json_t *tensor_entry(uint64_t numel, uint64_t begin) {
    return json_pack("{s:s, s:[I], s:[I,I]}", "dtype", "F32", "shape", (json_int_t)numel, "data_offsets",
                     (json_int_t)begin, (json_int_t)(begin + numel * sizeof(float)));
}

static int write_checkpoint(const char *path, const char *run, const export_data *d, char *err, size_t errlen) {
    uint64_t n = d->rc.numel;
    json_t *meta = build_metadata(run, d);
    json_t *root = json_object();
    json_object_set(root, "__metadata__", meta);
    json_object_set_new(root, "params", tensor_entry(n, 0));
    json_object_set_new(root, "momentum", tensor_entry(n, n * sizeof(float)));
    if (d->dnbuf) json_object_set_new(root, "dn_buffer", tensor_entry(n, 2 * n * sizeof(float)));
    char *hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    /* the side file: the same metadata and tensor table, readable */
    json_t *side = json_pack("{s:s, s:O, s:{s:O, s:O}}", "file", strrchr(path, '/') ? strrchr(path, '/') + 1 : path,
                             "metadata", meta, "tensors", "params", json_object_get(root, "params"), "momentum",
                             json_object_get(root, "momentum"));
    if (side && d->dnbuf)
        json_object_set(json_object_get(side, "tensors"), "dn_buffer", json_object_get(root, "dn_buffer"));
    char *side_text = side ? json_dumps(side, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(side);
    json_decref(root);
    json_decref(meta);
    if (!hdr || !side_text) {
        free(hdr);
        free(side_text);
        err_set(err, errlen, "cannot build the checkpoint header");
        return -1;
    }
    size_t hlen = strlen(hdr), padded = (hlen + 7) & ~(size_t)7; /* data starts 8-byte aligned */
    char *h = malloc(8 + padded);
    if (!h) {
        free(hdr);
        free(side_text);
        err_set(err, errlen, "out of memory");
        return -1;
    }
    uint64_t le = padded;
    memcpy(h, &le, 8);
    memcpy(h + 8, hdr, hlen);
    memset(h + 8 + hlen, ' ', padded - hlen);
    free(hdr);
    chunk chunks[4] = {{h, 8 + padded}, {d->params, n * sizeof(float)}, {d->mom, n * sizeof(float)},
                       {d->dnbuf, d->dnbuf ? n * sizeof(float) : 0}};
    int rc = write_atomic(path, chunks, d->dnbuf ? 4 : 3, err, errlen);
    free(h);
    if (rc == 0) {
        char sp[4200];
        side_path(path, sp, sizeof sp);
        size_t sl = strlen(side_text);
        side_text[sl] = '\n'; /* replaces the NUL: written with its length */
        chunk sc[1] = {{side_text, sl + 1}};
        rc = write_atomic(sp, sc, 1, err, errlen);
    }
    free(side_text);
    return rc;
}

int checkpoint_export_ex(rconn *c, const char *run, const char *path, int timeout_ms, int64_t *version,
                         char *err, size_t errlen) {
    export_data d;
    int rc = -1;
    if (gather(c, run, timeout_ms, &d, err, errlen) == 0 && write_checkpoint(path, run, &d, err, errlen) == 0) {
        if (version) *version = d.version;
        rc = 0;
    }
    export_free(&d);
    return rc;
}

int checkpoint_export(rconn *c, const char *run, const char *path, char *err, size_t errlen) {
    return checkpoint_export_ex(c, run, path, CKPT_DEFAULT_TIMEOUT_MS, NULL, err, errlen);
}

/* ---- a folder of checkpoints ------------------------------------------------------------------------ */

/* version of "checkpoint-<v>.safetensors", or -1 */
static long long dir_entry_version(const char *name) {
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

static int cmp_desc(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void prune_dir(const char *dir, int keep) {
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
    qsort(vs, nv, sizeof *vs, cmp_desc);
    for (size_t i = (size_t)keep; i < nv; i++) {
        char p[4200], sp[4200];
        snprintf(p, sizeof p, "%s/checkpoint-%lld.safetensors", dir, vs[i]);
        side_path(p, sp, sizeof sp);
        if (unlink(p) == 0) log_info("checkpoint: deleted %s (keeping the newest %d)", p, keep);
        unlink(sp);
    }
    free(vs);
}

int checkpoint_save_dir(rconn *c, const char *run, const char *dir, int keep, int timeout_ms,
                        char *path_out, size_t path_cap, int64_t *version, char *err, size_t errlen) {
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

/* ---- reading ---------------------------------------------------------------------------------------- */

static const char *meta_get(json_t *m, const char *k) {
    json_t *v = json_object_get(m, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* The tensor `name`: F32, shape [numel], offsets [b, b + 4 numel] inside data_len. */
static int check_tensor(json_t *root, const char *name, uint64_t numel, uint64_t data_len, uint64_t *begin,
                        char *err, size_t errlen) {
    json_t *t = json_object_get(root, name), *shape, *offs;
    if (!json_is_object(t)) {
        err_set(err, errlen, "no tensor \"%s\"", name);
        return -1;
    }
    const char *dt = json_string_value(json_object_get(t, "dtype"));
    shape = json_object_get(t, "shape");
    offs = json_object_get(t, "data_offsets");
    if (!dt || strcmp(dt, "F32") != 0) {
        err_set(err, errlen, "tensor \"%s\" has dtype %s, want F32", name, dt ? dt : "(none)");
        return -1;
    }
    if (!json_is_array(shape) || json_array_size(shape) != 1 || !json_is_integer(json_array_get(shape, 0)) ||
        (uint64_t)json_integer_value(json_array_get(shape, 0)) != numel) {
        err_set(err, errlen, "tensor \"%s\" does not have shape [%" PRIu64 "] (metadata numel)", name, numel);
        return -1;
    }
    if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(json_array_get(offs, 0)) ||
        !json_is_integer(json_array_get(offs, 1))) {
        err_set(err, errlen, "tensor \"%s\": malformed data_offsets", name);
        return -1;
    }
    json_int_t b = json_integer_value(json_array_get(offs, 0)), e = json_integer_value(json_array_get(offs, 1));
    if (b < 0 || e < b || (uint64_t)(e - b) != numel * sizeof(float) || (uint64_t)e > data_len) {
        err_set(err, errlen, "tensor \"%s\": data_offsets [%lld, %lld] do not fit %" PRIu64 " fp32 in %" PRIu64
                " data bytes", name, (long long)b, (long long)e, numel, data_len);
        return -1;
    }
    *begin = (uint64_t)b;
    return 0;
}

static int read_at(int fd, void *dst, size_t len, uint64_t off) {
    char *p = dst;
    while (len > 0) {
        ssize_t r = pread(fd, p, len > (1u << 30) ? (1u << 30) : len, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static int parse_u64(const char *s, uint64_t *out) {
    long long v;
    if (!s || parse_int(s, 0, INT64_MAX, &v) < 0) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int verify_digests(const checkpoint *ck, json_t *meta, char *err, size_t errlen) {
    const char *px = meta_get(meta, "params_xxh3"), *mx = meta_get(meta, "momentum_xxh3");
    const char *sd = meta_get(meta, "shard_digests");
    char got[17];
    snprintf(got, sizeof got, "%016" PRIx64, digest_f32(ck->params, ck->numel));
    if (px && strcmp(px, got)) {
        err_set(err, errlen, "params are corrupt: XXH3 %s, metadata says %s", got, px);
        return -1;
    }
    snprintf(got, sizeof got, "%016" PRIx64, digest_f32(ck->mom, ck->numel));
    if (mx && strcmp(mx, got)) {
        err_set(err, errlen, "momentum is corrupt: XXH3 %s, metadata says %s", got, mx);
        return -1;
    }
    const char *dx = meta_get(meta, "dn_buffer_xxh3");
    if (ck->dnbuf) snprintf(got, sizeof got, "%016" PRIx64, digest_f32(ck->dnbuf, ck->numel));
    if (ck->dnbuf && (!dx || strcmp(dx, got))) {
        err_set(err, errlen, "dn_buffer is corrupt: XXH3 %s, metadata says %s", got, dx ? dx : "(nothing)");
        return -1;
    }
    if (sd && strlen(sd) == (size_t)ck->nshards * 17 - 1) {
        for (int k = 0; k < ck->nshards; k++) {
            uint64_t b = ck->shard_bounds[k];
            snprintf(got, sizeof got, "%016" PRIx64, digest_f32(ck->params + b, ck->shard_bounds[k + 1] - b));
            if (strncmp(sd + 17 * k, got, 16)) {
                err_set(err, errlen, "shard %d of the params is corrupt: XXH3 %s, metadata says %.16s", k, got,
                        sd + 17 * k);
                return -1;
            }
        }
    }
    return 0;
}

int checkpoint_read(const char *path, int with_data, checkpoint *ck, char *err, size_t errlen) {
    memset(ck, 0, sizeof *ck);
    char e2[512];
    json_t *root = NULL;
    char *hdr = NULL;
    int ret = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err_set(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    uint64_t hlen = 0;
    if (fstat(fd, &st) < 0 || st.st_size < 8 || read_at(fd, &hlen, 8, 0) < 0) {
        err_set(err, errlen, "%s is not a safetensors file (shorter than 8 bytes)", path);
        goto done;
    }
    if (hlen < 2 || hlen > HEADER_MAX || 8 + hlen > (uint64_t)st.st_size) {
        err_set(err, errlen, "%s is not a safetensors file (header length %" PRIu64 " for %lld bytes)", path, hlen,
                (long long)st.st_size);
        goto done;
    }
    hdr = malloc(hlen);
    json_error_t je;
    if (!hdr || read_at(fd, hdr, hlen, 8) < 0 || !(root = json_loadb(hdr, hlen, 0, &je)) || !json_is_object(root)) {
        err_set(err, errlen, "%s is not a safetensors file (header is not a JSON object)", path);
        goto done;
    }
    json_t *meta = json_object_get(root, "__metadata__");
    const char *fmt = json_is_object(meta) ? meta_get(meta, "format") : NULL;
    if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0) {
        err_set(err, errlen, "%s is a safetensors file but not a ReDiLoCo checkpoint (no __metadata__.format \"%s\")",
                path, CKPT_FORMAT);
        goto done;
    }
    const char *fv = meta_get(meta, "format_version");
    if (!fv || strcmp(fv, CKPT_FORMAT_VERSION) != 0) {
        err_set(err, errlen, "%s: checkpoint format version %s, this build reads %s", path, fv ? fv : "(none)",
                CKPT_FORMAT_VERSION);
        goto done;
    }
    uint64_t seed = 0, shards = 0, frags = 0, snap = 0, version = 0;
    const char *tr = meta_get(meta, "trainer"), *model = meta_get(meta, "model"), *sb = meta_get(meta, "shard_bounds");
    const char *lr = meta_get(meta, "outer_lr"), *mu = meta_get(meta, "outer_momentum");
    const char *nest = meta_get(meta, "nesterov"), *hm = meta_get(meta, "has_momentum");
    if (parse_u64(meta_get(meta, "numel"), &ck->numel) < 0 || ck->numel == 0 ||
        parse_u64(meta_get(meta, "version"), &version) < 0 || parse_u64(meta_get(meta, "shards"), &shards) < 0 ||
        parse_u64(meta_get(meta, "fragments"), &frags) < 0 || parse_u64(meta_get(meta, "seed"), &seed) < 0 ||
        parse_u64(meta_get(meta, "snapshot_every"), &snap) < 0 || !tr || !model || !sb || !lr || !mu || !nest ||
        !hm || parse_double(lr, &ck->outer_lr) < 0 || parse_double(mu, &ck->outer_momentum) < 0) {
        err_set(err, errlen, "%s: incomplete or malformed checkpoint metadata", path);
        goto done;
    }
    int nb = 0;
    if (runconf_parse_bounds_u64(sb, &ck->shard_bounds, &nb, e2, sizeof e2) < 0 || (uint64_t)nb != shards ||
        ck->shard_bounds[0] != 0 || ck->shard_bounds[nb] != ck->numel) {
        err_set(err, errlen, "%s: shard_bounds do not cover the %" PRIu64 " parameters", path, ck->numel);
        goto done;
    }
    ck->version = (int64_t)version;
    ck->nshards = (int)shards;
    ck->nfragments = (int)frags;
    ck->snapshot_every = (int)snap;
    ck->seed = seed;
    ck->nesterov = !strcmp(nest, "1") || !strcmp(nest, "true");
    ck->has_mom = !strcmp(hm, "true");
    snprintf(ck->trainer, sizeof ck->trainer, "%s", tr);
    snprintf(ck->model, sizeof ck->model, "%s", model);
    snprintf(ck->run, sizeof ck->run, "%s", meta_get(meta, "run") ? meta_get(meta, "run") : "");
    snprintf(ck->mode, sizeof ck->mode, "%s", meta_get(meta, "mode") ? meta_get(meta, "mode") : "sync");
    /* Delayed Nesterov: a third tensor and where the every-N schedule stands */
    uint64_t dnb = 0;
    const char *dnv = meta_get(meta, "dn_variant");
    if (meta_get(meta, "dn_buffer") && (parse_u64(meta_get(meta, "dn_buffer"), &dnb) < 0 || dnb > 1000000 ||
                                        (dnb > 0 && (!dnv || (strcmp(dnv, "paper") && strcmp(dnv, "forgather")) ||
                                                     parse_u64(meta_get(meta, "dn_t"), &ck->dn_t) < 0)))) {
        err_set(err, errlen, "%s: malformed Delayed Nesterov metadata (dn_buffer, dn_variant, dn_t)", path);
        goto done;
    }
    ck->dn_buffer = (int)dnb;
    snprintf(ck->dn_variant, sizeof ck->dn_variant, "%s", dnb > 0 ? dnv : "");
    int ntensors = dnb > 0 ? 3 : 2;
    uint64_t data_len = (uint64_t)st.st_size - 8 - hlen, off[3] = {0, 0, 0};
    if (check_tensor(root, "params", ck->numel, data_len, &off[0], e2, sizeof e2) < 0 ||
        check_tensor(root, "momentum", ck->numel, data_len, &off[1], e2, sizeof e2) < 0 ||
        (dnb > 0 && check_tensor(root, "dn_buffer", ck->numel, data_len, &off[2], e2, sizeof e2) < 0)) {
        err_set(err, errlen, "%s: %s", path, e2);
        goto done;
    }
    /* every tensor fits (checked above), none overlaps another and they fill the data section */
    int overlap = 0;
    for (int i = 0; i < ntensors; i++)
        for (int j = i + 1; j < ntensors; j++)
            overlap |= off[i] < off[j] ? off[i] + ck->numel * 4 > off[j] : off[j] + ck->numel * 4 > off[i];
    if (data_len != (uint64_t)ntensors * ck->numel * sizeof(float) || json_object_size(root) != (size_t)ntensors + 1 ||
        overlap) {
        err_set(err, errlen, "%s: the data section (%" PRIu64 " bytes) is not exactly the %d tensors", path, data_len,
                ntensors);
        goto done;
    }
    uint64_t pb = off[0], mb = off[1];
    if (with_data) {
        ck->params = malloc(ck->numel * sizeof(float) + 1);
        ck->mom = malloc(ck->numel * sizeof(float) + 1);
        if (!ck->params || !ck->mom) {
            err_set(err, errlen, "out of memory for %" PRIu64 " parameters", ck->numel);
            goto done;
        }
        if (dnb > 0 && !(ck->dnbuf = malloc(ck->numel * sizeof(float) + 1))) {
            err_set(err, errlen, "out of memory for %" PRIu64 " parameters", ck->numel);
            goto done;
        }
        if (read_at(fd, ck->params, ck->numel * 4, 8 + hlen + pb) < 0 ||
            read_at(fd, ck->mom, ck->numel * 4, 8 + hlen + mb) < 0 ||
            (ck->dnbuf && read_at(fd, ck->dnbuf, ck->numel * 4, 8 + hlen + off[2]) < 0)) {
            err_set(err, errlen, "%s: read error: %s", path, strerror(errno));
            goto done;
        }
        size_t bad;
        if (outer_check_finite(ck->params, ck->numel, &bad) < 0 || outer_check_finite(ck->mom, ck->numel, &bad) < 0 ||
            (ck->dnbuf && outer_check_finite(ck->dnbuf, ck->numel, &bad) < 0)) {
            err_set(err, errlen, "%s: non-finite value (NaN/Inf) at element %zu", path, bad);
            goto done;
        }
        if (verify_digests(ck, meta, e2, sizeof e2) < 0) {
            err_set(err, errlen, "%s: %s", path, e2);
            goto done;
        }
        if (!ck->has_mom) memset(ck->mom, 0, ck->numel * sizeof(float));
    }
    ret = 0;
done:
    if (ret < 0) checkpoint_free(ck);
    json_decref(root);
    free(hdr);
    close(fd);
    return ret;
}

/* ---- `coordinator checkpoint` --------------------------------------------------------------------- */

static void ck_usage(FILE *f) {
    fprintf(f,
            "usage: bin/coordinator checkpoint save --redis URL --run NAME (--out FILE | --dir DIR [--keep K])\n"
            "                                       [--timeout S]\n"
            "       bin/coordinator checkpoint show FILE\n"
            "\n"
            "save: export the run's global parameters, outer momentum (and an async run's Delayed Nesterov\n"
            "      buffer) and run config, all shards at one committed version, as one safetensors file\n"
            "      (+ a .json side file), written atomically.\n"
            "  --out FILE     write FILE (e.g. run.safetensors)\n"
            "  --dir DIR      write DIR/checkpoint-<version>.safetensors ...\n"
            "  --keep K       ... and delete all but the newest K there (default 0: keep all)\n"
            "  --timeout S    wait up to S seconds for every shard to be at the same version (default 60)\n"
            REDIS_URL_HELP
            "show: validate FILE (format, sizes, checksums) and print its metadata.\n"
            "\n"
            "Resume with: bin/coordinator init --redis URL --run NEW --from-checkpoint FILE\n"
            "Format: docs/checkpoints.md\n");
}

static int ck_save(int argc, char **argv) {
    coord_common cc;
    memset(&cc, 0, sizeof cc);
    const char *out = NULL, *dir = NULL;
    long long keep = 0;
    double timeout = CKPT_DEFAULT_TIMEOUT_MS / 1000.0;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        int rc = coord_common_flag(&cc, argc, argv, &i);
        if (rc < 0) return 2;
        if (rc) continue;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            ck_usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "coordinator checkpoint save: unknown option or missing value: %s (see --help)\n", f);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(f, "--out")) out = v;
        else if (!strcmp(f, "--dir")) dir = v;
        else if (!strcmp(f, "--keep")) {
            if (parse_int(v, 0, 1000000, &keep) < 0) {
                fprintf(stderr, "coordinator checkpoint save: --keep wants an integer >= 0, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(f, "--timeout")) {
            if (parse_double(v, &timeout) < 0 || timeout < 0 || timeout > 86400) {
                fprintf(stderr, "coordinator checkpoint save: --timeout wants seconds, got '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "coordinator checkpoint save: unknown option %s (see --help)\n", f);
            return 2;
        }
    }
    if (!out == !dir) {
        fprintf(stderr, "coordinator checkpoint save: give exactly one of --out FILE or --dir DIR (see --help)\n");
        return 2;
    }
    rconn *rc = coord_connect(&cc);
    if (!rc) return 1;
    char err[1024], path[4200];
    int64_t version = -1;
    uint64_t t0 = now_ms();
    int ok = dir ? checkpoint_save_dir(rc, cc.run, dir, (int)keep, (int)(timeout * 1000), path, sizeof path, &version,
                                       err, sizeof err)
                 : checkpoint_export_ex(rc, cc.run, out, (int)(timeout * 1000), &version, err, sizeof err);
    rconn_free(rc);
    if (ok < 0) {
        fprintf(stderr, "coordinator checkpoint save: %s\n", err);
        return 1;
    }
    char sp[4200];
    side_path(dir ? path : out, sp, sizeof sp);
    printf("saved run '%s' at version %" PRId64 " to %s (+ %s) in %llu ms\n", cc.run, version, dir ? path : out, sp,
           (unsigned long long)(now_ms() - t0));
    return 0;
}

static int ck_show(int argc, char **argv) {
    if (argc != 1 || argv[0][0] == '-') {
        if (argc == 1 && (!strcmp(argv[0], "-h") || !strcmp(argv[0], "--help"))) {
            ck_usage(stdout);
            return 0;
        }
        ck_usage(stderr);
        return 2;
    }
    checkpoint ck;
    char err[1024];
    if (checkpoint_read(argv[0], 1, &ck, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator checkpoint show: %s\n", err);
        return 1;
    }
    printf("file            %s (valid)\n", argv[0]);
    printf("run             %s\nversion         %" PRId64 "\ntrainer         %s (%s)\nnumel           %" PRIu64 "\n",
           ck.run, ck.version, ck.trainer, ck.model, ck.numel);
    printf("shards          %d\nfragments       %d\nseed            %" PRIu64 "\n", ck.nshards, ck.nfragments, ck.seed);
    printf("outer           lr %g momentum %g%s\nhas_momentum    %s\n", ck.outer_lr, ck.outer_momentum,
           ck.nesterov ? " nesterov" : "", ck.has_mom ? "true" : "false");
    printf("params_xxh3     %016" PRIx64 "\nmomentum_xxh3   %016" PRIx64 "\n", digest_f32(ck.params, ck.numel),
           digest_f32(ck.mom, ck.numel));
    if (ck.dn_buffer > 0)
        printf("delayed nesterov N %d (%s), %" PRIu64 " submissions applied, %" PRIu64 " in the buffer\n"
               "dn_buffer_xxh3  %016" PRIx64 "\n", ck.dn_buffer, ck.dn_variant, ck.dn_t, ck.dn_t % (uint64_t)ck.dn_buffer,
               digest_f32(ck.dnbuf, ck.numel));
    for (int k = 0; k < ck.nshards; k++) {
        uint64_t b = ck.shard_bounds[k];
        printf("shard %d %016" PRIx64 "\n", k, digest_f32(ck.params + b, ck.shard_bounds[k + 1] - b));
    }
    checkpoint_free(&ck);
    return 0;
}

int cmd_checkpoint(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
        ck_usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    if (!strcmp(argv[0], "save")) return ck_save(argc - 1, argv + 1);
    if (!strcmp(argv[0], "show")) return ck_show(argc - 1, argv + 1);
    fprintf(stderr, "coordinator checkpoint: unknown action '%s' (save or show)\n\n", argv[0]);
    ck_usage(stderr);
    return 2;
}
