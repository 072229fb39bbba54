/* test_gpt_gradcheck: the GPT's analytic gradients (fp32, worker/gpt) against central finite
 * differences of an independent double-precision reference forward written here, for every
 * parameter tensor of a tiny config. Also: layout, deterministic init, clipping, lr schedule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt/gpt.h"

/* ---- double-precision reference forward ---------------------------------------------------- */

typedef struct {
    gpt_config c;
    model_tensor *t;
    int nt;
    size_t numel;
    int B, T;
    const int *inp, *tgt;
} ref_ctx;

static void ref_ln(double *out, const double *x, const double *w, const double *b, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const double *r = x + (size_t)n * C;
        double mu = 0, var = 0;
        for (int i = 0; i < C; i++) mu += r[i];
        mu /= C;
        for (int i = 0; i < C; i++) var += (r[i] - mu) * (r[i] - mu);
        var /= C;
        double rs = 1.0 / sqrt(var + 1e-5);
        for (int i = 0; i < C; i++) out[(size_t)n * C + i] = (r[i] - mu) * rs * w[i] + b[i];
    }
}

static void ref_linear(double *out, const double *x, const double *w, const double *b, int N, int C, int OC)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b[o];
            for (int i = 0; i < C; i++) s += x[(size_t)n * C + i] * w[(size_t)o * C + i];
            out[(size_t)n * OC + o] = s;
        }
}

static double ref_loss(const ref_ctx *r, const double *P)
{
    int B = r->B, T = r->T, C = r->c.dim, NH = r->c.heads, V = r->c.vocab, L = r->c.layers, N = B * T;
    int hs = C / NH;
    const model_tensor *t = r->t;
    double *x = calloc((size_t)N * C, 8), *ln = calloc((size_t)N * C, 8), *qkv = calloc((size_t)N * 3 * C, 8);
    double *y = calloc((size_t)N * C, 8), *tmp = calloc((size_t)N * 4 * C, 8), *h = calloc((size_t)N * 4 * C, 8);
    double *sc = calloc((size_t)T, 8);
    const double *wte = P + t[0].offset, *wpe = P + t[1].offset;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C; i++)
            x[(size_t)n * C + i] = wte[(size_t)r->inp[n] * C + i] + wpe[(size_t)(n % T) * C + i];
    for (int l = 0; l < L; l++) {
        const model_tensor *u = t + 2 + 12 * l;
#define W(k) (P + u[k].offset)
        ref_ln(ln, x, W(0), W(1), N, C);
        ref_linear(qkv, ln, W(2), W(3), N, C, 3 * C);
        for (int b = 0; b < B; b++)
            for (int hh = 0; hh < NH; hh++)
                for (int i = 0; i < T; i++) {
                    const double *q = qkv + ((size_t)b * T + i) * 3 * C + hh * hs;
                    double mx = -1e300;
                    for (int j = 0; j <= i; j++) {
                        const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + hh * hs;
                        double s = 0;
                        for (int d = 0; d < hs; d++) s += q[d] * k[d];
                        sc[j] = s / sqrt((double)hs);
                        if (sc[j] > mx) mx = sc[j];
                    }
                    double z = 0;
                    for (int j = 0; j <= i; j++) {
                        sc[j] = exp(sc[j] - mx);
                        z += sc[j];
                    }
                    double *o = y + ((size_t)b * T + i) * C + hh * hs;
                    for (int d = 0; d < hs; d++) o[d] = 0;
                    for (int j = 0; j <= i; j++) {
                        const double *v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + hh * hs;
                        for (int d = 0; d < hs; d++) o[d] += sc[j] / z * v[d];
                    }
                }
        ref_linear(tmp, y, W(4), W(5), N, C, C);
        for (size_t i = 0; i < (size_t)N * C; i++) x[i] += tmp[i];
        ref_ln(ln, x, W(6), W(7), N, C);
        ref_linear(h, ln, W(8), W(9), N, C, 4 * C);
        for (size_t i = 0; i < (size_t)N * 4 * C; i++) {
            double v = h[i];
            h[i] = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
        }
        ref_linear(tmp, h, W(10), W(11), N, 4 * C, C);
        for (size_t i = 0; i < (size_t)N * C; i++) x[i] += tmp[i];
#undef W
    }
    ref_ln(ln, x, P + t[r->nt - 2].offset, P + t[r->nt - 1].offset, N, C);
    double loss = 0;
    for (int n = 0; n < N; n++) {
        double mx = -1e300, lt = 0;
        double *lg = malloc((size_t)V * 8);
        for (int v = 0; v < V; v++) {
            double s = 0;
            for (int i = 0; i < C; i++) s += ln[(size_t)n * C + i] * wte[(size_t)v * C + i];
            lg[v] = s;
            if (s > mx) mx = s;
        }
        double z = 0;
        for (int v = 0; v < V; v++) z += exp(lg[v] - mx);
        lt = lg[r->tgt[n]];
        loss += log(z) + mx - lt;
        free(lg);
    }
    free(x);
    free(ln);
    free(qkv);
    free(y);
    free(tmp);
    free(h);
    free(sc);
    return loss / N;
}

