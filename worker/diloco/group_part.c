/* group_part.c: a process group's parts (group.c): every rank moves a contiguous range of the shards of
 * every fragment, balanced by elements, which dl_first_shard / dl_last_shard give every per-fragment loop
 * of sync.c, delta.c and fetch.c. A function of the run and the group's size only, so every rank computes
 * the same parts. Calls nothing of the library. */
#include <stdint.h>
#include <stdlib.h>

#include "base/util.h"
#include "internal.h"

/* The ranks' parts of shards [a, b) (a fragment): rank r's first shard is the shard boundary nearest to r/size
 * of the fragment's elements, leaving every rank at least one shard; b[0..size] = the size+1 bounds. A
 * function of the run and the size only: every rank computes the same. */
static void split_shards(const diloco *d, int a, int b, int *bounds)
{
    int size = d->o.group.size;
    uint64_t lo_el = d->rc.shard_bounds[a], n_el = d->rc.shard_bounds[b] - lo_el;
    bounds[0] = a;
    bounds[size] = b;
    for (int r = 1; r < size; r++) {
        uint64_t target = lo_el + n_el * (uint64_t)r / (uint64_t)size;
        int lo = bounds[r - 1] + 1, hi = b - (size - r), best = lo;
        for (int k = lo; k <= hi; k++) {
            uint64_t at = d->rc.shard_bounds[k], bat = d->rc.shard_bounds[best];
            uint64_t dist = at > target ? at - target : target - at, bdist = bat > target ? bat - target : target - bat;
            if (dist < bdist) best = k;
        }
        bounds[r] = best;
    }
}

/* Every rank moves a part of every fragment (one fragment: of the run), so each fragment's round uses every
 * rank's connections. Checked first: each fragment has at least one shard per rank. */
int gpart_bounds(diloco *d, char *err, size_t errlen)
{
    int size = d->o.group.size, nf = d->rc.nfragments;
    for (int f = 0; f < nf; f++)
        if (d->rc.frag_bounds[f + 1] - d->rc.frag_bounds[f] < size) {
            err_set(err, errlen,
                    "a group of %d processes needs at least %d shards in each fragment (each rank moves whole "
                    "shards of every fragment) and fragment %d of run '%s' has %d: init it with --shards %d or "
                    "more, or use fewer ranks",
                    size, size, f, d->run, d->rc.frag_bounds[f + 1] - d->rc.frag_bounds[f], size * nf);
            return -1;
        }
    d->grp_bounds = calloc((size_t)nf * (size_t)(size + 1), sizeof(int));
    d->grp_parts = calloc(2 * (size_t)nf, sizeof(int));
    if (!d->grp_bounds || !d->grp_parts) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    for (int f = 0; f < nf; f++) {
        int *b = d->grp_bounds + (size_t)f * (size_t)(size + 1);
        split_shards(d, d->rc.frag_bounds[f], d->rc.frag_bounds[f + 1], b);
        d->grp_parts[2 * f] = b[d->grp_rank];
        d->grp_parts[2 * f + 1] = b[d->grp_rank + 1];
    }
    return 0;
}

/* Rank r's shards of fragment f: [*first, *last). */
void gpart_rank_shards(const diloco *d, int r, int f, int *first, int *last)
{
    const int *b = d->grp_bounds + (size_t)f * (size_t)(d->o.group.size + 1);
    *first = b[r];
    *last = b[r + 1];
}

/* The shards this rank moves, over every fragment. */
int gpart_count(const diloco *d)
{
    if (!d->grp_parts) return d->rc.nshards;
    int n = 0;
    for (int f = 0; f < d->rc.nfragments; f++) n += d->grp_parts[2 * f + 1] - d->grp_parts[2 * f];
    return n;
}

int diloco_group_range(const diloco *d, int rank, size_t *offset, size_t *count)
{
    if (!d->grp || !d->grp_bounds || d->rc.nfragments != 1 || rank < 0 || rank >= d->o.group.size) return -1;
    int first, last;
    gpart_rank_shards(d, rank, 0, &first, &last);
    *offset = (size_t)d->rc.shard_bounds[first];
    *count = (size_t)d->rc.shard_bounds[last] - *offset;
    return 0;
}

/* The run's fragment bounds (shard numbers of the run; a sharded rank's rc has its own view of them). */
const int *gpart_run_frag_bounds(const diloco *d)
{
    return d->run_frag_bounds ? d->run_frag_bounds : d->rc.frag_bounds;
}
