/* checkpoint_read.c: reading a checkpoint back (checkpoint_read of checkpoint.h), for
 * `coordinator checkpoint show`, `init --from-checkpoint` and `repair --from-checkpoint`, which first
 * check with checkpoint_file_readable that their FILE is one.
 *
 * common/format/safetensors.c parses the file and checks every size in it (no overflow, tensors inside the
 * data section, no overlap or gap), so this file only checks that the tensors and the metadata are
 * the ones a ReDiLoCo checkpoint has, then reads the values and verifies their digests. */
#include "checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "format/runconf.h"
#include "format/safetensors.h"
#include "math/outer.h"

void checkpoint_free(checkpoint *ck)
{
    free(ck->params);
    free(ck->mom);
    free(ck->dnbuf);
    free(ck->shard_bounds);
    free(ck->shard_versions);
    free(ck->dn_t_shards);
    free(ck->layout);
    memset(ck, 0, sizeof *ck);
}

/* an integer in [0, max], or -1 (also when s is NULL: a missing key) */
static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    long long v;
    if (!s || parse_int(s, 0, (long long)max, &v) < 0) return -1;
    *out = (uint64_t)v;
    return 0;
}

/* Metadata `name`: one count per shard, the lowest of which is `lowest` (the value the metadata gives for
 * them all: version, dn_t); absent (the shards at one value), *out stays NULL. -1 when malformed. */
static int read_shard_counts(const safetensors *st, const char *name, int nshards, uint64_t lowest, uint64_t **out)
{
    const char *s = safetensors_meta(st, name);
    if (!s) return 0;
    if (runconf_parse_counts(s, nshards, out) < 0) return -1;
    uint64_t lo = (*out)[0];
    for (int k = 1; k < nshards; k++)
        if ((*out)[k] < lo) lo = (*out)[k];
    return lo == lowest ? 0 : -1;
}

static int check_format(const safetensors *st, char *err, size_t errlen)
{
    const char *fmt = safetensors_meta(st, "format"), *fv = safetensors_meta(st, "format_version");
    if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0) {
        err_set(err, errlen, "a safetensors file but not a ReDiLoCo checkpoint (no __metadata__.format \"%s\")",
                CKPT_FORMAT);
        return -1;
    }
    if (!fv || strcmp(fv, CKPT_FORMAT_VERSION) != 0) {
        err_set(err, errlen, "checkpoint format version %s, this build reads %s", fv ? fv : "(none)",
                CKPT_FORMAT_VERSION);
        return -1;
    }
    return 0;
}

/* the run's configuration: every key present and in range */
static int read_config(const safetensors *st, checkpoint *ck, char *err, size_t errlen)
{
    uint64_t shards, frags, snap, version;
    const char *tr = safetensors_meta(st, "trainer"), *model = safetensors_meta(st, "model");
    const char *sb = safetensors_meta(st, "shard_bounds"), *nest = safetensors_meta(st, "nesterov");
    const char *lr = safetensors_meta(st, "outer_lr"), *mu = safetensors_meta(st, "outer_momentum");
    const char *hm = safetensors_meta(st, "has_momentum");
    if (parse_u64(safetensors_meta(st, "numel"), INT64_MAX, &ck->numel) < 0 || ck->numel == 0 ||
        parse_u64(safetensors_meta(st, "version"), INT64_MAX, &version) < 0 ||
        parse_u64(safetensors_meta(st, "shards"), RUNCONF_MAX_SHARDS, &shards) < 0 ||
        parse_u64(safetensors_meta(st, "fragments"), RUNCONF_MAX_FRAGMENTS, &frags) < 0 ||
        parse_u64(safetensors_meta(st, "seed"), INT64_MAX, &ck->seed) < 0 ||
        parse_u64(safetensors_meta(st, "snapshot_every"), INT_MAX, &snap) < 0 || !tr || !model || !sb || !lr || !mu ||
        !nest || !hm || parse_double(lr, &ck->outer_lr) < 0 || parse_double(mu, &ck->outer_momentum) < 0) {
        err_set(err, errlen, "incomplete or malformed checkpoint metadata");
        return -1;
    }
    char e2[256];
    int nb = 0;
    if (runconf_parse_bounds_u64(sb, &ck->shard_bounds, &nb, e2, sizeof e2) < 0 || (uint64_t)nb != shards ||
        ck->shard_bounds[0] != 0 || ck->shard_bounds[nb] != ck->numel) {
        err_set(err, errlen, "shard_bounds do not cover the %" PRIu64 " parameters", ck->numel);
        return -1;
    }
    ck->version = (int64_t)version;
    ck->nshards = (int)shards;
    if (read_shard_counts(st, "shard_versions", ck->nshards, version, &ck->shard_versions) < 0) {
        err_set(err, errlen, "shard_versions is not one version per shard, the lowest %" PRIu64, version);
        return -1;
    }
    ck->nfragments = (int)frags;
    ck->snapshot_every = (int)snap;
    ck->nesterov = !strcmp(nest, "1") || !strcmp(nest, "true");
    ck->has_mom = !strcmp(hm, "true");
    const char *run = safetensors_meta(st, "run"), *mode = safetensors_meta(st, "mode");
    snprintf(ck->trainer, sizeof ck->trainer, "%s", tr);
    snprintf(ck->model, sizeof ck->model, "%s", model);
    snprintf(ck->run, sizeof ck->run, "%s", run ? run : "");
    snprintf(ck->mode, sizeof ck->mode, "%s", mode ? mode : "sync");
    const char *layout = safetensors_meta(st, "layout");
    if (layout && !(ck->layout = strdup(layout))) {
        err_set(err, errlen, "out of memory for the layout");
        return -1;
    }
    return 0;
}

