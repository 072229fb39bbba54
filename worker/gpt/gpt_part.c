/* gpt_part.c: which tokens of the training split one worker trains on, and where its windows start.
 *
 * The training split [0, ntrain) is divided into --num-shards disjoint parts in one of two layouts
 * (--shard-layout): contiguous, part i is [ntrain*i/n, ntrain*(i+1)/n); or stripe, the split is cut
 * into stripes of --shard-stripe tokens and stripe k belongs to part k mod n, so every part samples
 * the whole text (for a book, every part sees every chapter range instead of one worker reading
 * Genesis and another the gospels). A window (seq+1 tokens) never leaves its stripe: the next stripe
 * belongs to another part. With one part both layouts are the whole split, windows anywhere.
 *
 * The trainer draws a window as the r-th of the part's `starts` window starts (gpt_part_start), so
 * random sampling stays a function of its splitmix64 stream; --data-order sequential walks the
 * part's windows in order (gpt_part_next). */
#include "base/util.h"
#include "gpt.h"

static uint64_t stripe_len(const gpt_part *p, uint64_t k)
{
    uint64_t a = k * p->stripe, b = a + p->stripe;
    if (a >= p->ntrain) return 0;
    return (b > p->ntrain ? p->ntrain : b) - a;
}

static int init_contiguous(gpt_part *p, char *err, size_t errlen)
{
    p->lo = p->ntrain * p->index / p->parts;
    p->hi = p->ntrain * (p->index + 1) / p->parts;
    if (p->hi - p->lo < p->seq + 2) {
        err_set(err, errlen,
                "gpt: data shard %d/%d has %llu tokens, fewer than seq+2 = %llu; use a longer token file, fewer "
                "--num-shards or a shorter --seq",
                (int)p->index, (int)p->parts, (unsigned long long)(p->hi - p->lo), (unsigned long long)p->seq + 2);
        return -1;
    }
    p->starts = p->hi - p->lo - p->seq;
    return 0;
}

static int init_stripe(gpt_part *p, char *err, size_t errlen)
{
    uint64_t S = p->stripe, full = p->ntrain / S; /* stripes of S tokens; then maybe a shorter tail */
    p->nfull = full > p->index ? (full - 1 - p->index) / p->parts + 1 : 0;
    uint64_t tail = p->ntrain % S;
    p->tail_start = full * S;
    p->tail_starts = tail > p->seq && full % p->parts == p->index ? tail - p->seq : 0;
    p->starts = p->nfull * (S - p->seq) + p->tail_starts;
    p->lo = p->index * S;
    p->hi = p->ntrain;
    if (p->starts < 2) {
        err_set(err, errlen,
                "gpt: data shard %d/%d (stripes of %llu tokens) holds %llu windows of seq+1 tokens, need at least 2; "
                "use fewer --num-shards or a smaller --shard-stripe",
                (int)p->index, (int)p->parts, (unsigned long long)S, (unsigned long long)p->starts);
        return -1;
    }
    return 0;
}

int gpt_part_init(gpt_part *p, uint64_t ntrain, int num_shards, int shard_index, int layout, int stripe, int seq,
                  char *err, size_t errlen)
{
    *p = (gpt_part){.ntrain = ntrain, .parts = (uint64_t)num_shards, .index = (uint64_t)shard_index,
                    .seq = (uint64_t)seq};
    if (num_shards < 1 || shard_index < 0 || shard_index >= num_shards || seq < 1) {
        err_set(err, errlen, "gpt: need 0 <= shard-index < num-shards");
        return -1;
    }
    if (layout == GPT_SHARD_STRIPE && stripe < seq + 1) {
        err_set(err, errlen, "gpt: --shard-stripe %d is shorter than a window (seq+1 = %d tokens); give at least %d",
                stripe, seq + 1, seq + 1);
        return -1;
    }
    if (layout != GPT_SHARD_STRIPE || num_shards == 1) return init_contiguous(p, err, errlen);
    p->stripe = (uint64_t)stripe;
    return init_stripe(p, err, errlen);
}

uint64_t gpt_part_start(const gpt_part *p, uint64_t r)
{
    if (!p->stripe) return p->lo + r;
    uint64_t per = p->stripe - p->seq, k = r / per;
    if (k < p->nfull) return (p->index + k * p->parts) * p->stripe + r % per;
    return p->tail_start + (r - p->nfull * per);
}

/* the first of this part's stripes after stripe k (k itself when k is the part's and next is 0) */
static uint64_t own_stripe_from(const gpt_part *p, uint64_t k, int next)
{
    uint64_t o = k - k % p->parts + p->index;
    if (o < k || (next && o == k)) o += p->parts;
    return o;
}

uint64_t gpt_part_next(const gpt_part *p, uint64_t *cursor)
{
    uint64_t T = p->seq, c = *cursor;
    if (!p->stripe) {
        if (c < p->lo || c + T + 1 > p->hi) c = p->lo;
    } else {
        uint64_t k = c / p->stripe, own = own_stripe_from(p, k, 0);
        if (own != k || c + T + 1 > k * p->stripe + stripe_len(p, k)) {
            own = own_stripe_from(p, k, 1);
            c = own * p->stripe;
        }
        if (stripe_len(p, own) < T + 1) c = p->index * p->stripe; /* past the end: wrap to the first */
    }
    *cursor = c + T;
    return c;
}
