/*
 * test_model.c: model/ (model.h): a run's (trainer, model) strings round-trip through model_spec;
 * each kind's layout covers the flat vector contiguously; gpt_params_bind, the map by role that the
 * CPU and CUDA GPT share, points every role at the tensor of that name; model_init_params gives each
 * kind's own initial values; bad input gets an error, never a layout; model_dim0_chunk cuts as torch.chunk
 * (and fully_shard) do.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "model.h"

static void spec_round_trips_through_the_run_config_strings(void **state)
{
    (void)state;
    char model[256], err[256];
    model_spec g = {.kind = "gpt", .gpt = {3, 2, 48, 17, 300}}, q = {.kind = "quadratic", .numel = 1000}, back;
    model_spec_format(&g, model, sizeof model);
    assert_string_equal(model, "--layers 3 --heads 2 --dim 48 --ctx 17 --vocab 300");
    assert_int_equal(model_spec_parse("gpt", model, &back, err, sizeof err), 0);
    assert_string_equal(back.kind, "gpt");
    assert_memory_equal(&back.gpt, &g.gpt, sizeof g.gpt);
    model_spec_format(&q, model, sizeof model);
    assert_string_equal(model, "--numel 1000");
    assert_int_equal(model_spec_parse("quadratic", model, &back, err, sizeof err), 0);
    assert_string_equal(back.kind, "quadratic");
    assert_int_equal(back.numel, 1000);

    assert_int_equal(model_spec_parse("gpt", "--numel 1000", &back, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a gpt model"));
    assert_int_equal(model_spec_parse("resnet", "--numel 1000", &back, err, sizeof err), -1);
    assert_string_equal(err, "unknown trainer 'resnet' (gpt or quadratic)");
}

static void check_contiguous(const model_tensor *t, int n, size_t numel)
{
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t prod = 1;
        for (int d = 0; d < t[i].ndim; d++) prod *= t[i].shape[d];
        assert_int_equal(t[i].offset, off);
        assert_int_equal(t[i].numel, prod);
        off += t[i].numel;
    }
    assert_int_equal(off, numel);
}

static void layouts_cover_the_flat_vector(void **state)
{
    (void)state;
    char err[256];
    model_tensor *t;
    int n;
    size_t numel;
    model_spec g = {.kind = "gpt", .gpt = {2, 4, 128, 128, 256}};
    assert_int_equal(model_layout(&g, &t, &n, &numel, err, sizeof err), 0);
    size_t C = 128, per_layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
    assert_int_equal(n, GPT_TENSORS_HEAD + 2 * GPT_TENSORS_PER_LAYER + 2);
    assert_int_equal(numel, 256 * C + 128 * C + 2 * per_layer + 2 * C);
    assert_string_equal(t[0].name, "wte.weight");
    assert_string_equal(t[n - 1].name, "lnf.bias");
    check_contiguous(t, n, numel);
    free(t);

    model_spec q = {.kind = "quadratic", .numel = 7};
    assert_int_equal(model_layout(&q, &t, &n, &numel, err, sizeof err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(numel, 7);
    assert_string_equal(t[0].name, "x");
    check_contiguous(t, n, numel);
    free(t);

    model_spec bad = {.kind = "gpt", .gpt = {2, 3, 128, 128, 256}};
    assert_int_equal(model_layout(&bad, &t, &n, &numel, err, sizeof err), -1);
    assert_string_equal(err, "gpt config: dim 128 is not divisible by heads 3");
    model_spec none = {.kind = "quadratic", .numel = 0};
    assert_int_equal(model_layout(&none, &t, &n, &numel, err, sizeof err), -1);
}

/* The tensor of that name, as an address in base. */
static float *named(const model_tensor *t, int n, float *base, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return base + t[i].offset;
    fail_msg("no tensor %s", name);
    return NULL;
}

