/* layout.c: shard and fragment boundaries (see layout.h). */
#include "layout.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "format/runconf.h"

/* The tensor boundary nearest to x (tensor offsets and numel itself are boundaries). */
static uint64_t nearest_boundary(const model_tensor *t, int nt, uint64_t numel, uint64_t x)
{
    uint64_t best = numel, bestd = numel > x ? numel - x : x - numel;
    for (int i = 0; i < nt; i++) {
        uint64_t b = t[i].offset, d = b > x ? b - x : x - b;
        if (d < bestd) {
            best = b;
            bestd = d;
        }
    }
    return best;
}

int layout_cut_shards(const model_tensor *tensors, int ntensors, uint64_t numel, int nshards, uint64_t *bounds,
                      char *err, size_t errlen)
{
    if (nshards < 1 || (uint64_t)nshards > numel) {
        err_set(err, errlen, "cannot cut %" PRIu64 " parameters into %d shards", numel, nshards);
        return -1;
    }
    uint64_t target = numel / (uint64_t)nshards;
    bounds[0] = 0;
    for (int k = 1; k < nshards; k++) {
        uint64_t ideal = numel * (uint64_t)k / (uint64_t)nshards;
        uint64_t b = nearest_boundary(tensors, ntensors, numel, ideal);
        uint64_t d = b > ideal ? b - ideal : ideal - b;
        if (d > target / 4 || b <= bounds[k - 1] || b >= numel) b = ideal;
        if (b <= bounds[k - 1]) b = bounds[k - 1] + 1;
        bounds[k] = b;
    }
    bounds[nshards] = numel;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Put x into bounds[0..*n] (one more than *n numbers, the last numel) unless there already; a sort at the
 * end puts them in order. -1 when there is no room. */
static int add_bound(uint64_t *bounds, int *n, int *extra, uint64_t x)
{
    uint64_t numel = bounds[*n];
    if (x == 0 || x >= numel) return 0;
    if (*n + *extra + 1 > RUNCONF_MAX_SHARDS) return -1;
    bounds[*n + 1 + (*extra)++] = x; /* past numel for now */
    return 0;
}

int layout_cut_fsdp(const model_tensor *tensors, int ntensors, const int *ranks, int nranks, uint64_t *bounds,
                    int *nshards, char *err, size_t errlen)
{
    int n = *nshards, extra = 0;
    for (int i = 0; i < ntensors; i++) {
        int full = add_bound(bounds, &n, &extra, tensors[i].offset) < 0;
        for (int j = 0; !full && j < nranks; j++)
            for (int r = 1; !full && r < ranks[j]; r++) {
                size_t off;
                model_dim0_chunk(&tensors[i], ranks[j], r, &off);
                full = add_bound(bounds, &n, &extra, off) < 0;
            }
        if (full) {
            err_set(err, errlen,
                    "--fsdp-ranks: the ranks' dim-0 chunks of the model's %d tensors need more than %d shards: use "
                    "fewer ranks or a model with fewer tensors",
                    ntensors, RUNCONF_MAX_SHARDS);
            return -1;
        }
    }
    qsort(bounds, (size_t)(n + 1 + extra), sizeof *bounds, cmp_u64); /* numel, the largest, ends last */
    int m = 0;
    for (int k = 1; k <= n + extra; k++)
        if (bounds[k] != bounds[m]) bounds[++m] = bounds[k];
    *nshards = m;
    return 0;
}

int layout_cut_fragments(int nshards, int nfragments, uint64_t *frag_bounds, char *err, size_t errlen)
{
    if (nfragments < 1 || nfragments > nshards) {
        err_set(err, errlen, "%d fragments need at least as many shards (have %d): raise --shards", nfragments,
                nshards);
        return -1;
    }
    for (int f = 0; f <= nfragments; f++) frag_bounds[f] = (uint64_t)nshards * (uint64_t)f / (uint64_t)nfragments;
    return 0;
}

/* The shard indices (0 < k < nshards) at which a tensor starts, ascending, into idx; their count. */
static int tensor_starts(const model_tensor *t, int nt, const uint64_t *shard_bounds, int nshards, int *idx)
{
    int n = 0, i = 0;
    for (int k = 1; k < nshards; k++) {
        while (i < nt && t[i].offset < shard_bounds[k]) i++;
        if (i < nt && t[i].offset == shard_bounds[k]) idx[n++] = k;
    }
    return n;
}

int layout_cut_fragments_at_tensors(const model_tensor *tensors, int ntensors, const uint64_t *shard_bounds,
                                    int nshards, int nfragments, uint64_t *frag_bounds, char *err, size_t errlen)
{
    int *starts = calloc((size_t)(nshards > 0 ? nshards : 1), sizeof *starts);
    if (!starts) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    int n = tensor_starts(tensors, ntensors, shard_bounds, nshards, starts), rc = 0;
    if (nfragments < 1 || n < nfragments - 1) {
        err_set(err, errlen,
                "--fsdp-ranks: %d fragments of whole tensors need %d tensors and the model has %d: use "
                "--fragments %d or fewer",
                nfragments, nfragments, n + 1, n + 1);
        rc = -1;
    }
    uint64_t numel = shard_bounds[nshards];
    frag_bounds[0] = 0;
    /* fragment f ends at the tensor start nearest to f/F of the parameters, leaving one for each fragment after */
    for (int f = 1, j = 0; rc == 0 && f < nfragments; f++) {
        uint64_t target = numel * (uint64_t)f / (uint64_t)nfragments;
        int best = j, last = n - (nfragments - 1 - f);
        for (int c = j; c < last; c++) {
            uint64_t at = shard_bounds[starts[c]], bat = shard_bounds[starts[best]];
            if ((at > target ? at - target : target - at) < (bat > target ? bat - target : target - bat)) best = c;
        }
        frag_bounds[f] = (uint64_t)starts[best];
        j = best + 1;
    }
    frag_bounds[nfragments] = (uint64_t)nshards;
    free(starts);
    return rc;
}

char *layout_json(const model_tensor *t, int nt)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < nt; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++) json_array_append_new(shape, json_integer((json_int_t)t[i].shape[d]));
        json_array_append_new(arr, json_pack("[s,o,I]", t[i].name, shape, (json_int_t)t[i].offset));
    }
    char *s = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return s;
}

