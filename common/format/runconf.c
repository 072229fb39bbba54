/* runconf.c: a run's configuration from the fields of dl:{R}:config, checked to be one this build
 * understands. It knows no Redis: redis/runconf_load.c reads the hash and hands its fields here. */
#include "format/runconf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "base/version.h"
#include "format/blob.h"
#include "format/keys.h"
#include "math/codec.h"
#include "math/codec_sparse.h"
#include "math/outer_dn.h"


/* One number of a comma list at p, into *v, and the character after it at *end: digits only (strtoull would
 * also take blanks, '+' and a '-' that wraps around). -1 when p holds no number or it overflows. */
static int list_item(const char *p, uint64_t *v, const char **end)
{
    char *e = (char *)p;
    *v = 0;
    errno = 0;
    if (*p >= '0' && *p <= '9') *v = strtoull(p, &e, 10);
    *end = e;
    return e == p || errno == ERANGE ? -1 : 0;
}

int runconf_parse_bounds_u64(const char *s, uint64_t **out, int *n, char *err, size_t errlen)
{
    int count = 1;
    for (const char *p = s; *p; p++) count += (*p == ',');
    uint64_t *b = calloc((size_t)count, sizeof *b);
    if (!b) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    const char *p = s;
    for (int i = 0; i < count; i++) {
        const char *end;
        uint64_t v;
        if (list_item(p, &v, &end) < 0 || (*end != ',' && *end != '\0') || (i > 0 && v < b[i - 1])) {
            err_set(err, errlen, "malformed bounds list '%s'", s);
            free(b);
            return -1;
        }
        b[i] = v;
        p = end + (*end == ',');
    }
    *out = b;
    *n = count - 1;
    return 0;
}

int runconf_format_bounds_u64(const uint64_t *b, int n, char *buf, size_t cap)
{
    size_t used = 0;
    for (int i = 0; i <= n; i++) {
        int w = snprintf(buf + used, cap - used, "%s%" PRIu64, i ? "," : "", b[i]);
        if (w < 0 || (size_t)w >= cap - used) return -1;
        used += (size_t)w;
    }
    return 0;
}

/* the value of field `name`, or NULL when the config does not have it */
static const char *field(const runconf_fields *r, const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->name[i], name) == 0) return r->value[i];
    return NULL;
}

/* The whole of s as a number (strtod with nothing left over): 1, or 0 when it is not one. Ranges are
 * the caller's; NaN and the infinities pass here and fail there. */
static int whole_double(const char *s, double *x)
{
    char *end = NULL;
    *x = strtod(s, &end);
    return end != s && *end == '\0';
}

/* --compress topk's density, value bits and the accumulator's decay (defaults for a run that does not
 * say: a run made before --topk-bits has 2-bit values). */
static int topk_fields(const runconf_fields *r, runconf *rc, char *err, size_t errlen)
{
    const char *d = field(r, "topk_density"), *b = field(r, "topk_beta"), *w = field(r, "topk_bits");
    rc->topk_density = SPARSE_DENSITY_DEFAULT;
    if (d && (!whole_double(d, &rc->topk_density) || !(rc->topk_density > 0 && rc->topk_density <= 1))) {
        err_set(err, errlen, "the run's topk_density '%s' is not in (0, 1]", d);
        return -1;
    }
    double beta = SPARSE_BETA_DEFAULT;
    if (b && (!whole_double(b, &beta) || !(beta >= 0 && beta <= 1))) {
        err_set(err, errlen, "the run's topk_beta '%s' is not in [0, 1]", b);
        return -1;
    }
    rc->topk_beta = (float)beta;
    long long bits = TOPK_BITS_DEFAULT;
    if (w && parse_int(w, TOPK_BITS_MIN, TOPK_BITS_MAX, &bits) < 0) {
        err_set(err, errlen, "the run's topk_bits '%s' is not an integer from %d to %d", w, TOPK_BITS_MIN, TOPK_BITS_MAX);
        return -1;
    }
    rc->topk_bits = (unsigned)bits;
    if (rc->compress == BLOB_TOPK && rc->async) {
        err_set(err, errlen,
                "the run is async with --compress topk, which this build refuses (coordinator init says why)");
        return -1;
    }
    return 0;
}

