/* runconf.h: a run's immutable configuration as read from dl:{R}:config.
 *
 * Workers, shard-servers and the coordinator all need the same facts about a run: how many
 * parameters, how they are cut into shards and fragments, the mode. The coordinator writes them once
 * at init; everyone else reads them with runconf_load (redis/runconf_load.h, which checks the
 * library version on the way) and this file parses and checks them without knowing Redis. */
#ifndef DILOCO_RUNCONF_H
#define DILOCO_RUNCONF_H
#include <stddef.h>
#include <stdint.h>

#define RUNCONF_MAX_SHARDS 4096
#define RUNCONF_MAX_FRAGMENTS 256
#define RUNCONF_MAX_REPLICAS 64
#define ASYNC_LOOKAHEAD_MAX 2 /* --async-lookahead: at most twice the expected progress ahead */
#define ASYNC_REBASE_LOOKAHEAD 0.5 /* --async-lookahead of an --async-rule rebase run unless told otherwise */

typedef struct runconf {
    char run[80];
    uint64_t numel;
    int nshards;
    uint64_t *shard_bounds; /* nshards+1 element offsets: shard k is [bounds[k], bounds[k+1]) */
    int nfragments;
    int *frag_bounds;           /* nfragments+1 shard indices: fragment f is shards [fb[f], fb[f+1]) */
    int async;                  /* mode "async" */
    int snapshot_every;         /* versions between durable snapshots (the log covers the rest) */
    int dn_buffer;              /* async: Delayed Nesterov every dn_buffer submissions (0 = off) */
    int dn_variant;             /* DN_PAPER or DN_FORGATHER (outer_dn.h) */
    uint64_t dn_t0;             /* DN submissions before version 0 (a run resumed from a checkpoint: its
                                 count there), so the submission turning version v into v+1 is number
                                 dn_t0 + v + 1 and the every-N schedule carries on across the resume */
    uint64_t *dn_t0_shard;      /* per shard, when a resumed run's shards stood at different points of
                                 that schedule (a checkpoint of shards at different versions: config
                                 dn_t0_shards); NULL: dn_t0 for every shard. Read it with runconf_dn_t0 */
    int weight_tokens;          /* --weight-by tokens: pseudo-gradients weighted by the tokens behind them */
    uint64_t weight_ref_tokens; /* async: a submission of this many tokens gets weight 1 */
    int stale_weight;           /* async: STALE_W_* (outer_dn.h), --staleness-weight (none for older runs) */
    int64_t stale_ref;          /* async: the staleness that keeps weight 1 (--staleness-ref) */
    int async_rule;             /* async: ASYNC_RULE_* (outer_dn.h), --async-rule (plain for older runs) */
    int64_t rebase_window;      /* async rebase: the staleness bound K; servers hold the last K versions */
    float rebase_fraction;      /* async rebase: a in g + a (θ_now - θ_base), --rebase-fraction (1) */
    float async_lookahead;      /* async: G of the workers' start ahead, --async-lookahead (0: off) */
    int compress;               /* codec of pseudo-gradients (coordinator init --compress): a blob dtype,
                                 BLOB_BF16 by default (codec.h) */
    double topk_density;        /* --compress topk: the entries kept per chunk (--topk-density) */
    float topk_beta;            /* --compress topk: the worker accumulator's decay (--topk-beta) */
    unsigned topk_bits;         /* --compress topk: bits a kept value (--topk-bits; 2 for older runs) */
    int download_update;        /* --download update: gets are answered with the round's averaged
                                 pseudo-gradient in the codec, workers apply the outer step themselves */
    int min_replicas;           /* a commit is durable once WAIT says this many replicas have it (0 = at once) */
    uint64_t seed;
    uint64_t created_ms; /* when dl_init made the run (Redis time; 0: not recorded): which making of a run
                            under this name a process loaded, since `init --force` makes it again */
    char trainer[32];    /* what the layout came from: "quadratic", "gpt" */
    char secret[80];     /* the run's data-plane secret ("" for runs made without one) */
    char *layout;        /* the run's tensors, JSON [[name, [shape], offset], ...] (malloc'ed; NULL for a
                                 run made before layouts were recorded) */
    char model[256];  /* trainer-specific model description, e.g. "layers=2 heads=4 dim=128 ctx=128 vocab=256" */
} runconf;

void runconf_free(runconf *rc);
/* The fields of dl:{R}:config as read: n names and their values, NUL-terminated strings. */
typedef struct runconf_fields {
    const char *const *name, *const *value;
    size_t n;
} runconf_fields;
/* rc's fields from the config's fields (rc->run is left as it is). Every value is checked (bounds that
 * cover numel in order, counts in range); optional fields that do not parse keep their defaults. On
 * error rc may hold allocations: runconf_free. */
int runconf_parse(const runconf_fields *f, runconf *rc, char *err, size_t errlen);
/* Whether a commit scales each pseudo-gradient (--weight-by tokens, or an async --staleness-weight). */
int runconf_weighted(const runconf *rc);
/* Whether an async commit rebases each submission on the version it is applied to (--async-rule rebase). */
int runconf_rebase(const runconf *rc);
/* Whether a push in this dtype is the run's codec: a bf16 run also takes fp32 (worker --no-bf16). */
int runconf_accepts_dtype(const runconf *rc, int dtype);
/* The DN submissions before version 0 of shard k: dn_t0_shard[k], or dn_t0. */
uint64_t runconf_dn_t0(const runconf *rc, int shard);
/* Numbers of one shard / fragment. */
uint64_t runconf_shard_numel(const runconf *rc, int shard);
int runconf_fragment_of_shard(const runconf *rc, int shard);
/* Comma list "a,b,c" of n+1 integers, as stored in the config hash. */
int runconf_format_bounds_u64(const uint64_t *b, int n, char *buf, size_t cap);
int runconf_parse_bounds_u64(const char *s, uint64_t **out, int *n, char *err, size_t errlen);
/* "a,b,...": exactly n counts (digits only, each at most INT64_MAX) into a new array; -1 if not. */
int runconf_parse_counts(const char *s, int n, uint64_t **out);
/* The n counts of v as "a,b,...", a new string (NULL when out of memory). */
char *runconf_format_counts(const uint64_t *v, int n);
#endif