/* One entry [name, [shape...], offset] into t (name not copied yet); its length in *namelen. */
static int parse_entry(json_t *e, uint64_t expect_off, model_tensor *t, size_t *namelen, char *err, size_t errlen)
{
    const char *name = NULL;
    json_t *shape = NULL;
    json_int_t off = -1;
    if (json_unpack(e, "[s,o,I]", &name, &shape, &off) < 0 || !json_is_array(shape) || json_array_size(shape) > 4) {
        err_set(err, errlen, "a layout entry is not [name, [shape of at most 4 dims], offset]");
        return -1;
    }
    memset(t, 0, sizeof *t);
    t->name = name;
    t->ndim = (int)json_array_size(shape);
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_int_t x = json_integer_value(json_array_get(shape, (size_t)d));
        if (!json_is_integer(json_array_get(shape, (size_t)d)) || x < 0 ||
            (x > 0 && t->numel > UINT32_MAX * 65536ull / (uint64_t)x)) {
            err_set(err, errlen, "tensor '%s': bad shape", name);
            return -1;
        }
        t->shape[d] = (size_t)x;
        t->numel *= (size_t)x;
    }
    if ((uint64_t)off != expect_off) {
        err_set(err, errlen, "tensor '%s' at offset %lld, expected %" PRIu64 " (tensors must be contiguous)", name,
                (long long)off, expect_off);
        return -1;
    }
    t->offset = (size_t)off;
    *namelen = strlen(name) + 1;
    return 0;
}

int layout_parse_json(const char *json, uint64_t numel, model_tensor **tensors, int *ntensors, char *err, size_t errlen)
{
    json_error_t je;
    json_t *arr = json_loads(json, 0, &je);
    size_t n = json_array_size(arr), names = 0, len;
    model_tensor *t = n && n < 1000000 ? calloc(n, sizeof *t) : NULL;
    uint64_t off = 0;
    int rc = -1;
    if (!t) err_set(err, errlen, "the layout is not a non-empty JSON array");
    for (size_t i = 0; t && i < n; i++, names += len) {
        if (parse_entry(json_array_get(arr, i), off, &t[i], &len, err, errlen) < 0) goto done;
        off += t[i].numel;
    }
    if (t && off != numel) {
        err_set(err, errlen, "the layout covers %" PRIu64 " parameters, not %" PRIu64, off, numel);
        goto done;
    }
    model_tensor *block = t ? malloc(n * sizeof *block + names) : NULL;
    if (t && !block) err_set(err, errlen, "out of memory for the layout");
    if (block) { /* names copied behind the table: one free() releases everything */
        char *p = (char *)(block + n);
        for (size_t i = 0; i < n; i++) {
            block[i] = t[i];
            strcpy(p, t[i].name);
            block[i].name = p;
            p += strlen(p) + 1;
        }
        *tensors = block;
        *ntensors = (int)n;
        rc = 0;
    }
done:
    free(t);
    json_decref(arr);
    return rc;
}