static uint64_t rs = 42;
static double urand(void)
{
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((rs >> 11) + 0.5) / 9007199254740992.0;
}

static void test_gradcheck(void **state)
{
    (void)state;
    ref_ctx r = {.c = {.layers = 2, .heads = 2, .dim = 8, .ctx = 8, .vocab = 11}, .B = 2, .T = 6};
    char err[256];
    assert_int_equal(gpt_layout(&r.c, &r.t, &r.nt, &r.numel, err, sizeof err), 0);
    float *p = malloc(r.numel * 4), *g = malloc(r.numel * 4);
    assert_int_equal(gpt_init_params(&r.c, 7, p, r.numel, err, sizeof err), 0);
    /* make every tensor generic: larger weights, non-trivial LayerNorm and biases */
    for (int k = 0; k < r.nt; k++)
        for (size_t i = 0; i < r.t[k].numel; i++) {
            float *x = p + r.t[k].offset + i;
            if (r.t[k].ndim == 2)
                *x = (float)(*x * 15.0);
            else
                *x += (float)(0.4 * (urand() - 0.5));
        }
    int N = r.B * r.T, inp[64], tgt[64];
    for (int n = 0; n < N; n++) {
        inp[n] = (int)(urand() * r.c.vocab);
        tgt[n] = (int)(urand() * r.c.vocab);
    }
    r.inp = inp;
    r.tgt = tgt;
    gpt_model *m = gpt_model_create(&r.c, r.B, r.T, 2, err, sizeof err);
    assert_non_null(m);
    float loss = gpt_forward(m, p, inp, tgt);
    gpt_backward(m, p, g);
    double *P = malloc(r.numel * 8);
    for (size_t i = 0; i < r.numel; i++) P[i] = p[i];
    double rl = ref_loss(&r, P);
    printf("loss: ours %.7f reference %.7f\n", (double)loss, rl);
    assert_true(fabs(loss - rl) < 1e-5 * fabs(rl));
    double worst = 0;
    for (int k = 0; k < r.nt; k++) {
        double maxfd = 0, maxdiff = 0, maxrel = 0;
        double *fd = malloc(r.t[k].numel * 8);
        for (size_t i = 0; i < r.t[k].numel; i++) {
            size_t j = r.t[k].offset + i;
            double h = 1e-5, save = P[j];
            P[j] = save + h;
            double lp = ref_loss(&r, P);
            P[j] = save - h;
            double lm = ref_loss(&r, P);
            P[j] = save;
            fd[i] = (lp - lm) / (2 * h);
            if (fabs(fd[i]) > maxfd) maxfd = fabs(fd[i]);
        }
        for (size_t i = 0; i < r.t[k].numel; i++) {
            double a = g[r.t[k].offset + i], d = fabs(a - fd[i]);
            if (d > maxdiff) maxdiff = d;
            if (fabs(fd[i]) > 1e-2 * maxfd) {
                double rel = d / fabs(fd[i]);
                if (rel > maxrel) maxrel = rel;
            }
        }
        double rel = maxfd > 0 ? maxdiff / maxfd : maxdiff;
        if (!strcmp(r.t[k].name, "wpe.weight")) {
            /* rows >= T are unused: their gradient must be exactly 0 */
            for (size_t i = (size_t)r.T * r.c.dim; i < r.t[k].numel; i++) assert_true(g[r.t[k].offset + i] == 0.0f);
        }
        printf("%-22s max|g|=%.3e  max|g-fd|/max|fd|=%.2e  max elementwise rel (|fd|>1%% max)=%.2e\n", r.t[k].name,
               maxfd, rel, maxrel);
        assert_true(maxfd > 1e-6); /* every tensor gets a gradient */
        assert_true(rel < 1e-3);
        if (rel > worst) worst = rel;
        free(fd);
    }
    printf("worst tensor relative error %.2e (limit 1e-3)\n", worst);
    gpt_model_free(m);
    free(P);
    free(p);
    free(g);
    free(r.t);
}