/* Delayed Nesterov: a third tensor and where the every-N schedule stands */
static int read_dn_config(const safetensors *st, checkpoint *ck, char *err, size_t errlen)
{
    uint64_t dnb = 0;
    const char *dnv = safetensors_meta(st, "dn_variant");
    if (safetensors_meta(st, "dn_buffer") &&
        (parse_u64(safetensors_meta(st, "dn_buffer"), 1000000, &dnb) < 0 ||
         (dnb > 0 && (!dnv || (strcmp(dnv, "paper") && strcmp(dnv, "forgather")) ||
                      parse_u64(safetensors_meta(st, "dn_t"), INT64_MAX, &ck->dn_t) < 0)))) {
        err_set(err, errlen, "malformed Delayed Nesterov metadata (dn_buffer, dn_variant, dn_t)");
        return -1;
    }
    ck->dn_buffer = (int)dnb;
    snprintf(ck->dn_variant, sizeof ck->dn_variant, "%s", dnb > 0 ? dnv : "");
    if (dnb > 0 && read_shard_counts(st, "dn_t_shards", ck->nshards, ck->dn_t, &ck->dn_t_shards) < 0) {
        err_set(err, errlen, "dn_t_shards is not one count per shard, the lowest %" PRIu64, ck->dn_t);
        return -1;
    }
    return 0;
}

static const char *const tensor_names[3] = {"params", "momentum", "dn_buffer"};

/* exactly the tensors of the format (params, momentum, and dn_buffer with DN), F32 [numel] each */
static int check_tensors(const safetensors *st, const checkpoint *ck, char *err, size_t errlen)
{
    size_t want = ck->dn_buffer > 0 ? 3 : 2;
    for (size_t i = 0; i < want; i++) {
        const safetensors_tensor *t = safetensors_find(st, tensor_names[i]);
        if (!t) {
            err_set(err, errlen, "no tensor \"%s\"", tensor_names[i]);
            return -1;
        }
        if (t->dtype != ST_F32 || t->ndim != 1 || t->numel != ck->numel) {
            err_set(err, errlen, "tensor \"%s\" is not F32 of shape [%" PRIu64 "] (metadata numel)", tensor_names[i],
                    ck->numel);
            return -1;
        }
    }
    if (st->ntensors != want) {
        err_set(err, errlen, "%zu tensors, a checkpoint has %zu (params, momentum%s)", st->ntensors, want,
                want == 3 ? ", dn_buffer" : "");
        return -1;
    }
    return 0;
}

