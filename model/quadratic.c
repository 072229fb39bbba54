/* quadratic.c: layout and initial parameters of the protocol-test problem (see model.h; the
 * trainer that minimises it is worker/trainers/quadratic.c). */
#include "model.h"

#include "base/util.h"

model_tensor quadratic_tensor(size_t numel)
{
    return (model_tensor){.name = "x", .ndim = 1, .shape = {numel}, .offset = 0, .numel = numel};
}

void quadratic_init_params(uint64_t seed, float *params, size_t n)
{
    uint64_t s = seed ^ 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) params[i] = 2.0f * rng_uniform(&s) - 1.0f;
}