/* The threaded paths (sgemm split by rows and by columns, attention over (batch, head) pairs) give
 * the same results as one thread, on a shape where the head's product is split by columns
 * (B*T < vocab) and the attention has several row blocks (T > 64). */
static void test_threads_consistent(void **state)
{
    (void)state;
    gpt_config c = {.layers = 1, .heads = 2, .dim = 64, .ctx = 96, .vocab = 3000};
    int B = 2, T = 80, N = B * T;
    model_tensor *t;
    int nt;
    size_t numel;
    char err[256];
    assert_int_equal(gpt_layout(&c, &t, &nt, &numel, err, sizeof err), 0);
    float *p = malloc(numel * 4), *g1 = malloc(numel * 4), *g2 = malloc(numel * 4);
    assert_int_equal(gpt_init_params(&c, 5, p, numel, err, sizeof err), 0);
    int *inp = malloc(N * sizeof(int)), *tgt = malloc(N * sizeof(int));
    for (int n = 0; n < N; n++) {
        inp[n] = (int)(urand() * c.vocab);
        tgt[n] = (int)(urand() * c.vocab);
    }
    gpt_model *m1 = gpt_model_create(&c, B, T, 1, err, sizeof err),
              *m2 = gpt_model_create(&c, B, T, 2, err, sizeof err);
    assert_non_null(m1);
    assert_non_null(m2);
    float l1 = gpt_forward(m1, p, inp, tgt);
    gpt_backward(m1, p, g1);
    float l2 = gpt_forward(m2, p, inp, tgt);
    gpt_backward(m2, p, g2);
    assert_true(fabsf(l1 - l2) <= 1e-6f * fabsf(l1));
    for (int k = 0; k < nt; k++) {
        double mx = 0, md = 0;
        for (size_t i = 0; i < t[k].numel; i++) {
            size_t j = t[k].offset + i;
            mx = fmax(mx, fabs(g1[j]));
            md = fmax(md, fabs(g1[j] - g2[j]));
        }
        if (md > 1e-5 * mx) printf("%s: 1 vs 2 threads differ by %.2e of %.2e\n", t[k].name, md, mx);
        assert_true(md <= 1e-5 * mx);
    }
    gpt_model_free(m1);
    gpt_model_free(m2);
    free(t);
    free(p);
    free(g1);
    free(g2);
    free(inp);
    free(tgt);
}

static void test_layout_init(void **state)
{
    (void)state;
    gpt_config c = {.layers = 3, .heads = 4, .dim = 32, .ctx = 16, .vocab = 50};
    model_tensor *t;
    int n;
    size_t numel;
    char err[256];
    assert_int_equal(gpt_layout(&c, &t, &n, &numel, err, sizeof err), 0);
    assert_int_equal(n, 2 + 12 * 3 + 2);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(t[i].offset, off);
        size_t e = 1;
        for (int d = 0; d < t[i].ndim; d++) e *= t[i].shape[d];
        assert_int_equal(e, t[i].numel);
        off += t[i].numel;
    }
    assert_int_equal(off, numel);
    size_t C = 32;
    assert_int_equal(numel, 50 * C + 16 * C + 3 * (12 * C * C + 13 * C) + 2 * C);
    assert_string_equal(t[4].name, "h.0.attn.qkv.weight");
    assert_string_equal(t[n - 1].name, "lnf.bias");
    float *a = malloc(numel * 4), *b = malloc(numel * 4);
    assert_int_equal(gpt_init_params(&c, 99, a, numel, err, sizeof err), 0);
    assert_int_equal(gpt_init_params(&c, 99, b, numel, err, sizeof err), 0);
    assert_memory_equal(a, b, numel * 4);
    /* std of wte ~ 0.02, proj ~ 0.02/sqrt(6), LN weight 1, biases 0 */
    double ss = 0;
    for (size_t i = 0; i < t[0].numel; i++) ss += (double)a[i] * a[i];
    assert_true(fabs(sqrt(ss / t[0].numel) - 0.02) < 0.002);
    ss = 0;
    for (size_t i = 0; i < t[12].numel; i++) ss += (double)a[t[12].offset + i] * a[t[12].offset + i];
    assert_string_equal(t[12].name, "h.0.mlp.proj.weight");
    assert_true(fabs(sqrt(ss / t[12].numel) - 0.02 / sqrt(6.0)) < 0.001);
    assert_true(a[t[2].offset] == 1.0f && a[t[3].offset] == 0.0f);
    assert_int_equal(gpt_init_params(&c, 100, b, numel, err, sizeof err), 0);
    assert_memory_not_equal(a, b, numel * 4);
    free(t);
    gpt_config bad = c;
    bad.heads = 5;
    assert_int_equal(gpt_layout(&bad, &t, &n, &numel, err, sizeof err) == 0 ? 0 : -1, -1);
    free(a);
    free(b);
}

