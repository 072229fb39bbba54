/* layout.h: cutting the flat parameter vector into shards and fragments.
 *
 * Shards are contiguous and balanced by size; a cut snaps to the nearest tensor boundary when one is
 * within a quarter of a shard, so shards (and so Streaming fragments, which are whole shards) follow
 * layers whenever sizes allow. Fragments are F contiguous runs of whole shards. */
#ifndef DILOCO_LAYOUT_H
#define DILOCO_LAYOUT_H
#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* bounds: nshards+1 offsets. -1 + err when nshards is 0 or larger than numel. */
int layout_cut_shards(const model_tensor *tensors, int ntensors, uint64_t numel, int nshards, uint64_t *bounds,
                      char *err, size_t errlen);
/* Sharded process groups (FSDP, fully_shard: diloco.h "Sharded groups"): add to bounds (nshards+1 offsets,
 * room for RUNCONF_MAX_SHARDS+1) every tensor boundary and, for each R of ranks[0..nranks), every
 * boundary between two ranks' dim-0 chunks of a tensor (model_dim0_chunk), so that each rank of a group
 * of any of those sizes holds whole shards. *nshards grows to the new count; -1 + err when that is over
 * RUNCONF_MAX_SHARDS. */
int layout_cut_fsdp(const model_tensor *tensors, int ntensors, const int *ranks, int nranks, uint64_t *bounds,
                    int *nshards, char *err, size_t errlen);
/* frag_bounds: nfragments+1 shard indices, as even as possible. -1 when nfragments > nshards. */
int layout_cut_fragments(int nshards, int nfragments, uint64_t *frag_bounds, char *err, size_t errlen);
/* Sharded groups in Streaming runs: frag_bounds cut only where a tensor starts (each fragment whole tensors,
 * so every rank of a sharded group holds a dim-0 chunk of it), as even by parameters as those cuts allow.
 * -1 + err when the model has fewer tensors than nfragments. */
int layout_cut_fragments_at_tensors(const model_tensor *tensors, int ntensors, const uint64_t *shard_bounds,
                                    int nshards, int nfragments, uint64_t *frag_bounds, char *err, size_t errlen);
/* [[name, [shape...], offset], ...] of the tensors as compact JSON (malloc'ed; NULL when out of memory):
 * the `layout` field of dl:{R}:config and of checkpoint metadata. */
char *layout_json(const model_tensor *tensors, int ntensors);
/* The reverse: *tensors one malloc'ed block with the names (free(*tensors)); -1 + err unless json lists
 * tensors of at most 4 dimensions, contiguous from offset 0, covering exactly numel parameters. */
int layout_parse_json(const char *json, uint64_t numel, model_tensor **tensors, int *ntensors, char *err,
                      size_t errlen);
#endif