/* what: "params are", "momentum is", ... (the start of the message) */
static int verify_digest(const char *what, const float *v, uint64_t n, const char *want, char *err, size_t errlen)
{
    char got[17];
    snprintf(got, sizeof got, "%016" PRIx64, digest_f32(v, n));
    if (want && strcmp(want, got)) {
        err_set(err, errlen, "%s corrupt: XXH3 %s, metadata says %s", what, got, want);
        return -1;
    }
    return 0;
}

static int verify_digests(const checkpoint *ck, const safetensors *st, char *err, size_t errlen)
{
    const char *dx = safetensors_meta(st, "dn_buffer_xxh3"), *sd = safetensors_meta(st, "shard_digests");
    if (verify_digest("params are", ck->params, ck->numel, safetensors_meta(st, "params_xxh3"), err, errlen) < 0 ||
        verify_digest("momentum is", ck->mom, ck->numel, safetensors_meta(st, "momentum_xxh3"), err, errlen) < 0)
        return -1;
    if (ck->dnbuf && verify_digest("dn_buffer is", ck->dnbuf, ck->numel, dx ? dx : "(nothing)", err, errlen) < 0)
        return -1;
    if (!sd || strlen(sd) != (size_t)ck->nshards * 17 - 1) return 0;
    for (int k = 0; k < ck->nshards; k++) {
        uint64_t b = ck->shard_bounds[k];
        char what[48], want[17];
        snprintf(what, sizeof what, "shard %d of the params is", k);
        memcpy(want, sd + 17 * k, 16);
        want[16] = '\0';
        if (verify_digest(what, ck->params + b, ck->shard_bounds[k + 1] - b, want, err, errlen) < 0) return -1;
    }
    return 0;
}

/* the values: allocated from the tensor table (bounded by the file's size), finite, digests as recorded */
static int read_values(const safetensors *st, checkpoint *ck, char *err, size_t errlen)
{
    float **dst[3] = {&ck->params, &ck->mom, &ck->dnbuf};
    int nt = ck->dn_buffer > 0 ? 3 : 2;
    for (int i = 0; i < nt; i++) {
        const safetensors_tensor *t = safetensors_find(st, tensor_names[i]);
        size_t n;
        if (safetensors_f32_numel(t, &n, err, errlen) < 0) return -1;
        if (!(*dst[i] = malloc(n * sizeof(float) + 1))) {
            err_set(err, errlen, "out of memory for %" PRIu64 " parameters", ck->numel);
            return -1;
        }
        if (safetensors_read_f32(st, t, *dst[i], err, errlen) < 0) return -1;
        size_t bad;
        if (outer_check_finite(*dst[i], n, &bad) < 0) {
            err_set(err, errlen, "non-finite value (NaN/Inf) at element %zu of \"%s\"", bad, tensor_names[i]);
            return -1;
        }
    }
    if (verify_digests(ck, st, err, errlen) < 0) return -1;
    if (!ck->has_mom) memset(ck->mom, 0, ck->numel * sizeof(float));
    return 0;
}

int checkpoint_file_readable(const char *path, char *err, size_t errlen)
{
    struct stat sb;
    if (access(path, R_OK) != 0 || stat(path, &sb) != 0) {
        err_set(err, errlen, "%s", strerror(errno));
        return -1;
    }
    if (S_ISDIR(sb.st_mode)) { /* open() succeeds on one, and the reader would call it too short */
        err_set(err, errlen, "is a directory, not a file");
        return -1;
    }
    return 0;
}

int checkpoint_read(const char *path, int with_data, checkpoint *ck, char *err, size_t errlen)
{
    memset(ck, 0, sizeof *ck);
    safetensors st;
    char e2[512];
    if (safetensors_open(path, &st, err, errlen) < 0) return -1;
    int rc = check_format(&st, e2, sizeof e2) < 0 || read_config(&st, ck, e2, sizeof e2) < 0 ||
                     read_dn_config(&st, ck, e2, sizeof e2) < 0 || check_tensors(&st, ck, e2, sizeof e2) < 0 ||
                     (with_data && read_values(&st, ck, e2, sizeof e2) < 0)
                 ? -1
                 : 0;
    if (rc < 0) {
        err_set(err, errlen, "%s: %s", path, e2);
        checkpoint_free(ck);
    }
    safetensors_free(&st);
    return rc;
}