static void test_clip_and_schedule(void **state)
{
    (void)state;
    float g[4] = {3, 4, 0, 0};
    double norm = gpt_clip_grad_norm(g, 4, 1.0, 1);
    assert_true(fabs(norm - 5.0) < 1e-9);
    assert_true(fabs(g[0] - 0.6f) < 1e-6 && fabs(g[1] - 0.8f) < 1e-6);
    float h[2] = {0.3f, 0.4f};
    gpt_clip_grad_norm(h, 2, 1.0, 1);
    assert_true(h[0] == 0.3f && h[1] == 0.4f);
    gpt_options o;
    gpt_options_default(&o);
    o.lr = 1.0;
    o.warmup_steps = 10;
    o.total_steps = 110;
    o.min_lr_ratio = 0.1;
    assert_true(fabs(gpt_lr_at(&o, 0) - 0.1) < 1e-12);
    assert_true(fabs(gpt_lr_at(&o, 9) - 1.0) < 1e-12);
    assert_true(fabs(gpt_lr_at(&o, 10) - 1.0) < 1e-12);
    assert_true(fabs(gpt_lr_at(&o, 60) - 0.55) < 1e-12);
    assert_true(fabs(gpt_lr_at(&o, 110) - 0.1) < 1e-12);
    assert_true(fabs(gpt_lr_at(&o, 500) - 0.1) < 1e-12);
    o.total_steps = 0;
    assert_true(gpt_lr_at(&o, 1000) == 1.0);
}

static void test_options_parse(void **state)
{
    (void)state;
    gpt_options o;
    gpt_options_default(&o);
    assert_true(o.lr == 4e-4 && o.beta2 == 0.95 && o.weight_decay == 0.1 && o.grad_clip == 1.0);
    char *argv[] = {"--redis", "redis://x", "--layers",     "2",          "--dim=128", "pos", "--lr", "1e-3",
                    "--data",  "f.tok",     "--data-order", "sequential", "--unknown", NULL};
    int argc = 13;
    char err[256];
    int n = gpt_options_parse(&o, argc, argv, err, sizeof err);
    assert_int_equal(n, 9);
    assert_int_equal(o.model.layers, 2);
    assert_int_equal(o.model.dim, 128);
    assert_true(o.lr == 1e-3);
    assert_string_equal(o.data_path, "f.tok");
    assert_int_equal(o.data_sequential, 1);
    assert_string_equal(argv[0], "--redis");
    assert_string_equal(argv[1], "redis://x");
    assert_string_equal(argv[2], "pos");
    assert_string_equal(argv[3], "--unknown");
    assert_null(argv[4]);
    char *bad[] = {"--layers", "two"};
    assert_int_equal(gpt_options_parse(&o, 2, bad, err, sizeof err), -1);
    assert_non_null(strstr(err, "layers"));
    char *missing[] = {"--lr"};
    assert_int_equal(gpt_options_parse(&o, 1, missing, err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_init),        cmocka_unit_test(test_clip_and_schedule),
        cmocka_unit_test(test_options_parse),      cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_threads_consistent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