/* numel and the shard bounds, which must cover [0, numel) in order (a config without numel, shard_bounds
 * and frag_bounds is not a run's at all). */
static int shard_fields(const runconf_fields *r, runconf *rc, char *err, size_t errlen)
{
    const char *numel = field(r, "numel"), *sb = field(r, "shard_bounds"), *fb = field(r, "frag_bounds");
    if (!numel || !sb || !fb) {
        err_set(err, errlen, "run config lacks numel/shard_bounds/frag_bounds: not a run made by `coordinator init`");
        return -1;
    }
    long long v;
    if (parse_int(numel, 1, INT64_MAX, &v) < 0) {
        err_set(err, errlen, "bad numel '%s' in run config", numel);
        return -1;
    }
    rc->numel = (uint64_t)v;
    if (runconf_parse_bounds_u64(sb, &rc->shard_bounds, &rc->nshards, err, errlen) < 0) return -1;
    if (rc->nshards < 1 || rc->nshards > RUNCONF_MAX_SHARDS || rc->shard_bounds[0] != 0 ||
        rc->shard_bounds[rc->nshards] != rc->numel) {
        err_set(err, errlen, "shard bounds '%s' do not cover [0, %" PRIu64 ")", sb, rc->numel);
        return -1;
    }
    return 0;
}

/* The fragment bounds (shard indices), which must cover the shards in order (shard_fields checked that
 * the field is there). */
static int fragment_fields(const runconf_fields *r, runconf *rc, char *err, size_t errlen)
{
    const char *fb = field(r, "frag_bounds");
    uint64_t *f64;
    if (runconf_parse_bounds_u64(fb, &f64, &rc->nfragments, err, errlen) < 0) return -1;
    int bad = rc->nfragments < 1 || rc->nfragments > RUNCONF_MAX_FRAGMENTS || f64[0] != 0 ||
              f64[rc->nfragments] != (uint64_t)rc->nshards;
    rc->frag_bounds = calloc((size_t)rc->nfragments + 1, sizeof(int));
    for (int i = 0; !bad && rc->frag_bounds && i <= rc->nfragments; i++) rc->frag_bounds[i] = (int)f64[i];
    free(f64);
    if (bad || !rc->frag_bounds) {
        err_set(err, errlen, "fragment bounds '%s' do not cover the %d shards", fb, rc->nshards);
        return -1;
    }
    return 0;
}

int runconf_parse_counts(const char *s, int n, uint64_t **out)
{
    uint64_t *v = calloc((size_t)n, sizeof *v);
    const char *p = s;
    for (int i = 0; v && i < n; i++) {
        const char *end;
        if (list_item(p, &v[i], &end) < 0 || v[i] > INT64_MAX || *end != (i + 1 < n ? ',' : '\0')) {
            free(v);
            return -1;
        }
        p = end + 1;
    }
    *out = v;
    return v ? 0 : -1;
}

char *runconf_format_counts(const uint64_t *v, int n)
{
    size_t cap = (size_t)n * 21 + 1, used = 0;
    char *s = malloc(cap);
    if (s == NULL) return NULL;
    s[0] = '\0';
    for (int i = 0; i < n; i++) used += (size_t)snprintf(s + used, cap - used, "%s%" PRIu64, i ? "," : "", v[i]);
    return s;
}

