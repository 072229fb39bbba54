/* test_adamw_noise: why tests/test_cuda_step.c checks the GPU's AdamW step against the CPU's AdamW fed
 * the GPU's own gradients, shown on the CPU alone (issue 27; no GPU needed).
 *
 * On an H200 the CUDA GPT's loss, probabilities and gradients agreed with the CPU's to rel <= 1e-6, yet
 * the parameters after the second AdamW step differed by "update rel 1.1e-4" and after three trainer
 * steps by 2.9e-3. The cause is AdamW itself: each element's update is lr * m_hat / (sqrt(v_hat) + eps),
 * normalised by that element's own gradient scale, so an error that is small against the tensor's
 * largest gradient (how tc_relerr measures it) becomes an error against the element's own, and where
 * successive gradients of an element change sign, m = b1 m + (1 - b1) g cancels and divides a tiny
 * difference by sqrt(v): the relative error of the update is the gradient's error over |m|.
 *
 * Here the same CPU model is stepped twice from the same weights, once with its gradients and once with
 * the gradients plus noise of rel 1e-6 (uniform, up to 1e-6 of each tensor's largest gradient, on the
 * elements whose gradient is not exactly 0: what two correct fp32 implementations summing in another
 * order differ by). The model and its batch are test_cuda_step's first case. Asserted:
 *   - without noise the two runs are bit-identical (the measure is not spurious);
 *   - with it (rel 1e-7 and 1e-6), the update differs by more than 10x the gradients' rel at the second
 *     step, on an element whose gradient is small against its tensor's largest: the old criterion of
 *     test_cuda_step measured Adam's amplification, not the GPU;
 *   - after three steps with the weights drifting apart (test_cuda_step's old trainer-level comparison,
 *     2.9e-3 on the H200) the updates differ by more than 1e-3, in the largest element and in the
 *     relative L2 norm alike: no limit on that comparison is both strict and safe, so test_cuda_step
 *     replays each AdamW step of the CUDA trainer on the CPU from the trainer's own gradients instead. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.h"
#include "gpt/gpt.h"

#define LR 1e-3
#define B1 0.9
#define B2 0.95

/* g += rel * max|g of the tensor| * U(-1, 1), tensor by tensor, where g != 0: an exact zero (the row of
 * a token not in the batch) is a zero on every backend */
static void add_noise(float *g, const model_tensor *t, int nt, double rel, uint64_t seed)
{
    for (int k = 0; k < nt; k++) {
        float *x = g + t[k].offset;
        double gmax = 0;
        for (size_t i = 0; i < t[k].numel; i++)
            if (fabs(x[i]) > gmax) gmax = fabs(x[i]);
        for (size_t i = 0; i < t[k].numel; i++)
            if (x[i] != 0) x[i] += (float)(rel * gmax * (2.0 * tc_u01(&seed) - 1.0));
    }
}

/* ||a - b||_2 / ||b||_2 of the updates a - p0, b - p0 */
static double update_l2(const float *pa, const float *pb, const float *p0, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double ua = (double)pa[i] - p0[i], ub = (double)pb[i] - p0[i];
        d += (ua - ub) * (ua - ub);
        s += ub * ub;
    }
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

typedef struct {
    gpt_config c;
    model_tensor *t;
    int nt;
    size_t n;
    gpt_model *m;
    int *inp, *tgt;
    float *p[2], *g[2], *mo[2], *v[2], *p0; /* run 0: the gradients; run 1: with noise */
} pair;

static void pair_init(pair *s)
{
    char err[256];
    s->c = (gpt_config){.layers = 2, .heads = 4, .dim = 64, .ctx = 64, .vocab = 97}; /* test_cuda_step's */
    assert_int_equal(gpt_layout(&s->c, &s->t, &s->nt, &s->n, err, sizeof err), 0);
    s->m = gpt_model_create(&s->c, 4, 50, 1, err, sizeof err);
    assert_non_null(s->m);
    s->inp = tc_randint(200, s->c.vocab, 11);
    s->tgt = tc_randint(200, s->c.vocab, 12);
    for (int r = 0; r < 2; r++) {
        s->p[r] = malloc(s->n * 4);
        s->g[r] = malloc(s->n * 4);
        s->mo[r] = calloc(s->n, 4);
        s->v[r] = calloc(s->n, 4);
        assert_int_equal(gpt_init_params(&s->c, 7, s->p[r], s->n, err, sizeof err), 0);
    }
    s->p0 = malloc(s->n * 4);
}

static void pair_free(pair *s)
{
    for (int r = 0; r < 2; r++) {
        free(s->p[r]);
        free(s->g[r]);
        free(s->mo[r]);
        free(s->v[r]);
    }
    free(s->p0);
    free(s->inp);
    free(s->tgt);
    free(s->t);
    gpt_model_free(s->m);
}

