/* layout_check.h: bin/worker refuses to join a run whose tensors are not its trainer's.
 *
 * `coordinator init` records the run's layout (dl:{R}:config field `layout`, JSON [[name, [shape...],
 * offset], ...]; a --from-state run's is the state file's). Equal parameter counts are not enough to
 * train the same model: a tensor renamed, reshaped or moved would silently mix unrelated values. */
#ifndef DILOCO_WORKER_LAYOUT_CHECK_H
#define DILOCO_WORKER_LAYOUT_CHECK_H
#include <stddef.h>

#include "model.h"

/* 0 when layout (NULL: a run made before layouts were recorded, nothing to check) lists exactly the
 * tensors t[0..nt) (names, shapes, offsets, in order); else -1 + err naming the first that differs. */
int layout_check(const char *layout, const model_tensor *t, int nt, const char *trainer, char *err, size_t errlen);
#endif
