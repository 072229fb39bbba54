/* lookahead.c: async runs with `coordinator init --async-lookahead G`: a worker starts its next interval
 * ahead of the version it got back, where the others' submissions are expected to take the parameters
 * while it trains (docs/async.md, "Starting ahead").
 *
 * In a steady async run each submission is applied a few versions after the one it started from (N - 1
 * with N equal workers), so the worker trained from parameters that had not yet moved by the others'
 * progress. The versions it saw give that progress: between the base of its previous submission and the
 * version that submission got back, the parameters moved by got - prev over `moved` versions, of which
 * `stale` were the others' while it trained. The next interval starts from
 *     start = got + G * stale / moved * (got - prev)          (outer_lookahead, common/math/outer_dn.c)
 * per shard. The shard-servers do not change: what they apply depends on the rule's pseudo-gradient,
 *   - plain: Δ = start - params, the worker's own drift from where it started (delta.c reads la);
 *   - rebase: Δ = base - params, so that the rebased g' = θ_now - params pulls the current version towards
 *     the worker's result, which was trained from nearer to θ_now.
 * Everything is a function of versions recorded in Redis (the submit events: base and place of every
 * submission), so tests/tools/ref_async recomputes each start and the run's parameters bit for bit.
 *
 * Host memory: la, an fp32 copy of the parameters, holds each fragment's start from the get that aimed it
 * until the next successful one; la_base, an fp32 copy of the largest fragment, holds the base of the
 * submission out (prev of the formula once its get has overwritten base). Both are needed: a submission
 * that fails (DL_FAIL: training goes on, round.c) leaves the start in la, so the next Δ is measured from
 * where the worker began, across both windows (tests/it_async_lookahead_failed.sh); a start overwritten
 * by the base would add the lookahead's offset to that Δ. (An async run has one submission out at a
 * time: streaming.c.) With device hooks the trainer's parameters take the start through the load hook,
 * and the device's snapshot holds what Δ is measured from (the start for plain, base for rebase), so a
 * CUDA worker sends the same bytes as a host one. Not with Streaming's mix (fragment alpha > 0), refused
 * at open. After any other change of params (a stale round's fetch, a reset, a new registration)
 * params.c clears la_on and the next interval starts from base, as without the setting (a process group's
 * exchange too). A process group's ranks each aim the whole fragment, not only the part they move: after
 * the group's exchange every rank holds every shard's base and version, so all compute the same start
 * (group.c, take_round). */
#include <inttypes.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "internal.h"
#include "math/outer_dn.h"

/* The shards of fragment f whose start is aimed: all of them, also on a process group's rank, which moves
 * only its part of them but holds every shard's base and version after the group's exchange, so that every
 * rank computes the same start of the whole fragment (group.c) and measures its part's Δ from it. */
static int first_of(const diloco *d, int f)
{
    return d->rc.frag_bounds[f];
}

static int last_of(const diloco *d, int f)
{
    return d->rc.frag_bounds[f + 1];
}

/* The largest fragment's parameters: la_base's length. */
static size_t largest_fragment(const diloco *d)
{
    size_t most = 0;
    for (int f = 0; f < d->rc.nfragments; f++) {
        size_t n = (size_t)(d->rc.shard_bounds[last_of(d, f)] - d->rc.shard_bounds[first_of(d, f)]);
        if (n > most) most = n;
    }
    return most;
}