/* The mode and how the outer step weighs what it averages: Delayed Nesterov, tokens, staleness. */
static int outer_fields(const runconf_fields *r, runconf *rc, char *err, size_t errlen)
{
    long long v;
    const char *mode = field(r, "mode");
    rc->async = mode && strcmp(mode, "async") == 0;
    const char *dnb = field(r, "dn_buffer"), *dnv = field(r, "dn_variant");
    if (dnb && parse_int(dnb, 0, 1000000, &v) == 0) rc->dn_buffer = (int)v;
    rc->dn_variant = dnv && strcmp(dnv, "forgather") == 0 ? DN_FORGATHER : DN_PAPER;
    const char *dt0 = field(r, "dn_t0");
    if (dt0 && parse_int(dt0, 0, INT64_MAX, &v) == 0) rc->dn_t0 = (uint64_t)v;
    const char *dts = field(r, "dn_t0_shards");
    if (dts && runconf_parse_counts(dts, rc->nshards, &rc->dn_t0_shard) < 0) {
        err_set(err, errlen, "the run's dn_t0_shards '%.80s' is not one count per shard (%d shards)", dts,
                rc->nshards);
        return -1;
    }
    const char *wb = field(r, "weight_by"), *wr = field(r, "weight_ref_tokens");
    rc->weight_tokens = wb && strcmp(wb, "tokens") == 0;
    if (wr && parse_int(wr, 1, INT64_MAX, &v) == 0) rc->weight_ref_tokens = (uint64_t)v;
    const char *sw = field(r, "stale_weight"), *sr = field(r, "stale_ref");
    rc->stale_weight = sw ? outer_stale_rule_parse(sw) : STALE_W_NONE; /* runs made before it existed: none */
    if (rc->stale_weight < 0) {
        err_set(err, errlen, "the run's staleness weight '%s' is unknown to this build: upgrade this program", sw);
        return -1;
    }
    if (sr && parse_int(sr, 0, INT64_MAX, &v) == 0) rc->stale_ref = v;
    return 0;
}

/* An async run's rule for a stale submission (plain or rebase, its window and fraction) and its
 * lookahead; each only where it makes sense. */
static int async_rule_fields(const runconf_fields *r, runconf *rc, char *err, size_t errlen)
{
    long long v;
    const char *ar = field(r, "async_rule"), *rw = field(r, "rebase_window");
    rc->async_rule = ar ? outer_async_rule_parse(ar) : ASYNC_RULE_PLAIN; /* runs made before it existed */
    if (rc->async_rule < 0) {
        err_set(err, errlen, "the run's async rule '%s' is unknown to this build: upgrade this program", ar);
        return -1;
    }
    if (rw && parse_int(rw, 0, 1000000000, &v) == 0) rc->rebase_window = v;
    const char *rf = field(r, "rebase_fraction");
    double frac = 1.0;
    if (rf && (!whole_double(rf, &frac) || !(frac > 0 && frac <= 1))) {
        err_set(err, errlen, "the run's rebase_fraction '%s' is not in (0, 1]", rf);
        return -1;
    }
    rc->rebase_fraction = (float)frac;
    const char *la = field(r, "async_lookahead");
    double ahead = 0.0; /* runs made before it existed: off */
    if (la && (!whole_double(la, &ahead) || !(ahead >= 0 && ahead <= ASYNC_LOOKAHEAD_MAX))) {
        err_set(err, errlen, "the run's async_lookahead '%s' is not in [0, %g]", la, (double)ASYNC_LOOKAHEAD_MAX);
        return -1;
    }
    if (ahead > 0 && !rc->async) {
        err_set(err, errlen, "the run's async_lookahead %s needs an async run", la);
        return -1;
    }
    rc->async_lookahead = (float)ahead;
    if (rc->async_rule == ASYNC_RULE_REBASE && (!rc->async || rc->rebase_window < 1)) {
        err_set(err, errlen, "the run's rebase rule needs an async run and a rebase_window of 1 or more (got %s)",
                rw ? rw : "none");
        return -1;
    }
    return 0;
}

