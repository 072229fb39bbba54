/* checkpoint.h: exporting a run's global state to a safetensors file, and reading it back.
 *
 * A checkpoint is ONE safetensors file (docs/checkpoints.md has the exact format): two fp32 tensors,
 * "params" [numel] (the global parameters of every shard at one common version) and "momentum"
 * [numel] (the outer Nesterov/SGD buffer; zeros and metadata has_momentum "false" before the first
 * outer step), a third one "dn_buffer" [numel] for an async run with Delayed Nesterov (the sum of
 * the submissions since the last momentum step; metadata dn_buffer = N, dn_variant, dn_t = the
 * submissions applied so far, which fixes where the every-N schedule stands), and the run config in
 * "__metadata__" (all strings, as safetensors requires). A JSON
 * side file (same name, ".json" instead of ".safetensors") repeats the metadata for humans and tools.
 * Both are written atomically: temp file in the same folder, fsync, rename, fsync of the folder.
 *
 * Export reads Redis only (dl:{R}:config, dl:{R}:state, dl:{R}:shards and the shard blobs): it
 * rebuilds each shard with common/format/replay.c (snapshot + log replay + digest check) from refs read in
 * one HMGET, so all shards come from the same instant. Each fragment's shards must be at one version (its
 * fragments may differ: Streaming, async); while they are not (a round is being committed) it waits and
 * retries, up to a timeout. A run shut down is taken at whatever versions its shards stay (metadata
 * shard_versions, and dn_t_shards for the Delayed Nesterov schedule: docs/checkpoints.md).
 *
 * `coordinator init --from-checkpoint FILE` reads it back with checkpoint_read (coordinator/init.c).
 * Files: checkpoint.c (export), checkpoint_read.c (reading, on common/format/safetensors.c, which checks
 * every size in the untrusted file), checkpoint_cmd.c (`coordinator checkpoint save|show`). */
#ifndef DILOCO_CHECKPOINT_H
#define DILOCO_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#include "redis/rconn.h"

#define CKPT_FORMAT "rediloco-checkpoint"
#define CKPT_FORMAT_VERSION "1"
#define CKPT_DEFAULT_TIMEOUT_MS 60000

typedef struct checkpoint {
    uint64_t numel;
    float *params; /* numel fp32 (NULL when read without data) */
    float *mom;    /* numel fp32, zeros when !has_mom (NULL when read without data) */
    int has_mom;
    int64_t version;  /* the common shard version the parameters are at (the lowest, when they differ) */
    uint64_t *shard_versions; /* per shard when they differ (metadata shard_versions), else NULL */
    char run[80];     /* the run it was exported from */
    char trainer[32]; /* "quadratic", "gpt" */
    char model[256];  /* as in dl:{R}:config "model", e.g. "--numel 200000" */
    char *layout;     /* metadata "layout" (JSON [[name, [shape], offset], ...]) or NULL; malloc'ed */
    char mode[16];
    int nshards, nfragments, snapshot_every;
    uint64_t *shard_bounds; /* nshards+1 */
    uint64_t seed;
    double outer_lr, outer_momentum;
    int nesterov;
    /* Delayed Nesterov (async runs with --dn-buffer-size): dn_buffer 0 = none */
    int dn_buffer;       /* N */
    char dn_variant[16]; /* "paper" or "forgather" */
    uint64_t dn_t;       /* DN submissions applied up to `version` (the run's dn_t0 + version; the lowest) */
    uint64_t *dn_t_shards; /* per shard when they differ (metadata dn_t_shards), else NULL */
    float *dnbuf;        /* numel fp32 when dn_buffer > 0 (NULL when read without data) */
} checkpoint;

/* Export run `run` to `path` (atomically, plus the JSON side file). Waits up to
 * CKPT_DEFAULT_TIMEOUT_MS for each fragment's shards to be at one version (a run shut down: none). */
int checkpoint_export(rconn *c, const char *run, const char *path, char *err, size_t errlen);
/* The same with a timeout (ms) and the exported version in *version (may be NULL). */
int checkpoint_export_ex(rconn *c, const char *run, const char *path, int timeout_ms, int64_t *version, char *err,
                         size_t errlen);
/* Export to dir/checkpoint-<version>.safetensors (+ .json), then delete all but the newest `keep`
 * checkpoint-*.safetensors of dir (keep <= 0: delete none). The written path goes to path_out (may be
 * NULL). Exporting a version that is already there rewrites it (same bytes). This is what
 * `coordinator serve --save-every N --save-dir DIR [--keep K]` calls every N committed rounds. */
int checkpoint_save_dir(rconn *c, const char *run, const char *dir, int keep, int timeout_ms, char *path_out,
                        size_t path_cap, int64_t *version, char *err, size_t errlen);

/* The JSON side file of path: "x.safetensors" -> "x.json", any other name -> name + ".json". */
void checkpoint_side_path(const char *path, char *out, size_t cap);

/* Read and validate a checkpoint written by checkpoint_export: our format marker, every tensor F32
 * of shape [numel] (params, momentum, and dn_buffer when the metadata has dn_buffer > 0), offsets
 * inside the file without overlap, no trailing bytes, finite values, the recorded XXH3 digests.
 * Any file is safe to give: a malformed one (sizes that overflow, tensors outside the data) is an
 * error with a message, never a crash.
 * with_data 0 reads the header only (params, mom and dnbuf stay NULL). Free with checkpoint_free. */
int checkpoint_read(const char *path, int with_data, checkpoint *ck, char *err, size_t errlen);
void checkpoint_free(checkpoint *ck);

/* Whether path names a file this process can read: 0, or -1 with why in err (strerror's text, or "is a
 * directory"). A FILE that is not one is a usage error (exit 2: a typo in the path), unlike a file that
 * opens and is not a valid checkpoint (1; docs/checkpoints.md, "Exit status"). */
int checkpoint_file_readable(const char *path, char *err, size_t errlen);

/* `coordinator checkpoint save|show ...` */
int cmd_checkpoint(int argc, char **argv);
#endif
