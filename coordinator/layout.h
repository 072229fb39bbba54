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
/* frag_bounds: nfragments+1 shard indices, as even as possible. -1 when nfragments > nshards. */
int layout_cut_fragments(int nshards, int nfragments, uint64_t *frag_bounds, char *err, size_t errlen);
/* [[name, [shape...], offset], ...] of the tensors as compact JSON (malloc'ed; NULL when out of memory):
 * the `layout` field of dl:{R}:config and of checkpoint metadata. */
char *layout_json(const model_tensor *tensors, int ntensors);
/* The reverse: *tensors one malloc'ed block with the names (free(*tensors)); -1 + err unless json lists
 * tensors of at most 4 dimensions, contiguous from offset 0, covering exactly numel parameters. */
int layout_parse_json(const char *json, uint64_t numel, model_tensor **tensors, int *ntensors, char *err,
                      size_t errlen);
#endif
