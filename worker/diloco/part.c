/* part.c: a sharded group's rank (FSDP, fully_shard: diloco.h "Sharded groups") sees only its own shards.
 *
 * Such a rank holds its slices of the run's vector (one range per tensor), each made of whole shards
 * of the run (coordinator init --fsdp-ranks cuts the shards at every rank's slice boundary). part_view
 * rewrites the session's runconf into the rank's view: its shards only, renumbered 0 .. m-1, with bounds
 * into its own buffers (the concatenation of its slices), one fragment of all of them. Every file of the
 * library then works on the rank's part as it works on a whole vector (Δ, error feedback, momentum, gets
 * straight into base), and only what leaves the process (a frame's shard number, a Redis field name)
 * takes the run's number, dl_shard_id. The run's own bounds are kept for the checks and the digest.
 *
 * The shards digest (diloco_sync_info.shards_digest) is defined so that parts add up to the whole: a sum
 * over shards, each shard's XXH3 hashed again with its run number as the seed, so a sharded group sums
 * its ranks' values (one number each through the group's allgather) and gets what every other member of
 * the run computes over the whole vector. */
#include <inttypes.h>
#include <stdlib.h>
#include <xxhash.h>

#include "base/util.h"
#include "internal.h"
#include "math/outer.h"

/* The shard of the run that starts at element x (its index), or -1 when no shard starts there. */
static int shard_starting_at(const uint64_t *bounds, int nshards, uint64_t x)
{
    int lo = 0, hi = nshards; /* bounds[0..nshards] ascending */
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (bounds[mid] == x) return mid;
        if (bounds[mid] < x) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* The shard of the run holding element x (x < bounds[nshards]). */
static int shard_holding(const uint64_t *bounds, int nshards, uint64_t x)
{
    int lo = 0, hi = nshards - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (bounds[mid] <= x) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Slice i's end or start x is not a shard boundary: say which shard it cuts and what to do. */
static void not_a_boundary(const diloco *d, int i, const char *which, uint64_t x, char *err, size_t errlen)
{
    int k = shard_holding(d->rc.shard_bounds, d->rc.nshards, x);
    err_set(err, errlen,
            "slice %d of this rank %s at element %" PRIu64 ", inside shard %d [%" PRIu64 ", %" PRIu64
            ") of run '%s': a sharded group's slices must be whole shards (init the run with coordinator init "
            "--fsdp-ranks %d, whose shard bounds follow every rank's dim-0 chunks)",
            i, which, x, k, d->rc.shard_bounds[k], d->rc.shard_bounds[k + 1], d->run, d->o.group.size);
}

/* The run's shards [first[i], last[i]) of every slice, checked; their count, or -1 + err. */
static int slice_shards(const diloco *d, int *first, int *last, char *err, size_t errlen)
{
    const diloco_group_ops *g = &d->o.group;
    uint64_t end = 0;
    int m = 0;
    for (int i = 0; i < g->nslices; i++) {
        uint64_t off = g->slices[2 * i], n = g->slices[2 * i + 1];
        if (n == 0 || off < end || off > d->rc.numel || n > d->rc.numel - off) {
            err_set(err, errlen,
                    "slice %d of this rank ([%" PRIu64 ", +%" PRIu64 ")) is empty, overlaps the one before or "
                    "lies past the run's %" PRIu64 " parameters: slices must be non-empty, ascending and disjoint",
                    i, off, n, d->rc.numel);
            return -1;
        }
        first[i] = shard_starting_at(d->rc.shard_bounds, d->rc.nshards, off);
        last[i] = shard_starting_at(d->rc.shard_bounds, d->rc.nshards, off + n);
        if (first[i] < 0 || last[i] < 0) {
            not_a_boundary(d, i, first[i] < 0 ? "starts" : "ends", first[i] < 0 ? off : off + n, err, errlen);
            return -1;
        }
        m += last[i] - first[i];
        end = off + n;
    }
    return m;
}

int part_view(diloco *d, size_t numel, char *err, size_t errlen)
{
    const diloco_group_ops *g = &d->o.group;
    if (g->size <= 1) {
        err_set(err, errlen, "group.slices (sharded parameters) need a process group of 2 or more ranks");
        return -1;
    }
    if (g->nslices < 0 || (g->nslices > 0 && !g->slices)) {
        err_set(err, errlen, "group.nslices is %d but group.slices is %s", g->nslices, g->slices ? "set" : "NULL");
        return -1;
    }
    if (d->rc.nfragments != 1) {
        err_set(err, errlen, "process groups do not support Streaming DiLoCo (runs of several fragments) yet: "
                             "join this run with one process per worker");
        return -1;
    }
    int *first = malloc((size_t)g->nslices * sizeof *first), *last = malloc((size_t)g->nslices * sizeof *last);
    int m = first && last ? slice_shards(d, first, last, err, errlen) : -1;
    if (!first || !last) err_set(err, errlen, "out of memory");
    uint64_t *local = NULL;
    if (m == 0) err_set(err, errlen, "this rank holds no parameters (no slices): a group needs every rank to hold some");
    if (m > 0) {
        local = malloc(((size_t)m + 1) * sizeof *local);
        d->shard_ids = malloc((size_t)m * sizeof *d->shard_ids);
        if (!local || !d->shard_ids) err_set(err, errlen, "out of memory");
    }
    int rc = -1;
    if (local && d->shard_ids) {
        int j = 0;
        local[0] = 0;
        for (int i = 0; i < g->nslices; i++)
            for (int k = first[i]; k < last[i]; k++, j++) {
                d->shard_ids[j] = k;
                local[j + 1] = local[j] + runconf_shard_numel(&d->rc, k);
            }
        if (local[m] != numel) {
            err_set(err, errlen,
                    "this rank's slices hold %" PRIu64 " parameters but its buffer has %zu: params must be the "
                    "concatenation of its slices",
                    local[m], numel);
        } else { /* the rank's view: its shards, its bounds, its numel, one fragment of all of them */
            d->run_bounds = d->rc.shard_bounds;
            d->rc.shard_bounds = local;
            d->rc.nshards = m;
            d->rc.numel = numel;
            d->rc.frag_bounds[1] = m;
            local = NULL;
            rc = 0;
        }
    }
    if (rc < 0) {
        free(d->shard_ids);
        d->shard_ids = NULL;
    }
    free(local);
    free(first);
    free(last);
    return rc;
}

void part_free(diloco *d)
{
    free(d->shard_ids);
    free(d->run_bounds);
    d->shard_ids = NULL;
    d->run_bounds = NULL;
}

uint64_t part_shards_digest(const diloco *d)
{
    uint64_t sum = 0;
    for (int k = 0; k < d->rc.nshards; k++) {
        uint64_t off = d->rc.shard_bounds[k], dk = digest_f32(d->base + off, (size_t)(d->rc.shard_bounds[k + 1] - off));
        sum += XXH3_64bits_withSeed(&dk, sizeof dk, (XXH64_hash_t)dl_shard_id(d, k));
    }
    return sum;
}
