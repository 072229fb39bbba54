/* part.c: a sharded group's rank (FSDP, fully_shard: diloco.h "Sharded groups") sees only its own shards.
 *
 * Such a rank holds its slices of the run's vector (one range per tensor), each made of whole shards
 * of the run (coordinator init --fsdp-ranks cuts the shards at every rank's slice boundary). part_view
 * rewrites the session's runconf into the rank's view: its shards only, renumbered 0 .. m-1, with bounds
 * into its own buffers (the concatenation of its slices), and its fragments: in fragment f its shards of the
 * run's fragment f (view_fragments). Every file of the library then works on the rank's part as it works on
 * a whole vector (Δ, error feedback, momentum, gets straight into base), and only what leaves the process (a
 * frame's shard number, a Redis field name) takes the run's number, dl_shard_id. The run's own bounds are
 * kept for the checks and the digest.
 *
 * The shards digest (diloco_sync_info.shards_digest) is defined so that parts add up to the whole: a sum
 * over shards, each shard's XXH3 hashed again with its run number as the seed, so a sharded group sums
 * its ranks' values (one number each through the group's allgather) and gets what every other member of
 * the run computes over the whole vector. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
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

/* The rank's view of the run's fragments (after d->shard_ids has its m shards): fragment f is its shards
 * whose run numbers are in the run's fragment f, a contiguous range of its own as both number ascending;
 * the run's bounds are kept in run_frag_bounds. Every fragment must hold some of this rank's shards (each
 * rank's round of a fragment pushes its part: coordinator init --fsdp-ranks cuts fragments of whole
 * tensors, every rank holding a dim-0 chunk of each, but a tensor of fewer rows than ranks has none for
 * the last). */
static int view_fragments(diloco *d, int m, char *err, size_t errlen)
{
    int nf = d->rc.nfragments;
    d->run_frag_bounds = malloc(((size_t)nf + 1) * sizeof *d->run_frag_bounds);
    if (!d->run_frag_bounds) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    memcpy(d->run_frag_bounds, d->rc.frag_bounds, ((size_t)nf + 1) * sizeof *d->run_frag_bounds);
    for (int f = 0, j = 0; f < nf; f++) {
        d->rc.frag_bounds[f] = j;
        while (j < m && d->shard_ids[j] < d->run_frag_bounds[f + 1]) j++;
        if (j == d->rc.frag_bounds[f]) {
            err_set(err, errlen,
                    "this rank holds none of fragment %d's shards [%d, %d) of run '%s' (its tensors have fewer "
                    "dim-0 rows than the group has ranks, or the run was not made with coordinator init "
                    "--fsdp-ranks, whose fragments are whole tensors): each rank of a sharded group moves its "
                    "part of every fragment; use fewer fragments or fewer ranks",
                    f, d->run_frag_bounds[f], d->run_frag_bounds[f + 1], d->run);
            memcpy(d->rc.frag_bounds, d->run_frag_bounds, ((size_t)nf + 1) * sizeof *d->run_frag_bounds);
            free(d->run_frag_bounds);
            d->run_frag_bounds = NULL;
            return -1;
        }
    }
    d->rc.frag_bounds[nf] = m;
    return 0;
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
    int *first = malloc((size_t)g->nslices * sizeof *first), *last = malloc((size_t)g->nslices * sizeof *last);
    int m = first && last ? slice_shards(d, first, last, err, errlen) : -1;
    if (!first || !last) err_set(err, errlen, "out of memory");
    uint64_t *local = NULL;
    if (m == 0) err_set(err, errlen, "this rank holds no parameters (no slices): a group needs every rank to hold some");
    if (m > 0) {
        local = malloc(((size_t)m + 1) * sizeof *local);
        d->shard_ids = calloc((size_t)m, sizeof *d->shard_ids);
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
        } else if (view_fragments(d, m, err, errlen) == 0) { /* the rank's view: its shards, bounds, numel */
            d->run_bounds = d->rc.shard_bounds;
            d->rc.shard_bounds = local;
            d->rc.nshards = m;
            d->rc.numel = numel;
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
    free(d->run_frag_bounds);
    d->shard_ids = NULL;
    d->run_bounds = NULL;
    d->run_frag_bounds = NULL;
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
