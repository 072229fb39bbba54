/* init.h: what `coordinator init`'s two files share: the command line (init_options.c: the flags,
 * their defaults and checks, and the values a --from-checkpoint fills in) and the run it makes
 * (init.c). */
#ifndef DILOCO_COORD_INIT_H
#define DILOCO_COORD_INIT_H

#include "coordinator.h"
#include "model.h"

typedef struct init_args {
    coord_common c;
    long long workers, min_workers, shards, fragments, numel, seed, snapshot_every, dylu_base, min_replicas;
    long long dn_buffer, max_staleness, weight_ref, stale_ref;
    const char *dn_variant, *weight_by, *compress, *download, *stale_weight, *async_rule;
    double outer_lr, outer_momentum, heartbeat_timeout, rebase_fraction, async_lookahead;
    double topk_density, topk_beta; /* --compress topk (codec_sparse.h) */
    long long topk_bits;            /* --compress topk: bits a kept value (codec_topk.h) */
    int nesterov, force, async, dylu;
    const char *trainer;
    gpt_config gpt;
    const char *from_checkpoint;
    const char *from_state;      /* --from-state: version 0 and the layout are this safetensors file's */
    const char *fsdp_ranks_arg;  /* --fsdp-ranks R[,R2...]: shard bounds at the ranks' dim-0 chunks */
    int fsdp_ranks[16], nfsdp_ranks;
    int reset_momentum;          /* --reset-momentum: take only the parameters from the checkpoint */
    int given[64];               /* given[k]: option k of the table was on the command line (checkpoint */
    const char *given_names[64]; /* values fill the rest); given_names[k] is its long name */
    char ck_trainer[32];
    char ck_dn_variant[16];
} init_args;

/* Parse `coordinator init`'s arguments into a: defaults, the flags, then a checkpoint's values for the
 * flags not given. 0 when a is ready, 1 after --help printed the usage, -1 after a message on stderr
 * (a usage error: exit 2), INIT_BAD_FILE after one about a --from-checkpoint file that opens but is not a
 * valid checkpoint (bad data: exit 1, docs/checkpoints.md "Exit status"). */
#define INIT_BAD_FILE (-2)
int parse_init(int argc, char **argv, init_args *a);

#endif