/* What travels: the pseudo-gradients' codec (with topk's settings) and what a get answers with. */
static int codec_fields(const runconf_fields *r, runconf *rc, char *err, size_t errlen)
{
    const char *cz = field(r, "compress");
    rc->compress = cz ? codec_parse(cz) : BLOB_BF16; /* runs made before the setting existed: bf16 */
    if (rc->compress == 0) {
        err_set(err, errlen,
                "the run's pseudo-gradients use codec '%s', which this build does not know: "
                "upgrade this program",
                cz);
        return -1;
    }
    if (topk_fields(r, rc, err, errlen) < 0) return -1;
    const char *dl = field(r, "download");
    rc->download_update = dl && strcmp(dl, "update") == 0;
    if ((dl && !rc->download_update && strcmp(dl, "params") != 0) ||
        (rc->download_update && (rc->async || rc->nfragments > 1))) {
        err_set(err, errlen,
                "the run's download mode '%s' is unknown or not for %s runs: upgrade this program, "
                "or make the run again (coordinator init --download params)",
                dl, rc->async ? "async" : "Streaming DiLoCo");
        return -1;
    }
    return 0;
}

/* The rest: durability, the seed, the data-plane secret and what the trainer needs to know (its name,
 * model and the tensors' layout). */
static int run_fields(const runconf_fields *r, runconf *rc, char *err, size_t errlen)
{
    long long v;
    const char *mr = field(r, "min_replicas"), *se = field(r, "snapshot_every"), *seed = field(r, "seed");
    if (mr && parse_int(mr, 0, RUNCONF_MAX_REPLICAS, &v) == 0) rc->min_replicas = (int)v;
    rc->snapshot_every = 8;
    if (se && parse_int(se, 1, 1000000, &v) == 0) rc->snapshot_every = (int)v;
    if (seed && parse_int(seed, 0, INT64_MAX, &v) == 0) rc->seed = (uint64_t)v;
    const char *made = field(r, "created_ms");
    if (made && parse_int(made, 0, INT64_MAX, &v) == 0) rc->created_ms = (uint64_t)v;
    const char *secret = field(r, "secret");
    snprintf(rc->secret, sizeof rc->secret, "%s", secret ? secret : "");
    const char *tr = field(r, "trainer"), *model = field(r, "model");
    snprintf(rc->trainer, sizeof rc->trainer, "%s", tr ? tr : "");
    snprintf(rc->model, sizeof rc->model, "%s", model ? model : "");
    const char *layout = field(r, "layout");
    if (layout && !(rc->layout = strdup(layout))) {
        err_set(err, errlen, "out of memory for the run's layout");
        return -1;
    }
    return 0;
}

int runconf_parse(const runconf_fields *r, runconf *rc, char *err, size_t errlen)
{
    if (shard_fields(r, rc, err, errlen) < 0 || fragment_fields(r, rc, err, errlen) < 0) return -1;
    if (outer_fields(r, rc, err, errlen) < 0 || async_rule_fields(r, rc, err, errlen) < 0) return -1;
    if (codec_fields(r, rc, err, errlen) < 0) return -1;
    return run_fields(r, rc, err, errlen);
}

void runconf_free(runconf *rc)
{
    free(rc->shard_bounds);
    free(rc->frag_bounds);
    free(rc->layout);
    free(rc->dn_t0_shard);
    rc->dn_t0_shard = NULL;
    rc->shard_bounds = NULL;
    rc->frag_bounds = NULL;
    rc->layout = NULL;
}

uint64_t runconf_shard_numel(const runconf *rc, int shard)
{
    return rc->shard_bounds[shard + 1] - rc->shard_bounds[shard];
}

uint64_t runconf_dn_t0(const runconf *rc, int shard)
{
    return rc->dn_t0_shard ? rc->dn_t0_shard[shard] : rc->dn_t0;
}

int runconf_fragment_of_shard(const runconf *rc, int shard)
{
    for (int f = 0; f < rc->nfragments; f++)
        if (shard < rc->frag_bounds[f + 1]) return f;
    return rc->nfragments - 1;
}

int runconf_weighted(const runconf *rc)
{
    return rc->weight_tokens || (rc->async && rc->stale_weight != STALE_W_NONE);
}

int runconf_rebase(const runconf *rc)
{
    return rc->async && rc->async_rule == ASYNC_RULE_REBASE;
}

int runconf_accepts_dtype(const runconf *rc, int dtype)
{
    return dtype == rc->compress || (rc->compress == BLOB_BF16 && dtype == BLOB_F32);
}
