/* test_cuda_step: whole training steps of the CUDA backend against the CPU backend on the same
 * weights and batch (TF32 off):
 *   - model level, for two steps: loss, probabilities and the clip norm within rel 1e-4 (TC_LIMIT),
 *     every gradient tensor within rel 1e-5 (GRAD_LIMIT: an H200 measured <= 1e-6), and the AdamW step
 *     checked on its own, bit for bit: the CPU's gpt_adamw_step fed the GPU's own clipped gradients,
 *     moments and parameters must give the GPU's new parameters and moments exactly (both are the same
 *     sequence of correctly rounded fp32 operations: no FMA on either side, see adamw_k);
 *   - the GPU result is bit-identical when the step is repeated (no atomics);
 *   - trainer level (trainer.h, gpt_trainer_create with --device cpu / cuda): losses, eval loss and
 *     the parameters after a few steps (relative L2 norm of the update, see test_trainer),
 *     params_changed (DiLoCo replacing a slice of the host buffer is seen by the next device step),
 *     and a checkpoint resume that is bit-identical.
 * Why the AdamW step is not compared on the two backends' own gradients (as it was until issue 27:
 * "update rel 1.1e-4" on an H200): Adam divides each element's first moment by its own gradient scale,
 * so gradients that agree to rel 1e-6 of a tensor's largest give updates that differ by 1e-4 where the
 * moment cancels; tests/test_adamw_noise.c shows it on the CPU alone.
 * Exits 77 (skipped) without a CUDA device or without the CUDA build. NOT RUN since that change: no GPU
 * on the machine it was written on (it compiles there). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_common.h"
#include "gpt/gpt.h"

#ifdef DILOCO_HAVE_CUDA

#define GRAD_LIMIT 1e-5

/* The GPU's AdamW step (gpt_cuda_adamw) against the CPU's gpt_adamw_step on the GPU's own state: its
 * clipped gradients, moments and parameters are read back, the CPU steps them, the GPU steps, and the
 * new parameters and moments must be the same bytes. Leaves the GPU stepped. */
