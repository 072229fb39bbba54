/* quadratic.h: the built-in protocol-test trainer.
 *
 * Each worker minimises its own separable least-squares problem
 *     f_w(x) = 1/(2n) * sum_i a_wi (x_i - c_wi)^2,   a_wi in [0.5, 1.5), c_wi in [-1, 1)
 * drawn from (run seed, worker id), with AdamW (validation loss: the expected f of a worker not seen
 * yet). It is cheap (O(n) per step), deterministic, and its
 * optimum differs per worker, so averaging pseudo-gradients really matters. The exactness tests
 * replay it in-process (tests/tools/ref_quadratic.c) to check the distributed run bit for bit. */
#ifndef DILOCO_QUADRATIC_H
#define DILOCO_QUADRATIC_H
#include <stddef.h>
#include <stdint.h>

#include "trainer.h"

typedef struct quadratic_options {
    size_t numel;
    uint64_t seed;         /* the run's seed */
    const char *worker_id; /* mixes into the problem: every worker has its own */
    float lr, beta1, beta2, eps, weight_decay;
} quadratic_options;

void quadratic_options_default(quadratic_options *o);
/* Its layout and a run's initial parameters are model/model.h's (quadratic_tensor,
 * quadratic_init_params). */
trainer *quadratic_trainer_create(const quadratic_options *o, char *err, size_t errlen);
#endif
