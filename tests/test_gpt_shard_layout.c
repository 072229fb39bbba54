/* test_gpt_shard_layout: how the GPT trainer divides its training split into --num-shards parts
 * (worker/gpt/gpt_part.c). For the contiguous and the stripe layout, over split lengths that end in
 * a full stripe, a short tail and a tail shorter than a window: the parts are disjoint, together they
 * cover the split, every window of a part lies inside that part (for stripes: inside one of its
 * stripes), window starts are enumerated in order without repeats, and the sequential walk visits
 * only the part's windows and wraps. Then through the trainer on the Bible: the bad stripe options
 * are refused with a message, a checkpoint resumes the data position in the same layout (6 steps
 * straight = 4 + resume + 2) and not in another one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt/gpt.h"

#define TOK "build/kjv.tok"
#define CKPT "build/test_gpt_shard_layout.safetensors"

/* the part that owns token x, computed from the definition (not from gpt_part) */
static int owner(int layout, uint64_t ntrain, int parts, uint64_t stripe, uint64_t x)
{
    if (layout == GPT_SHARD_STRIPE && parts > 1) return (int)((x / stripe) % (uint64_t)parts);
    for (int i = 0; i < parts; i++)
        if (x < ntrain * (uint64_t)(i + 1) / (uint64_t)parts) return i;
    return -1;
}

/* one division of a split of ntrain tokens into `parts` parts */
static void check_division(int layout, uint64_t ntrain, int parts, int stripe, int seq)
{
    unsigned char *seen = calloc(ntrain, 1); /* 1 + the part whose windows covered the token */
    assert_non_null(seen);
    uint64_t total = 0;
    for (int i = 0; i < parts; i++) {
        gpt_part p;
        char err[256];
        if (gpt_part_init(&p, ntrain, parts, i, layout, stripe, seq, err, sizeof err))
            fail_msg("layout %d ntrain %llu part %d/%d: %s", layout, (unsigned long long)ntrain, i, parts, err);
        uint64_t prev = 0;
        for (uint64_t r = 0; r < p.starts; r++) {
            uint64_t s = gpt_part_start(&p, r);
            assert_true(r == 0 || s > prev); /* in order, no repeats */
            prev = s;
            assert_true(s + (uint64_t)seq < ntrain);
            if (layout == GPT_SHARD_STRIPE && parts > 1)
                assert_true(s / (uint64_t)stripe == (s + (uint64_t)seq) / (uint64_t)stripe); /* one stripe */
            for (uint64_t x = s; x <= s + (uint64_t)seq; x++) {
                assert_int_equal(owner(layout, ntrain, parts, (uint64_t)stripe, x), i);
                assert_true(seen[x] == 0 || seen[x] == i + 1); /* disjoint */
                seen[x] = (unsigned char)(i + 1);
            }
        }
        total += p.starts;
        /* the sequential walk: only this part's windows, every one at a window start, and it wraps */
        uint64_t cur = p.lo, first = gpt_part_next(&p, &cur), walk = 0;
        assert_int_equal(first, gpt_part_start(&p, 0));
        for (uint64_t n = 0; n < 4 * ntrain / (uint64_t)seq; n++) {
            uint64_t s = gpt_part_next(&p, &cur);
            assert_true(s + (uint64_t)seq < ntrain);
            assert_int_equal(owner(layout, ntrain, parts, (uint64_t)stripe, s), i);
            assert_int_equal(owner(layout, ntrain, parts, (uint64_t)stripe, s + (uint64_t)seq), i);
            if (s == first) walk++;
        }
        assert_true(walk >= 1);
    }
    /* covered: every token but those of a last stripe too short for a window */
    uint64_t covered = 0;
    for (uint64_t x = 0; x < ntrain; x++) covered += seen[x] != 0;
    uint64_t lost = layout == GPT_SHARD_STRIPE && parts > 1 && ntrain % (uint64_t)stripe <= (uint64_t)seq
                        ? ntrain % (uint64_t)stripe
                        : 0;
    assert_int_equal(covered, ntrain - lost);
    assert_true(total > 0);
    free(seen);
}

static void test_divisions(void **state)
{
    (void)state;
    const uint64_t lens[] = {4000, 4001, 4030, 4016, 9999};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
        for (int parts = 1; parts <= 4; parts++) {
            check_division(GPT_SHARD_CONTIGUOUS, lens[k], parts, 0, 16);
            check_division(GPT_SHARD_STRIPE, lens[k], parts, 100, 16);
            check_division(GPT_SHARD_STRIPE, lens[k], parts, 17, 16); /* one window per stripe */
        }
}

