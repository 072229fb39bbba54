/* test_gpt_learning: the GPT trainer learns real text. Dumps the King James Bible (Debian's
 * bible-kjv: `bible 'Gen1:1-Rev22:21'`) into build/kjv.txt, prepares build/kjv.tok (byte-level,
 * 5% validation), trains a 2-layer 128-dim model for 300 steps through the trainer.h API and
 * asserts the validation loss falls from ~ln(256) = 5.55 to below 2.5 nats/byte. Also checks the
 * JSON-lines log, the checkpoint round trip (resume gives the same parameters and step) and the
 * data shards. Exits 77 when the bible command is missing. GPT_LEARNING_STEPS overrides 300. */
/* test: alone (it trains GPTs: CPU-bound; tests/run.sh) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpt/gpt.h"

#define TXT "build/kjv.txt"
#define TOK "build/kjv.tok"
#define LOG "build/test_gpt_learning.jsonl"
#define CKPT "build/test_gpt_learning.safetensors"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void base_options(gpt_options *o)
{
    gpt_options_default(o);
    o->model = (gpt_config){.layers = 2, .heads = 4, .dim = 128, .ctx = 128, .vocab = 256};
    o->batch = 16;
    o->seq = 128;
    o->lr = 2e-3;
    o->warmup_steps = 30;
    o->total_steps = 300;
    o->min_lr_ratio = 0.1;
    o->eval_every = 100;
    o->eval_batches = 8;
    o->data_path = TOK;
}

static void test_learns(void **state)
{
    (void)state;
    gpt_options o;
    base_options(&o);
    const char *e = getenv("GPT_LEARNING_STEPS");
    if (e) o.total_steps = atol(e);
    o.log_path = LOG;
    remove(LOG);
    char err[512];
    trainer *t = gpt_trainer_create(&o, err, sizeof err);
    if (!t) fail_msg("create: %s", err);
    double l0;
    assert_int_equal(t->evaluate(t, &l0, err, sizeof err), 0);
    printf("step 0: validation loss %.4f (ln 256 = %.4f)\n", l0, log(256.0));
    assert_true(fabs(l0 - log(256.0)) < 0.15);
    trainer_stats st;
    double t0 = now();
    for (long s = 1; s <= o.total_steps; s++) {
        if (t->step(t, &st, err, sizeof err)) fail_msg("step %ld: %s", s, err);
        if (s % 50 == 0 || s == o.total_steps)
            printf("step %ld: loss %.4f eval %.4f tokens %llu (%.1f s, %.0f tokens/s)\n", s, st.loss, st.eval_loss,
                   (unsigned long long)st.tokens, now() - t0, st.tokens / (now() - t0));
    }
    double l1;
    assert_int_equal(t->evaluate(t, &l1, err, sizeof err), 0);
    printf("after %ld steps: validation loss %.4f (must be < 2.5)\n", o.total_steps, l1);
    assert_true(l1 < 2.5);
    assert_true(st.tokens == (uint64_t)o.total_steps * o.batch * o.seq);
    t->destroy(t);
    /* telemetry: one JSON line per step plus the evaluate() lines */
    FILE *f = fopen(LOG, "r");
    assert_non_null(f);
    char line[512];
    int n = 0, ev = 0;
    while (fgets(line, sizeof line, f)) {
        assert_true(line[0] == '{' && strstr(line, "\"step\":") && strstr(line, "\"time\":"));
        if (strstr(line, "\"eval_loss\":")) ev++;
        n++;
    }
    fclose(f);
    assert_int_equal(n, o.total_steps + 2);
    assert_true(ev >= 2);
}

static void test_checkpoint_resume(void **state)
{
    (void)state;
    gpt_options o;
    base_options(&o);
    o.model.layers = 1;
    o.batch = 2;
    o.seq = 32;
    o.eval_every = 0;
    o.checkpoint_path = CKPT;
    remove(CKPT);
    char err[512];
    /* reference: 6 uninterrupted steps */
    gpt_options r = o;
    r.checkpoint_path = NULL;
    trainer *a = gpt_trainer_create(&r, err, sizeof err);
    assert_non_null(a);
    trainer_stats st;
    for (int i = 0; i < 6; i++) assert_int_equal(a->step(a, &st, err, sizeof err), 0);
    /* 4 steps, destroy (writes the checkpoint), resume, 2 more */
    trainer *b = gpt_trainer_create(&o, err, sizeof err);
    assert_non_null(b);
    for (int i = 0; i < 4; i++) assert_int_equal(b->step(b, &st, err, sizeof err), 0);
    b->destroy(b);
    struct stat sb;
    assert_int_equal(stat(CKPT, &sb), 0);
    b = gpt_trainer_create(&o, err, sizeof err);
    if (!b) fail_msg("resume: %s", err);
    assert_int_equal(gpt_trainer_steps(b), 4);
    for (int i = 0; i < 2; i++) assert_int_equal(b->step(b, &st, err, sizeof err), 0);
    assert_int_equal(b->numel, a->numel);
    assert_memory_equal(a->params, b->params, a->numel * sizeof(float));
    assert_int_equal(st.tokens, 6u * o.batch * o.seq);
    /* a checkpoint of another model is refused */
    b->destroy(b);
    gpt_options w = o;
    w.model.dim = 64;
    trainer *c = gpt_trainer_create(&w, err, sizeof err);
    assert_null(c);
    printf("mismatched checkpoint refused: %s\n", err);
    a->destroy(a);
    remove(CKPT);
}

static void test_shards(void **state)
{
    (void)state;
    gpt_tokens tk;
    char err[512];
    assert_int_equal(gpt_tokens_load(TOK, &tk, err, sizeof err), 0);
    assert_true(tk.ntrain < tk.ntokens && tk.vocab == 256);
    double vf = (double)(tk.ntokens - tk.ntrain) / tk.ntokens;
    assert_true(fabs(vf - 0.05) < 0.001);
    gpt_tokens_free(&tk);
    gpt_options o;
    base_options(&o);
    o.model.layers = 1;
    o.batch = 1;
    o.seq = 16;
    o.num_shards = 3;
    o.shard_index = 3;
    assert_null(gpt_trainer_create(&o, err, sizeof err));
    o.shard_index = 2;
    trainer *t = gpt_trainer_create(&o, err, sizeof err);
    assert_non_null(t);
    trainer_stats st;
    assert_int_equal(t->step(t, &st, err, sizeof err), 0);
    t->destroy(t);
}

int main(int argc, char **argv)
{
    (void)argc;
    gpt_openblas_autotune(argv);
    if (system("command -v bible >/dev/null 2>&1") != 0) {
        printf("SKIP: the bible command is missing (apt-get install bible-kjv bible-kjv-text)\n");
        return 77;
    }
    mkdir("build", 0755);
    if (access(TXT, R_OK) != 0 && system("bible 'Gen1:1-Rev22:21' > " TXT ".tmp && mv " TXT ".tmp " TXT) != 0) {
        printf("failed to dump the Bible with: bible 'Gen1:1-Rev22:21'\n");
        return 1;
    }
    char err[512];
    if (gpt_prepare_data(TXT, TOK, 0.05, err, sizeof err)) {
        printf("prepare-data: %s\n", err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shards),
        cmocka_unit_test(test_checkpoint_resume),
        cmocka_unit_test(test_learns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
