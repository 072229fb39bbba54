/* test_gpt_acts: the activation layout of worker/gpt/gpt_acts.h, with the full (B,NH,T,T) attention
 * matrices and with one value per row in their place (gpt_acts_bind_att: what the CUDA bf16 fused and
 * flash attentions keep, gpt_cuda_model.cu's alloc_arena). The two layouts differ exactly by the layers'
 * att sizes; every buffer starts on the alignment, inside the arena, after the previous one's end, so
 * none overlaps; and gpt_acts_size/_bind are the _att forms with the full matrices. */
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

static int spans(const gpt_config *c, int B, int T, size_t att, const gpt_acts *a, span *s)
{
    size_t N = (size_t)B * T, C = (size_t)c->dim, V = (size_t)c->vocab;
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

static void check_layout(const gpt_config *c, int B, int T, size_t att, size_t align)
{
    size_t total = gpt_acts_size_att(c, B, T, align, att);
    float *arena = calloc(total, sizeof(float));
    gpt_layer_acts h[4];
    gpt_acts a = {.h = h};
    assert_int_equal(gpt_acts_bind_att(c, B, T, align, att, arena, &a), total);
    span s[64];
    int n = spans(c, B, T, att, &a, s);
    float *end = arena;
    for (int i = 0; i < n; i++) {
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
    size_t rows = (size_t)B * 4 * T, full = rows * T;
    for (size_t align = 1; align <= 64; align *= 4) {
        assert_int_equal(gpt_acts_size(&c, B, T, align), gpt_acts_size_att(&c, B, T, align, full));
        assert_int_equal(gpt_acts_size_att(&c, B, T, align, full) - gpt_acts_size_att(&c, B, T, align, rows),
                         3 * (gpt_arena_round(full, align) - gpt_arena_round(rows, align)));
        check_layout(&c, B, T, full, align);
        check_layout(&c, B, T, rows, align);
    }
    /* gpt_acts_bind is bind_att with the full matrices: the same pointers */
    size_t total = gpt_acts_size(&c, B, T, 16);
    float *arena = calloc(total, sizeof(float));
    gpt_layer_acts h1[3], h2[3];
    gpt_acts a1 = {.h = h1}, a2 = {.h = h2};
    assert_int_equal(gpt_acts_bind(&c, B, T, 16, arena, &a1), gpt_acts_bind_att(&c, B, T, 16, full, arena, &a2));
    assert_ptr_equal(a1.h[2].att, a2.h[2].att);
    assert_ptr_equal(a1.dfch, a2.dfch);
    free(arena);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_layouts)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