static void adamw_same_gradients(gpt_cuda *gpu, const model_tensor *t, int nt, size_t n, long step)
{
    char err[512];
    float *p = malloc(n * 4), *g = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    float *pg = malloc(n * 4), *mg = malloc(n * 4), *vg = malloc(n * 4);
    assert_int_equal(gpt_cuda_get_params(gpu, p, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_get_grads(gpu, g, err, sizeof err), 0); /* clipped by gpt_cuda_clip */
    assert_int_equal(gpt_cuda_get_moments(gpu, m, v, err, sizeof err), 0);
    gpt_adamw_step(t, nt, p, g, m, v, step, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1);
    assert_int_equal(gpt_cuda_adamw(gpu, step, 1e-3, 0.9, 0.95, 1e-8, 0.1, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_get_params(gpu, pg, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_get_moments(gpu, mg, vg, err, sizeof err), 0);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff += memcmp(&p[i], &pg[i], 4) || memcmp(&m[i], &mg[i], 4) || memcmp(&v[i], &vg[i], 4);
    printf("  AdamW on the GPU's own gradients: %zu of %zu elements differ from the CPU's step (want 0)\n", diff, n);
    assert_true(diff == 0);
    free(p);
    free(g);
    free(m);
    free(v);
    free(pg);
    free(mg);
    free(vg);
}

static void model_case(const gpt_config *c, int B, int T)
{
    char err[512];
    model_tensor *t;
    int nt;
    size_t n;
    assert_int_equal(gpt_layout(c, &t, &nt, &n, err, sizeof err), 0);
    float *p_cpu = malloc(n * 4), *p0 = malloc(n * 4);
    float *g_cpu = calloc(n, 4), *g_gpu = calloc(n, 4), *m = calloc(n, 4), *v = calloc(n, 4);
    assert_int_equal(gpt_init_params(c, 7, p_cpu, n, err, sizeof err), 0);
    int N = B * T, V = c->vocab;
    int *inp = tc_randint((size_t)N, V, 11), *tgt = tc_randint((size_t)N, V, 12);
    float *probs = malloc((size_t)N * V * 4);

    gpt_model *cpu = gpt_model_create(c, B, T, 1, err, sizeof err);
    assert_non_null(cpu);
    gpt_cuda *gpu = gpt_cuda_create(c, B, T, 0, err, sizeof err);
    if (!gpu) fprintf(stderr, "%s\n", err);
    assert_non_null(gpu);
    assert_int_equal(gpt_cuda_set_params(gpu, p_cpu, 0, n, err, sizeof err), 0);
    printf("model L%d H%d C%d T%d V%d, batch %d seq %d, %zu parameters\n", c->layers, c->heads, c->dim, c->ctx,
           c->vocab, B, T, n);

    for (int step = 1; step <= 2; step++) {
        memcpy(p0, p_cpu, n * 4);
        float loss_cpu = gpt_forward(cpu, p_cpu, inp, tgt), loss_gpu = 0;
        assert_int_equal(gpt_cuda_forward(gpu, inp, tgt, &loss_gpu, err, sizeof err), 0);
        double le = fabs((double)loss_gpu - loss_cpu) / fabs(loss_cpu);
        printf(" step %d: loss cpu %.7f gpu %.7f rel %.3g\n", step, loss_cpu, loss_gpu, le);
        assert_true(le <= TC_LIMIT);
        assert_int_equal(gpt_cuda_get_logits(gpu, probs, err, sizeof err), 0);
        double pe = tc_relerr(probs, gpt_model_logits(cpu), (size_t)N * V);
        printf("  probabilities rel %.3g\n", pe);
        assert_true(pe <= TC_LIMIT);

        gpt_backward(cpu, p_cpu, g_cpu);
        assert_int_equal(gpt_cuda_backward(gpu, err, sizeof err), 0);
        assert_int_equal(gpt_cuda_get_grads(gpu, g_gpu, err, sizeof err), 0);
        double worst = 0;
        const char *wname = "";
        for (int k = 0; k < nt; k++) {
            double e = tc_relerr(g_gpu + t[k].offset, g_cpu + t[k].offset, t[k].numel);
            if (!(e <= worst)) {
                worst = e;
                wname = t[k].name;
            }
            if (!(e <= GRAD_LIMIT)) printf("  gradient %s rel %.3g > limit\n", t[k].name, e);
        }
        printf("  gradients: worst tensor %s rel %.3g (limit %g)\n", wname, worst, GRAD_LIMIT);
        assert_true(worst <= GRAD_LIMIT);

        /* determinism: the same forward + backward again gives the same bytes */
        if (step == 1) {
            float *g2 = malloc(n * 4), l2;
            assert_int_equal(gpt_cuda_forward(gpu, inp, tgt, &l2, err, sizeof err), 0);
            assert_int_equal(gpt_cuda_backward(gpu, err, sizeof err), 0);
            assert_int_equal(gpt_cuda_get_grads(gpu, g2, err, sizeof err), 0);
            assert_true(l2 == loss_gpu);
            assert_memory_equal(g2, g_gpu, n * 4);
            printf("  repeated step: bit-identical loss and gradients\n");
            /* profiled (gpt_cuda_set_profile): the same bytes, and GPU time in every phase the step has */
            assert_int_equal(gpt_cuda_set_profile(gpu, 1, err, sizeof err), 0);
            assert_int_equal(gpt_cuda_forward(gpu, inp, tgt, &l2, err, sizeof err), 0);
            assert_int_equal(gpt_cuda_backward(gpu, err, sizeof err), 0);
            assert_int_equal(gpt_cuda_get_grads(gpu, g2, err, sizeof err), 0);
            assert_true(l2 == loss_gpu);
            assert_memory_equal(g2, g_gpu, n * 4);
            const char *names[16];
            double ms[16];
            long steps = 0;
            int np = gpt_cuda_profile(gpu, names, ms, 16, &steps, err, sizeof err);
            assert_true(np >= 9);
            assert_int_equal(steps, 1);
            for (int i = 0; i < np; i++) {
                printf("  profile %-16s %.4f ms\n", names[i], ms[i]);
                int in_step = strcmp(names[i], "weights to bf16") && strcmp(names[i], "clip") &&
                              strcmp(names[i], "adamw"); /* fp32, no clip or AdamW called here */
                assert_true(in_step ? ms[i] > 0 : ms[i] == 0);
            }
            assert_int_equal(gpt_cuda_set_profile(gpu, 0, err, sizeof err), 0);
            assert_int_equal(gpt_cuda_profile(gpu, names, ms, 16, &steps, err, sizeof err), -1);
            free(g2);
        }

        double norm_cpu = gpt_clip_grad_norm(g_cpu, n, 1.0, 1), norm_gpu = 0;
        assert_int_equal(gpt_cuda_clip(gpu, 1.0, &norm_gpu, err, sizeof err), 0);
        double ne = fabs(norm_gpu - norm_cpu) / norm_cpu;
        printf("  grad norm cpu %.7g gpu %.7g rel %.3g\n", norm_cpu, norm_gpu, ne);
        assert_true(ne <= TC_LIMIT);

        adamw_same_gradients(gpu, t, nt, n, step);
        gpt_adamw_step(t, nt, p_cpu, g_cpu, m, v, step, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1);
        /* carry on from identical parameters so step 2 tests the step, not the drift */
        assert_int_equal(gpt_cuda_set_params(gpu, p_cpu, 0, n, err, sizeof err), 0);
    }
    gpt_cuda_free(gpu);
    gpt_model_free(cpu);
    free(t);
    free(p_cpu);
    free(p0);
    free(g_cpu);
    free(g_gpu);
    free(m);
    free(v);
    free(inp);
    free(tgt);
    free(probs);
}

static void test_model_step(void **state)
{
    (void)state;
    gpt_config c = {.layers = 2, .heads = 4, .dim = 64, .ctx = 64, .vocab = 97};
    model_case(&c, 4, 50);
    model_case(&c, 2, 64); /* seq == ctx */
    gpt_config d = {.layers = 1, .heads = 2, .dim = 64, .ctx = 32, .vocab = 3000};
    model_case(&d, 3, 32); /* wide head: 1024-thread cross-entropy blocks */
}

/* ---- trainer level ------------------------------------------------------------------------- */

static void trainer_options(gpt_options *o, int device, const char *ckpt)
{
    gpt_options_default(o);
    o->model = (gpt_config){.layers = 2, .heads = 4, .dim = 64, .ctx = 64, .vocab = 64};
    o->batch = 4;
    o->seq = 48;
    o->warmup_steps = 2;
    o->lr = 1e-3;
    o->eval_every = 3;
    o->eval_batches = 2;
    o->threads = 1;
    o->device = device;
    o->checkpoint_path = ckpt;
}

static trainer *make(int device, const char *ckpt)
{
    gpt_options o;
    trainer_options(&o, device, ckpt);
    char err[512];
    trainer *t = gpt_trainer_create(&o, err, sizeof err);
    if (!t) fprintf(stderr, "%s\n", err);
    assert_non_null(t);
    assert_string_equal(gpt_trainer_device(t), device == GPT_DEVICE_CUDA ? "cuda" : "cpu");
    return t;
}

/* One step of the CUDA trainer b (0-based step s), replayed on the CPU: gpt_adamw_step with the
 * trainer's learning rate for s (warmup, schedule) on b's parameters and moments before the step and
 * its clipped gradients after must give b's parameters (its host buffer) and moments exactly. */
static void step_replayed(trainer *b, long s, trainer_stats *st)
{
    char err[512];
    gpt_options o;
    trainer_options(&o, GPT_DEVICE_CUDA, NULL);
    model_tensor *t;
    int nt;
    size_t n;
    assert_int_equal(gpt_layout(&o.model, &t, &nt, &n, err, sizeof err), 0);
    gpt_cuda *cu = gpt_trainer_cuda(b);
    assert_non_null(cu);
    float *p = malloc(n * 4), *g = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    float *mb = malloc(n * 4), *vb = malloc(n * 4);
    memcpy(p, b->params, n * 4);
    assert_int_equal(gpt_cuda_get_moments(cu, m, v, err, sizeof err), 0);
    assert_int_equal(b->step(b, st, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_get_grads(cu, g, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_get_moments(cu, mb, vb, err, sizeof err), 0);
    gpt_adamw_step(t, nt, p, g, m, v, s + 1, gpt_lr_at(&o, s), o.beta1, o.beta2, o.eps, o.weight_decay, 1);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff += memcmp(&p[i], &b->params[i], 4) || memcmp(&m[i], &mb[i], 4) || memcmp(&v[i], &vb[i], 4);
    printf("trainer step %ld on cuda, AdamW replayed on the CPU from its gradients (lr %.3g): %zu of %zu "
           "elements differ (want 0)\n",
           s + 1, gpt_lr_at(&o, s), diff, n);
    assert_true(diff == 0);
    free(t);
    free(p);
    free(g);
    free(m);
    free(v);
    free(mb);
    free(vb);
}

static void test_trainer(void **state)
{
    (void)state;
    char err[512];
    trainer *a = make(GPT_DEVICE_CPU, NULL), *b = make(GPT_DEVICE_CUDA, NULL);
    assert_null(a->params_changed);
    assert_non_null(b->params_changed);
    assert_int_equal(a->numel, b->numel);
    assert_memory_equal(a->params, b->params, a->numel * 4); /* same init */
    size_t n = a->numel;
    trainer_stats sa, sb;
    for (int s = 0; s < 3; s++) {
        assert_int_equal(a->step(a, &sa, err, sizeof err), 0);
        step_replayed(b, s, &sb);
        double le = fabs(sb.loss - sa.loss) / sa.loss;
        printf("trainer step %d: loss cpu %.7f cuda %.7f rel %.3g\n", s + 1, sa.loss, sb.loss, le);
        assert_true(le <= TC_LIMIT);
        assert_int_equal(sa.tokens, sb.tokens);
    }
    /* eval at step 3 on both */
    assert_true(sa.eval_loss > 0 && sb.eval_loss > 0);
    double ee = fabs(sb.eval_loss - sa.eval_loss) / sa.eval_loss;
    printf("eval loss cpu %.7f cuda %.7f rel %.3g\n", sa.eval_loss, sb.eval_loss, ee);
    assert_true(ee <= TC_LIMIT);
    /* The two trainers' parameters after these steps are not compared: AdamW turns the gradients'
     * rel 1e-6 into updates that differ by ~1e-3 (2.9e-3 on an H200; tests/test_adamw_noise.c), so the
     * device's steps are checked exactly against their CPU replay above, and the losses here. */

    /* params_changed: DiLoCo writes new global values into part of the host buffer, then the whole */
    memcpy(b->params, a->params, n * 4);
    for (size_t i = n / 3; i < n / 2; i++) a->params[i] = b->params[i] = 0.5f * b->params[i];
    assert_int_equal(b->params_changed(b, 0, n, err, sizeof err), 0);
    assert_int_equal(a->step(a, &sa, err, sizeof err), 0);
    assert_int_equal(b->step(b, &sb, err, sizeof err), 0);
    double ce = fabs(sb.loss - sa.loss) / sa.loss;
    printf("after params_changed (whole buffer): loss cpu %.7f cuda %.7f rel %.3g\n", sa.loss, sb.loss, ce);
    assert_true(ce <= TC_LIMIT);
    memcpy(b->params, a->params, n * 4);
    size_t off = n / 4, len = n / 8;
    for (size_t i = off; i < off + len; i++) a->params[i] = b->params[i] = -b->params[i];
    assert_int_equal(b->params_changed(b, off, len, err, sizeof err), 0);
    /* the rest of the device copy may differ from a's by noise: copy it too, then compare the losses */
    assert_int_equal(b->params_changed(b, 0, off, err, sizeof err), 0);
    assert_int_equal(b->params_changed(b, off + len, n - off - len, err, sizeof err), 0);
    assert_int_equal(a->step(a, &sa, err, sizeof err), 0);
    assert_int_equal(b->step(b, &sb, err, sizeof err), 0);
    ce = fabs(sb.loss - sa.loss) / sa.loss;
    printf("after params_changed (three slices): loss cpu %.7f cuda %.7f rel %.3g\n", sa.loss, sb.loss, ce);
    assert_true(ce <= TC_LIMIT);
    assert_int_equal(b->params_changed(b, n, 1, err, sizeof err), -1); /* out of range */
    a->destroy(a);
    b->destroy(b);
}

static void test_checkpoint_resume(void **state)
{
    (void)state;
    char path[] = "/tmp/test_cuda_step_XXXXXX", ck[64], err[512];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    unlink(path);
    snprintf(ck, sizeof ck, "%s.safetensors", path);
    trainer_stats s;
    trainer *u = make(GPT_DEVICE_CUDA, NULL);
    for (int i = 0; i < 4; i++) assert_int_equal(u->step(u, &s, err, sizeof err), 0);
    trainer *a = make(GPT_DEVICE_CUDA, ck);
    for (int i = 0; i < 2; i++) assert_int_equal(a->step(a, &s, err, sizeof err), 0);
    a->destroy(a); /* writes the checkpoint, moments from the device */
    trainer *b = make(GPT_DEVICE_CUDA, ck);
    assert_int_equal(gpt_trainer_steps(b), 2);
    for (int i = 0; i < 2; i++) assert_int_equal(b->step(b, &s, err, sizeof err), 0);
    assert_memory_equal(b->params, u->params, u->numel * 4);
    printf("checkpoint resume on the device: bit-identical to an uninterrupted run\n");
    b->destroy(b);
    u->destroy(u);
    unlink(ck);
}

#endif

int main(void)
{
    cuda_test_require_device("test_cuda_step");
#ifdef DILOCO_HAVE_CUDA
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_step),
        cmocka_unit_test(test_trainer),
        cmocka_unit_test(test_checkpoint_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    return 77;
#endif
}
