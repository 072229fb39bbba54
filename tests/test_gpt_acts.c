/* test_gpt_acts: the activation layout of worker/gpt/gpt_acts.h, with the full (B,NH,T,T) attention
 * matrices and with one value per row in their place, with and without the fp32 inputs of the products
 * (gpt_acts_bind_shaped: what the CUDA bf16 path keeps, gpt_cuda_model.cu's alloc_arena), and with the
 * logits' rows padded (logits_ld: bf16's stride, a multiple of 64). The layouts differ exactly by the
 * sizes left out or added; every buffer starts on the alignment, inside the arena, after the
 * previous one's end, so none overlaps; a buffer left out is NULL; and gpt_acts_size/_bind are the shaped
 * forms with the CPU's shape. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "gpt/gpt_acts.h"

/* the fields of one layer and of the whole, in the order the layout walks them, with their sizes */
typedef struct {
    float *p;
    size_t n;
} span;

static int spans(const gpt_config *c, int B, int T, const gpt_acts_shape *shape, const gpt_acts *a, span *s)
{
    size_t N = (size_t)B * T, C = (size_t)c->dim, att = shape->att;
    size_t V = shape->logits_ld ? shape->logits_ld : (size_t)c->vocab;
    int k = 0;
    for (int l = 0; l < c->layers; l++) {
        const gpt_layer_acts *h = &a->h[l];
        span layer[] = {{h->ln1, N * C},  {h->ln1_mean, N}, {h->ln1_rstd, N},    {h->qkv, 3 * N * C},
                        {h->att, att},    {h->atty, N * C}, {h->res2, N * C},    {h->ln2, N * C},
                        {h->ln2_mean, N}, {h->ln2_rstd, N}, {h->fch, 4 * N * C}, {h->fch_gelu, 4 * N * C},
                        {h->res3, N * C}};
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++) s[k++] = layer[i];
    }
    span rest[] = {{a->encoded, N * C}, {a->lnf, N * C},      {a->lnf_mean, N},    {a->lnf_rstd, N},
                   {a->logits, N * V},  {a->losses, N},       {a->dres, N * C},    {a->dln, N * C},
                   {a->datty, N * C},   {a->dqkv, 3 * N * C}, {a->dfch, 4 * N * C}};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++) s[k++] = rest[i];
    return k;
}

static void check_layout(const gpt_config *c, int B, int T, const gpt_acts_shape *shape, size_t align)
{
    size_t total = gpt_acts_size_shaped(c, B, T, align, shape);
    float *arena = calloc(total, sizeof(float));
    gpt_layer_acts h[4];
    gpt_acts a = {.h = h};
    assert_int_equal(gpt_acts_bind_shaped(c, B, T, align, shape, arena, &a), total);
    span s[64];
    int n = spans(c, B, T, shape, &a, s);
    float *end = arena;
    int left_out = 0;
    for (int i = 0; i < n; i++) {
        if (!s[i].p) { /* left out by the shape: only the products' fp32 inputs may be */
            left_out++;
            continue;
        }
        assert_true(s[i].p >= end);                            /* after the previous buffer's end */
        assert_int_equal((size_t)(s[i].p - arena) % align, 0); /* aligned */
        end = s[i].p + s[i].n;
        assert_true(end <= arena + total); /* inside the arena */
    }
    free(arena);
}

static void test_layouts(void **state)
{
    (void)state;
    gpt_config c = {.layers = 3, .heads = 4, .dim = 32, .ctx = 64, .vocab = 97};
    int B = 2, T = 50;
    size_t rows = (size_t)B * 4 * T, full = rows * T, N = (size_t)B * T;
    for (size_t align = 1; align <= 64; align *= 4) {
        gpt_acts_shape cpu = {full, 0, 0}, lse = {rows, 0, 0}, lean = {rows, 1, 0}, padded = {rows, 1, 128};
        assert_int_equal(gpt_acts_size(&c, B, T, align), gpt_acts_size_shaped(&c, B, T, align, &cpu));
        assert_int_equal(gpt_acts_size_shaped(&c, B, T, align, &cpu) - gpt_acts_size_shaped(&c, B, T, align, &lse),
                         3 * (gpt_arena_round(full, align) - gpt_arena_round(rows, align)));
        assert_int_equal(gpt_acts_size_shaped(&c, B, T, align, &lse) - gpt_acts_size_shaped(&c, B, T, align, &lean),
                         3 * (2 * gpt_arena_round(N * 32, align) + gpt_arena_round(N * 128, align)) +
                             gpt_arena_round(N * 32, align));
        check_layout(&c, B, T, &cpu, align);
        check_layout(&c, B, T, &lse, align);
        check_layout(&c, B, T, &lean, align);
        /* the logits' rows 128 floats apart instead of 97: N * 31 floats more, nothing else moved in size */
        assert_int_equal(gpt_acts_size_shaped(&c, B, T, align, &padded) - gpt_acts_size_shaped(&c, B, T, align, &lean),
                         gpt_arena_round(N * 128, align) - gpt_arena_round(N * 97, align));
        check_layout(&c, B, T, &padded, align);
    }
    /* gpt_acts_bind is bind_shaped with the CPU's shape: the same pointers */
    size_t total = gpt_acts_size(&c, B, T, 16);
    float *arena = calloc(total, sizeof(float));
    gpt_layer_acts h1[3], h2[3];
    gpt_acts a1 = {.h = h1}, a2 = {.h = h2};
    gpt_acts_shape cpu = {full, 0, 0};
    assert_int_equal(gpt_acts_bind(&c, B, T, 16, arena, &a1), gpt_acts_bind_shaped(&c, B, T, 16, &cpu, arena, &a2));
    assert_ptr_equal(a1.h[2].att, a2.h[2].att);
    assert_ptr_equal(a1.dfch, a2.dfch);
    free(arena);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_layouts)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