/* One step of both runs, each on its own weights: forward + backward, run 1's gradients get the noise,
 * clip to 1, AdamW (test_cuda_step's settings). Returns the gradients' rel (tc_relerr). */
static double pair_step(pair *s, long step, double rel)
{
    for (int r = 0; r < 2; r++) {
        gpt_forward(s->m, s->p[r], s->inp, s->tgt);
        gpt_backward(s->m, s->p[r], s->g[r]);
    }
    add_noise(s->g[1], s->t, s->nt, rel, 100 + (uint64_t)step);
    double ge = tc_relerr(s->g[1], s->g[0], s->n);
    for (int r = 0; r < 2; r++) {
        gpt_clip_grad_norm(s->g[r], s->n, 1.0, 1);
        gpt_adamw_step(s->t, s->nt, s->p[r], s->g[r], s->mo[r], s->v[r], step, LR, B1, B2, 1e-8, 0.1, 1);
    }
    return ge;
}

/* the element of the worst update difference among those tc_update_err compares: its |g| over its
 * tensor's largest |g| (run 0), to show that the worst is a small gradient Adam scaled to a full step */
static double worst_gscale(const pair *s)
{
    double worst = -1, scale = 0, all = 0;
    for (size_t i = 0; i < s->n; i++)
        if (fabs(s->g[0][i]) > all) all = fabs(s->g[0][i]);
    for (int k = 0; k < s->nt; k++) {
        const float *g = s->g[0] + s->t[k].offset;
        double gmax = 0;
        for (size_t i = 0; i < s->t[k].numel; i++)
            if (fabs(g[i]) > gmax) gmax = fabs(g[i]);
        for (size_t i = 0; i < s->t[k].numel; i++) {
            size_t j = s->t[k].offset + i;
            double d = fabs((double)s->p[1][j] - s->p[0][j]);
            if (fabs(g[i]) >= 1e-5 * all && d > worst) {
                worst = d;
                scale = fabs(g[i]) / gmax;
            }
        }
    }
    return scale;
}

/* test_cuda_step's old model-level measure: two steps, the second from the same weights again */
static double model_level(double rel, double *gscale)
{
    pair s;
    pair_init(&s);
    double ue = 0;
    for (long step = 1; step <= 2; step++) {
        memcpy(s.p0, s.p[0], s.n * 4);
        memcpy(s.p[1], s.p[0], s.n * 4);
        double ge = pair_step(&s, step, rel);
        size_t skipped = 0;
        ue = tc_update_err(s.p[1], s.p[0], s.p0, s.g[0], s.n, &skipped);
        *gscale = worst_gscale(&s);
        printf(" noise %.0e, step %ld: gradients rel %.3g -> AdamW update rel %.3g (%zu of %zu skipped); the "
               "worst element's |g| is %.3g of its tensor's largest\n",
               rel, step, ge, ue, skipped, s.n, *gscale);
        assert_true(ge <= rel * 1.1);
    }
    pair_free(&s);
    return ue;
}

static void test_model_level(void **state)
{
    (void)state;
    double gscale;
    assert_true(model_level(0, &gscale) == 0); /* same gradients: the same bytes */
    double u7 = model_level(1e-7, &gscale);
    assert_true(u7 > 10 * 1e-7); /* amplified: no strict limit holds for updates of noisy gradients */
    double u6 = model_level(1e-6, &gscale);
    printf("gradients at rel 1e-6 give AdamW updates at rel %.3g (%.0fx); at rel 1e-7, %.3g (%.0fx)\n", u6, u6 / 1e-6,
           u7, u7 / 1e-7);
    assert_true(u6 > 10 * 1e-6);
    assert_true(gscale < 0.1); /* on an element with a small gradient, scaled up to a full step */
}

/* test_cuda_step's old trainer-level measure: three steps, each run on its own weights */
static void test_trainer_level(void **state)
{
    (void)state;
    pair s;
    pair_init(&s);
    memcpy(s.p0, s.p[0], s.n * 4);
    for (long step = 1; step <= 3; step++) pair_step(&s, step, 1e-6);
    double umax = 0, dmax = 0;
    for (size_t i = 0; i < s.n; i++) {
        double d = fabs((double)s.p[1][i] - s.p[0][i]), a = fabs((double)s.p[0][i] - s.p0[i]);
        if (d > dmax) dmax = d;
        if (a > umax) umax = a;
    }
    double l2 = update_l2(s.p[1], s.p[0], s.p0, s.n);
    printf("three steps, gradients at rel 1e-6 each: update rel (max) %.3g, relative L2 %.3g\n", dmax / umax, l2);
    assert_true(dmax / umax > 1e-3);
    assert_true(l2 > 1e-3);
    pair_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_level),
        cmocka_unit_test(test_trainer_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
