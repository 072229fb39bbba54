/* quadratic.c: the protocol-test trainer (see quadratic.h). */
#include "quadratic.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/util.h"

typedef struct quadratic {
    trainer t;
    quadratic_options o;
    float *a, *c; /* curvature and target of this worker's problem */
    float *m, *v; /* AdamW moments */
    uint64_t step;
    model_tensor tensor;
} quadratic;

void quadratic_options_default(quadratic_options *o)
{
    memset(o, 0, sizeof *o);
    o->lr = 0.01f;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->weight_decay = 0.0f;
}

/* One AdamW step (torch.optim.AdamW semantics) on the gradient of f_w. */
static int quadratic_step(trainer *t, trainer_stats *out, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    quadratic *q = (quadratic *)t;
    const quadratic_options *o = &q->o;
    q->step++;
    float bc1 = (float)(1.0 - pow(o->beta1, (double)q->step));
    float bc2 = (float)(1.0 - pow(o->beta2, (double)q->step));
    double loss = 0;
    float *x = t->params;
    for (size_t i = 0; i < o->numel; i++) {
        float diff = x[i] - q->c[i];
        float g = q->a[i] * diff; /* n * df/dx_i: Adam does not care about the 1/n */
        loss += 0.5 * (double)q->a[i] * (double)diff * (double)diff;
        x[i] -= o->lr * o->weight_decay * x[i];
        q->m[i] = o->beta1 * q->m[i] + (1.0f - o->beta1) * g;
        q->v[i] = o->beta2 * q->v[i] + (1.0f - o->beta2) * g * g;
        float mhat = q->m[i] / bc1, vhat = q->v[i] / bc2;
        x[i] -= o->lr * mhat / (sqrtf(vhat) + o->eps);
    }
    out->loss = loss / (double)o->numel;
    out->eval_loss = -1;
    out->tokens = q->step;
    return 0;
}

/* Validation loss: the expected loss on the problem of a worker not seen yet (a ~ U[0.5, 1.5), c ~
 * U[-1, 1) independent: E[a (x - c)^2] = x^2 + 1/3), the same for every worker and evaluator. */
static int quadratic_evaluate(trainer *t, double *loss, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    double sum = 0;
    for (size_t i = 0; i < t->numel; i++) sum += 0.5 * ((double)t->params[i] * (double)t->params[i] + 1.0 / 3.0);
    *loss = sum / (double)t->numel;
    return 0;
}

static void quadratic_destroy(trainer *t)
{
    quadratic *q = (quadratic *)t;
    if (!q) return;
    free(q->a);
    free(q->c);
    free(q->m);
    free(q->v);
    free(t->params);
    free(q);
}

/* The worker's own problem, from the run seed and a hash of its id. */
static void make_problem(quadratic *q)
{
    const char *id = q->o.worker_id ? q->o.worker_id : "";
    uint64_t s = q->o.seed ^ XXH3_64bits(id, strlen(id));
    for (size_t i = 0; i < q->o.numel; i++) {
        q->a[i] = 0.5f + rng_uniform(&s);
        q->c[i] = 2.0f * rng_uniform(&s) - 1.0f;
    }
}

trainer *quadratic_trainer_create(const quadratic_options *o, char *err, size_t errlen)
{
    if (o->numel == 0) {
        err_set(err, errlen, "quadratic trainer needs a parameter count");
        return NULL;
    }
    quadratic *q = calloc(1, sizeof *q);
    if (!q) goto oom;
    q->o = *o;
    q->a = malloc(o->numel * sizeof(float));
    q->c = malloc(o->numel * sizeof(float));
    q->m = calloc(o->numel, sizeof(float));
    q->v = calloc(o->numel, sizeof(float));
    q->t.params = calloc(o->numel, sizeof(float));
    if (!q->a || !q->c || !q->m || !q->v || !q->t.params) goto oom;
    make_problem(q);
    q->tensor = quadratic_tensor(o->numel);
    q->t.name = "quadratic";
    q->t.numel = o->numel;
    q->t.tensors = &q->tensor;
    q->t.ntensors = 1;
    q->t.step = quadratic_step;
    q->t.evaluate = quadratic_evaluate;
    q->t.destroy = quadratic_destroy;
    q->t.impl = q;
    return &q->t;
oom:
    err_set(err, errlen, "out of memory for a quadratic problem of %zu parameters", o->numel);
    quadratic_destroy(q ? &q->t : NULL);
    return NULL;
}