int lookahead_alloc(diloco *d, char *err, size_t errlen)
{
    if (d->rc.async_lookahead <= 0) return 0;
    if (d->o.fragment_alpha > 0) {
        /* (a rebase run has it unless its init said otherwise: the user may never have asked for it) */
        int dflt = runconf_rebase(&d->rc) && d->rc.async_lookahead == (float)ASYNC_REBASE_LOOKAHEAD;
        err_set(err, errlen,
                "run '%s' has --async-lookahead %g%s, which does not combine with a fragment alpha (%g): leave "
                "--fragment-alpha at 0, or make the run with `coordinator init ... --async-lookahead 0` to "
                "allow an alpha",
                d->run, (double)d->rc.async_lookahead, dflt ? " (the default that comes with --async-rule rebase)" : "",
                d->o.fragment_alpha);
        return -1;
    }
    d->la = dl_host_alloc(d, d->numel * sizeof(float)); /* (loaded through the hooks: the host's kind of memory) */
    d->la_base = malloc((largest_fragment(d) ? largest_fragment(d) : 1) * sizeof(float)); /* (read on the host only) */
    d->la_prev_version = calloc((size_t)d->rc.nshards, sizeof(int64_t));
    d->la_on = calloc((size_t)d->rc.nfragments, sizeof(int));
    if (!d->la || !d->la_base || !d->la_prev_version || !d->la_on) {
        err_set(err, errlen, "out of memory for the lookahead's copies of %zu parameters", d->numel);
        return -1;
    }
    return 0;
}

void lookahead_free(diloco *d)
{
    dl_host_free(d, d->la);
    free(d->la_base);
    free(d->la_prev_version);
    free(d->la_on);
}

/* Before fragment f's submission: its base and versions, into la_base (the get overwrites base; la keeps
 * the start, which a failed submission leaves the next Δ measured from). */
void lookahead_keep(diloco *d, int f)
{
    if (d->la == NULL) return;
    size_t lo = (size_t)d->rc.shard_bounds[first_of(d, f)];
    size_t hi = (size_t)d->rc.shard_bounds[last_of(d, f)];
    memcpy(d->la_base, d->base + lo, (hi - lo) * sizeof(float));
    for (int k = first_of(d, f); k < last_of(d, f); k++) d->la_prev_version[k] = d->shard_version[k];
}

/* After the submission's get: la[f] becomes the start of the next interval, shard by shard. */
void lookahead_aim(diloco *d, int f)
{
    if (d->la == NULL) return;
    size_t first = (size_t)d->rc.shard_bounds[first_of(d, f)];
    for (int k = first_of(d, f); k < last_of(d, f); k++) {
        size_t lo = (size_t)d->rc.shard_bounds[k], n = (size_t)runconf_shard_numel(&d->rc, k);
        int64_t prev = d->la_prev_version[k];
        float c = outer_lookahead_coef(d->rc.async_lookahead, d->seq[k] - prev, d->shard_version[k] - prev);
        outer_lookahead(d->la + lo, d->base + lo, d->la_base + (lo - first), c, n);
        if (k == first_of(d, f))
            log_debug("fragment %d: starting ahead by %.3f x (version %" PRId64 " - version %" PRId64 ")", f, (double)c,
                      d->shard_version[k], prev);
    }
    if (d->la_on[f] && !runconf_rebase(&d->rc)) dl_dev_origin_written(d, f); /* until lookahead_enter loads it */
}

/* With device hooks: params = start; the snapshot = start (plain: Δ = start - params) or base (rebase). */
static int enter_device(diloco *d, size_t lo, size_t n, char *err, size_t errlen)
{
    if (dl_dev_load(d, d->la, lo, n, DILOCO_LOAD_COPY, 0.0, err, errlen) < 0) return -1;
    if (!runconf_rebase(&d->rc)) return 0;
    return dl_dev_load(d, d->base, lo, n, DILOCO_LOAD_SNAPSHOT, 0.0, err, errlen);
}

/* The trainer takes the start (instead of base) for fragment f. */
int lookahead_enter(diloco *d, int f, char *err, size_t errlen)
{
    if (d->la == NULL) return 0;
    size_t lo = (size_t)d->rc.shard_bounds[first_of(d, f)];
    size_t hi = (size_t)d->rc.shard_bounds[last_of(d, f)];
    if (d->dev) {
        if (enter_device(d, lo, hi - lo, err, errlen) < 0) return -1;
    } else {
        memcpy(d->params + lo, d->la + lo, (hi - lo) * sizeof(float));
        if (params_changed(d, lo, hi - lo, err, errlen) < 0) return -1;
    }
    d->la_on[f] = 1;
    return 0;
}