static void bind_points_every_role_at_its_named_tensor(void **state)
{
    (void)state;
    gpt_config c = {3, 2, 16, 8, 32};
    model_tensor *t;
    int n;
    size_t numel;
    assert_int_equal(gpt_layout(&c, &t, &n, &numel, NULL, 0), 0);
    float *base = calloc(numel, sizeof(float));
    gpt_layer_params h[3];
    gpt_params p = {.h = h};
    gpt_params_bind(t, n, base, &p);
    assert_ptr_equal(p.wte, named(t, n, base, "wte.weight"));
    assert_ptr_equal(p.wpe, named(t, n, base, "wpe.weight"));
    assert_ptr_equal(p.lnfw, named(t, n, base, "lnf.weight"));
    assert_ptr_equal(p.lnfb, named(t, n, base, "lnf.bias"));
    for (int l = 0; l < c.layers; l++) {
        static const char *roles[12] = {"ln1.weight",       "ln1.bias",       "attn.qkv.weight", "attn.qkv.bias",
                                        "attn.proj.weight", "attn.proj.bias", "ln2.weight",      "ln2.bias",
                                        "mlp.fc.weight",    "mlp.fc.bias",    "mlp.proj.weight", "mlp.proj.bias"};
        float *got[12] = {h[l].ln1w, h[l].ln1b, h[l].qkvw, h[l].qkvb, h[l].projw,   h[l].projb,
                          h[l].ln2w, h[l].ln2b, h[l].fcw,  h[l].fcb,  h[l].fcprojw, h[l].fcprojb};
        for (int r = 0; r < 12; r++) {
            char name[64];
            snprintf(name, sizeof name, "h.%d.%s", l, roles[r]);
            assert_ptr_equal(got[r], named(t, n, base, name));
        }
    }
    free(base);
    free(t);
}

static void init_is_each_kinds_own(void **state)
{
    (void)state;
    char err[256];
    gpt_config c = {2, 2, 16, 8, 32};
    model_tensor *t;
    int n;
    size_t numel;
    assert_int_equal(gpt_layout(&c, &t, &n, &numel, NULL, 0), 0);
    float *a = malloc(numel * sizeof(float)), *b = malloc(numel * sizeof(float));
    model_spec g = {.kind = "gpt", .gpt = c};
    assert_int_equal(model_init_params(&g, 42, a, numel, err, sizeof err), 0);
    assert_int_equal(gpt_init_params(&c, 42, b, numel, err, sizeof err), 0);
    assert_memory_equal(a, b, numel * sizeof(float));
    assert_true(*named(t, n, a, "h.1.ln2.weight") == 1.0f && *named(t, n, a, "h.1.ln2.bias") == 0.0f);
    assert_int_equal(model_init_params(&g, 42, a, numel - 1, err, sizeof err), -1);
    free(t);

    model_spec q = {.kind = "quadratic", .numel = 100};
    assert_int_equal(model_init_params(&q, 5, a, 100, err, sizeof err), 0);
    quadratic_init_params(5, b, 100);
    assert_memory_equal(a, b, 100 * sizeof(float));
    for (int i = 0; i < 100; i++) assert_true(a[i] >= -1.0f && a[i] < 1.0f);
    assert_int_equal(model_init_params(&q, 5, a, 99, err, sizeof err), -1);
    free(a);
    free(b);
}

/* torch.chunk(t, R, dim=0): ceil(rows/R) rows each, the last ranks fewer or none (e.g. 10 rows over 4 ranks:
 * 3, 3, 3, 1; 2 rows over 3: 1, 1, 0); the chunks tile the tensor in rank order. */
static void dim0_chunks_follow_torch_chunk(void **state)
{
    (void)state;
    struct {
        size_t shape[3];
        int ndim, ranks;
        size_t rows[4];
    } cases[] = {{{10, 6}, 2, 4, {3, 3, 3, 1}}, {{2, 5}, 2, 3, {1, 1, 0}}, {{7}, 1, 2, {4, 3}},
                 {{3, 4, 2}, 3, 2, {2, 1}},     {{1, 5}, 2, 2, {1, 0}},    {{12}, 1, 3, {4, 4, 4}}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_tensor t = {.name = "t", .ndim = cases[i].ndim, .offset = 100};
        size_t row = 1;
        for (int d = 0; d < t.ndim; d++) t.shape[d] = cases[i].shape[d];
        for (int d = 1; d < t.ndim; d++) row *= t.shape[d];
        t.numel = t.shape[0] * row;
        size_t at = t.offset;
        for (int r = 0; r < cases[i].ranks; r++) {
            size_t off, n = model_dim0_chunk(&t, cases[i].ranks, r, &off);
            assert_int_equal(n, cases[i].rows[r] * row);
            if (n) assert_int_equal(off, at);
            at += n;
        }
        assert_int_equal(at, t.offset + t.numel);
    }
    model_tensor scalar = {.name = "s", .ndim = 0, .numel = 1, .offset = 7};
    size_t off;
    assert_int_equal(model_dim0_chunk(&scalar, 2, 0, &off), 1);
    assert_int_equal(off, 7);
    assert_int_equal(model_dim0_chunk(&scalar, 2, 1, &off), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(spec_round_trips_through_the_run_config_strings),
        cmocka_unit_test(layouts_cover_the_flat_vector),
        cmocka_unit_test(bind_points_every_role_at_its_named_tensor),
        cmocka_unit_test(init_is_each_kinds_own),
        cmocka_unit_test(dim0_chunks_follow_torch_chunk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
