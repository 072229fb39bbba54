/* layout.c: shard and fragment boundaries (see layout.h). */
#include "layout.h"

#include <inttypes.h>
#include <jansson.h>

#include "util.h"

/* The tensor boundary nearest to x (tensor offsets and numel itself are boundaries). */
static uint64_t nearest_boundary(const model_tensor *t, int nt, uint64_t numel, uint64_t x) {
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
                      char *err, size_t errlen) {
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

int layout_cut_fragments(int nshards, int nfragments, uint64_t *frag_bounds, char *err, size_t errlen) {
    if (nfragments < 1 || nfragments > nshards) {
        err_set(err, errlen, "%d fragments need at least as many shards (have %d): raise --shards", nfragments,
                nshards);
        return -1;
    }
    for (int f = 0; f <= nfragments; f++) frag_bounds[f] = (uint64_t)nshards * (uint64_t)f / (uint64_t)nfragments;
    return 0;
}

char *layout_json(const model_tensor *t, int nt) {
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