static void test_refused(void **state)
{
    (void)state;
    gpt_part p;
    char err[256];
    assert_int_equal(gpt_part_init(&p, 10000, 4, 0, GPT_SHARD_STRIPE, 16, 16, err, sizeof err), -1);
    printf("stripe shorter than a window: %s\n", err);
    assert_non_null(strstr(err, "--shard-stripe 16"));
    assert_int_equal(gpt_part_init(&p, 1000, 4, 3, GPT_SHARD_STRIPE, 400, 16, err, sizeof err), -1);
    printf("a part without windows: %s\n", err);
    assert_non_null(strstr(err, "smaller --shard-stripe"));
}

static void tiny(gpt_options *o, int layout)
{
    gpt_options_default(o);
    o->model = (gpt_config){.layers = 1, .heads = 2, .dim = 32, .ctx = 32, .vocab = 256};
    o->batch = 2;
    o->seq = 32;
    o->eval_every = 0;
    o->threads = 1;
    o->data_path = TOK;
    o->num_shards = 4;
    o->shard_index = 1;
    o->shard_layout = layout;
    o->data_sequential = 1; /* the cursor shows the position */
}

/* params after `steps` steps of a trainer created from o */
static trainer *run(const gpt_options *o, int steps)
{
    char err[512];
    trainer *t = gpt_trainer_create(o, err, sizeof err);
    if (!t) fail_msg("create: %s", err);
    trainer_stats st;
    for (int i = 0; i < steps; i++)
        if (t->step(t, &st, err, sizeof err)) fail_msg("step: %s", err);
    return t;
}

static void copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    assert_true(a && b);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) assert_int_equal(fwrite(buf, 1, n, b), n);
    fclose(a);
    fclose(b);
}

/* the first window start of part 1 in the division of o */
static uint64_t first_start(const gpt_options *o)
{
    gpt_tokens tk;
    gpt_part p;
    char err[256];
    assert_int_equal(gpt_tokens_load(TOK, &tk, err, sizeof err), 0);
    int stripe = o->shard_stripe ? o->shard_stripe : GPT_SHARD_STRIPE_DEFAULT;
    assert_int_equal(gpt_part_init(&p, tk.ntrain, o->num_shards, o->shard_index, o->shard_layout, stripe, o->seq, err,
                                   sizeof err),
                     0);
    gpt_tokens_free(&tk);
    return gpt_part_start(&p, 0);
}

static void test_trainer_resume(void **state)
{
    (void)state;
    if (access(TOK, R_OK) != 0) skip(); /* test_gpt_learning makes it */
    gpt_options o;
    tiny(&o, GPT_SHARD_STRIPE);
    char err[512];
    gpt_options bad = o;
    bad.shard_stripe = 20;
    assert_null(gpt_trainer_create(&bad, err, sizeof err));
    printf("--shard-stripe 20 at seq 32: %s\n", err);
    bad = o;
    bad.shard_layout = GPT_SHARD_CONTIGUOUS;
    bad.shard_stripe = 4096;
    assert_null(gpt_trainer_create(&bad, err, sizeof err));
    printf("--shard-stripe with contiguous: %s\n", err);
    /* 6 steps straight = 4, checkpoint, resume, 2: the sequential cursor goes on in part 1's stripe */
    trainer *straight = run(&o, 6);
    uint64_t rng6, cur6, rng, cur;
    gpt_trainer_data_position(straight, &rng6, &cur6);
    assert_int_equal(cur6, GPT_SHARD_STRIPE_DEFAULT + 6 * 2 * 32); /* stripe 1 is part 1's first */
    remove(CKPT);
    o.checkpoint_path = CKPT;
    trainer *b = run(&o, 4);
    b->destroy(b);
    b = run(&o, 2);
    gpt_trainer_data_position(b, &rng, &cur);
    assert_int_equal(cur, cur6);
    assert_memory_equal(straight->params, b->params, b->numel * sizeof(float));
    b->destroy(b); /* the checkpoint: 6 steps in part 1 of 4, stripes of 4096 */
    straight->destroy(straight);
    /* read with another division: the parameters and step are resumed, the data position is not */
    gpt_options other[3] = {o, o, o};
    other[0].shard_stripe = 8192;
    other[1].num_shards = 3;
    other[2].shard_layout = GPT_SHARD_CONTIGUOUS;
    for (int k = 0; k < 3; k++) {
        copy_file(CKPT, CKPT ".copy");
        other[k].checkpoint_path = CKPT ".copy";
        trainer *c = gpt_trainer_create(&other[k], err, sizeof err);
        if (!c) fail_msg("create: %s", err);
        assert_int_equal(gpt_trainer_steps(c), 6);
        gpt_trainer_data_position(c, &rng, &cur);
        assert_int_equal(cur, first_start(&other[k])); /* the part's first window, not the checkpoint's */
        assert_true(cur != cur6);
        c->destroy(c);
    }
    remove(CKPT);
    remove(CKPT ".copy");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_divisions),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_trainer_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
