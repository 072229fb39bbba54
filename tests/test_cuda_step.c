/* test_cuda_step: whole training steps of the CUDA backend against the CPU backend on the same
 * weights and batch (TF32 off):
 *   - model level: loss, probabilities, every gradient tensor, the clip norm and the parameters after
 *     clip + AdamW, for two steps; relative error <= 1e-4 (updates compared where the gradient is
 *     above fp32 noise, see update_err);
 *   - the GPU result is bit-identical when the step is repeated (no atomics);
 *   - trainer level (trainer.h, gpt_trainer_create with --device cpu / cuda): losses, eval loss and
 *     parameters after a few steps, params_changed (DiLoCo replacing a slice of the host buffer is
 *     seen by the next device step), and a checkpoint resume that is bit-identical.
 * Exits 77 (skipped) without a CUDA device or without the CUDA build. */
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

/* max over elements of |u_gpu - u_cpu| / max|u_cpu|, skipping elements whose CPU gradient is below
 * 1e-5 of the tensor's largest: AdamW's first steps are ~lr*sign(g), so a gradient at fp32 noise
 * level may legitimately flip sign between two correct implementations. *skipped counts them. */
static double update_err(const float *p_gpu, const float *p_cpu, const float *p0, const float *g, size_t n,
                         size_t *skipped)
{
    double gmax = 0, umax = 0, num = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(g[i]) > gmax) gmax = fabs(g[i]);
        if (fabs((double)p_cpu[i] - p0[i]) > umax) umax = fabs((double)p_cpu[i] - p0[i]);
    }
    for (size_t i = 0; i < n; i++) {
        if (fabs(g[i]) < 1e-5 * gmax) {
            (*skipped)++;
            continue;
        }
        double d = fabs(((double)p_gpu[i] - p0[i]) - ((double)p_cpu[i] - p0[i]));
        if (!(d <= num)) num = d;
    }
    return umax > 0 ? num / umax : num;
}

static void model_case(const gpt_config *c, int B, int T)
{
    char err[512];
    model_tensor *t;
    int nt;
    size_t n;
    assert_int_equal(gpt_layout(c, &t, &nt, &n, err, sizeof err), 0);
    float *p_cpu = malloc(n * 4), *p_gpu = malloc(n * 4), *p0 = malloc(n * 4);
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
            if (!(e <= TC_LIMIT)) printf("  gradient %s rel %.3g > limit\n", t[k].name, e);
        }
        printf("  gradients: worst tensor %s rel %.3g\n", wname, worst);
        assert_true(worst <= TC_LIMIT);

        /* determinism: the same forward + backward again gives the same bytes */
        if (step == 1) {
            float *g2 = malloc(n * 4), l2;
            assert_int_equal(gpt_cuda_forward(gpu, inp, tgt, &l2, err, sizeof err), 0);
            assert_int_equal(gpt_cuda_backward(gpu, err, sizeof err), 0);
            assert_int_equal(gpt_cuda_get_grads(gpu, g2, err, sizeof err), 0);
            assert_true(l2 == loss_gpu);
            assert_memory_equal(g2, g_gpu, n * 4);
            printf("  repeated step: bit-identical loss and gradients\n");
            free(g2);
        }

        double norm_cpu = gpt_clip_grad_norm(g_cpu, n, 1.0, 1), norm_gpu = 0;
        assert_int_equal(gpt_cuda_clip(gpu, 1.0, &norm_gpu, err, sizeof err), 0);
        double ne = fabs(norm_gpu - norm_cpu) / norm_cpu;
        printf("  grad norm cpu %.7g gpu %.7g rel %.3g\n", norm_cpu, norm_gpu, ne);
        assert_true(ne <= TC_LIMIT);

        gpt_adamw_step(t, nt, p_cpu, g_cpu, m, v, step, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1);
        assert_int_equal(gpt_cuda_adamw(gpu, step, 1e-3, 0.9, 0.95, 1e-8, 0.1, err, sizeof err), 0);
        assert_int_equal(gpt_cuda_get_params(gpu, p_gpu, err, sizeof err), 0);
        size_t skipped = 0;
        double ue = update_err(p_gpu, p_cpu, p0, g_cpu, n, &skipped);
        printf("  AdamW update rel %.3g (%zu of %zu elements with gradients at noise level not compared)\n", ue,
               skipped, n);
        assert_true(ue <= TC_LIMIT);
        /* carry on from identical parameters so step 2 tests the step, not the drift */
        assert_int_equal(gpt_cuda_set_params(gpu, p_cpu, 0, n, err, sizeof err), 0);
    }
    gpt_cuda_free(gpu);
    gpt_model_free(cpu);
    free(t);
    free(p_cpu);
    free(p_gpu);
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

static trainer *make(int device, const char *ckpt)
{
    gpt_options o;
    gpt_options_default(&o);
    o.model = (gpt_config){.layers = 2, .heads = 4, .dim = 64, .ctx = 64, .vocab = 64};
    o.batch = 4;
    o.seq = 48;
    o.warmup_steps = 2;
    o.lr = 1e-3;
    o.eval_every = 3;
    o.eval_batches = 2;
    o.threads = 1;
    o.device = device;
    o.checkpoint_path = ckpt;
    char err[512];
    trainer *t = gpt_trainer_create(&o, err, sizeof err);
    if (!t) fprintf(stderr, "%s\n", err);
    assert_non_null(t);
    assert_string_equal(gpt_trainer_device(t), device == GPT_DEVICE_CUDA ? "cuda" : "cpu");
    return t;
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
    float *p0 = malloc(n * 4);
    memcpy(p0, a->params, n * 4);
    trainer_stats sa, sb;
    for (int s = 0; s < 3; s++) {
        assert_int_equal(a->step(a, &sa, err, sizeof err), 0);
        assert_int_equal(b->step(b, &sb, err, sizeof err), 0);
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
    /* the host buffer of the CUDA trainer holds its current parameters (DiLoCo reads it) */
    float *ua = malloc(n * 4), *ub = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        ua[i] = a->params[i] - p0[i];
        ub[i] = b->params[i] - p0[i];
    }
    double pe = tc_relerr(ub, ua, n);
    printf("parameters after 3 steps: update rel %.3g (limit 1e-3: three AdamW steps amplify noise-level "
           "gradient differences)\n",
           pe);
    assert_true(pe <= 1e-3);

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
    free(p0);
    free(ua);
    free(ub);
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
