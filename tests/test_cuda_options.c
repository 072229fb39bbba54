/* test_cuda_options: the CPU side of the CUDA backend, which runs everywhere (no GPU needed):
 * --device / --tf32 / --precision / --attention parsing, the backend gpt_trainer_create picks (auto: cuda
 * only when a device is present), a clear error for --device cuda without a device (or without the CUDA
 * build), for --precision bf16 on the CPU backend and for --attention gemm or flash without --precision bf16
 * (flash also for a head size that is not a multiple of 16 up to 128, on a GPU), and
 * that asking for the CUDA backend directly without a device fails cleanly instead of crashing. Linked like bin/worker: the backend is opened by
 * worker/gpt/gpt_cuda_loader.c, and it must load here too. With CUDA_EMU_REFUSE_KERNEL set (it_cuda_emu.sh,
 * the CPU CUDA emulator's fault injection) it runs test_flash_check_refused alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.h"
#include "gpt/gpt.h"
#ifdef DILOCO_HAVE_CUDA
#include "gpt/gpt_cuda_loader.h"
#endif

static int have_device(void)
{
#ifdef DILOCO_HAVE_CUDA
    return gpt_cuda_device_count(NULL, 0) > 0;
#else
    return 0;
#endif
}

static void test_parse(void **state)
{
    (void)state;
    gpt_options o;
    gpt_options_default(&o);
    assert_int_equal(o.device, GPT_DEVICE_AUTO);
    assert_int_equal(o.tf32, 0);
    char a0[] = "--device", a1[] = "cuda", a2[] = "--tf32", a3[] = "--batch", a4[] = "3", a5[] = "keep";
    char *argv[] = {a0, a1, a2, a3, a4, a5, NULL};
    char err[256];
    assert_int_equal(gpt_options_parse(&o, 6, argv, err, sizeof err), 5); /* --tf32 takes no value */
    assert_int_equal(o.device, GPT_DEVICE_CUDA);
    assert_int_equal(o.tf32, 1);
    assert_int_equal(o.batch, 3);
    assert_string_equal(argv[0], "keep");
    char b0[] = "--device=cpu", b1[] = "--tf32=0";
    char *argv2[] = {b0, b1, NULL};
    assert_int_equal(gpt_options_parse(&o, 2, argv2, err, sizeof err), 2);
    assert_int_equal(o.device, GPT_DEVICE_CPU);
    assert_int_equal(o.tf32, 0);
    char c0[] = "--device=auto";
    char *argv3[] = {c0, NULL};
    assert_int_equal(gpt_options_parse(&o, 1, argv3, err, sizeof err), 1);
    assert_int_equal(o.device, GPT_DEVICE_AUTO);
    char d0[] = "--device", d1[] = "gpu";
    char *argv4[] = {d0, d1, NULL};
    assert_int_equal(gpt_options_parse(&o, 2, argv4, err, sizeof err), -1);
    assert_non_null(strstr(err, "--device"));
    char e0[] = "--tf32=yes";
    char *argv5[] = {e0, NULL};
    assert_int_equal(gpt_options_parse(&o, 1, argv5, err, sizeof err), -1);
}

static gpt_options small(int device)
{
    gpt_options o;
    gpt_options_default(&o);
    o.model = (gpt_config){.layers = 1, .heads = 2, .dim = 16, .ctx = 16, .vocab = 32};
    o.batch = 2;
    o.seq = 8;
    o.threads = 1;
    o.eval_every = 0;
    o.device = device;
    return o;
}

static void test_backend_choice(void **state)
{
    (void)state;
    char err[256];
    gpt_options o = small(GPT_DEVICE_CPU);
    trainer *t = gpt_trainer_create(&o, err, sizeof err);
    assert_non_null(t);
    assert_string_equal(gpt_trainer_device(t), "cpu");
    assert_null(t->params_changed);
    trainer_stats s;
    assert_int_equal(t->step(t, &s, err, sizeof err), 0);
    t->destroy(t);

    o = small(GPT_DEVICE_AUTO);
    t = gpt_trainer_create(&o, err, sizeof err);
    assert_non_null(t);
    printf("--device auto picked %s (CUDA device present: %s)\n", gpt_trainer_device(t), have_device() ? "yes" : "no");
    assert_string_equal(gpt_trainer_device(t), have_device() ? "cuda" : "cpu");
    assert_int_equal(t->step(t, &s, err, sizeof err), 0);
    t->destroy(t);

    o = small(GPT_DEVICE_CUDA);
    err[0] = 0;
    t = gpt_trainer_create(&o, err, sizeof err);
    if (have_device()) {
        assert_non_null(t);
        assert_string_equal(gpt_trainer_device(t), "cuda");
        t->destroy(t);
    } else {
        assert_null(t);
        printf("--device cuda without a device: %s\n", err);
#ifdef DILOCO_HAVE_CUDA
        assert_non_null(strstr(err, "no CUDA device"));
#else
        assert_non_null(strstr(err, "without CUDA") ? strstr(err, "without CUDA") : strstr(err, "no CUDA backend"));
#endif
    }
}

static void test_precision(void **state)
{
    (void)state;
    gpt_options o;
    gpt_options_default(&o);
    assert_int_equal(o.precision, GPT_PRECISION_FP32);
    char a0[] = "--precision", a1[] = "bf16", a2[] = "--precision=fp32", a3[] = "--precision=fp16";
    char *argv[] = {a0, a1, NULL}, *argv2[] = {a2, NULL}, *argv3[] = {a3, NULL};
    char err[256];
    assert_int_equal(gpt_options_parse(&o, 2, argv, err, sizeof err), 2);
    assert_int_equal(o.precision, GPT_PRECISION_BF16);
    assert_int_equal(gpt_options_parse(&o, 1, argv2, err, sizeof err), 1);
    assert_int_equal(o.precision, GPT_PRECISION_FP32);
    assert_int_equal(gpt_options_parse(&o, 1, argv3, err, sizeof err), -1);
    assert_non_null(strstr(err, "--precision"));
    /* bf16 on the CPU backend: refused with the reason, nothing created */
    o = small(GPT_DEVICE_CPU);
    o.precision = GPT_PRECISION_BF16;
    assert_null(gpt_trainer_create(&o, err, sizeof err));
    printf("--precision bf16 --device cpu: %s\n", err);
    assert_non_null(strstr(err, "--precision bf16 needs the CUDA backend"));
    o = small(GPT_DEVICE_AUTO);
    o.precision = GPT_PRECISION_BF16;
    trainer *t = gpt_trainer_create(&o, err, sizeof err);
    if (have_device()) { /* the bf16 path itself: tests/test_cuda_bf16.c */
        assert_non_null(t);
        t->destroy(t);
    } else {
        assert_null(t);
        assert_non_null(strstr(err, "--precision bf16 needs the CUDA backend"));
    }
}

/* a --precision bf16 trainer of o: with a GPU it takes a step; without one it is refused, needing the
 * CUDA backend */
static void bf16_step_or_refused(const gpt_options *o)
{
    char err[256];
    trainer *t = gpt_trainer_create(o, err, sizeof err);
    if (have_device()) {
        assert_non_null(t);
        trainer_stats st;
        assert_int_equal(t->step(t, &st, err, sizeof err), 0);
        t->destroy(t);
    } else {
        assert_null(t);
        assert_non_null(strstr(err, "--precision bf16 needs the CUDA backend"));
    }
}

/* --attention: parsed (auto is the default), auto and fused taken with fp32 (which has its own
 * attention), and gemm or flash without --precision bf16 refused before anything is created, on any
 * device */
static void test_attention(void **state)
{
    (void)state;
    gpt_options o;
    gpt_options_default(&o);
    assert_int_equal(o.attention, GPT_ATTENTION_AUTO);
    char a0[] = "--attention", a1[] = "gemm", a2[] = "--attention=fused", a3[] = "--attention=sdpa",
         a4[] = "--attention=fused", a5[] = "--attention=auto"; /* a parse may reorder its argv: one each */
    char *argv[] = {a0, a1, NULL}, *argv2[] = {a2, NULL}, *argv3[] = {a3, NULL}, *argv4[] = {a4, NULL},
         *argv5[] = {a5, NULL};
    char err[256];
    assert_int_equal(gpt_options_parse(&o, 1, argv4, err, sizeof err), 1);
    assert_int_equal(o.attention, GPT_ATTENTION_FUSED);
    assert_int_equal(gpt_options_parse(&o, 1, argv5, err, sizeof err), 1);
    assert_int_equal(o.attention, GPT_ATTENTION_AUTO);
    assert_int_equal(gpt_options_parse(&o, 2, argv, err, sizeof err), 2);
    assert_int_equal(o.attention, GPT_ATTENTION_GEMM);
    assert_int_equal(gpt_options_parse(&o, 1, argv2, err, sizeof err), 1);
    assert_int_equal(o.attention, GPT_ATTENTION_FUSED);
    assert_int_equal(gpt_options_parse(&o, 1, argv3, err, sizeof err), -1);
    printf("--attention=sdpa: %s\n", err);
    assert_non_null(strstr(err, "--attention"));
    for (int dev = GPT_DEVICE_AUTO; dev <= GPT_DEVICE_CUDA; dev++) {
        o = small(dev);
        o.attention = GPT_ATTENTION_GEMM;
        assert_null(gpt_trainer_create(&o, err, sizeof err));
        assert_non_null(strstr(err, "--attention gemm chooses the attention of --precision bf16"));
        o.attention = GPT_ATTENTION_FLASH;
        assert_null(gpt_trainer_create(&o, err, sizeof err));
        assert_non_null(strstr(err, "--attention flash chooses the attention of --precision bf16"));
    }
    printf("--attention flash with fp32: %s\n", err);
    for (int a = GPT_ATTENTION_FUSED; a <= GPT_ATTENTION_AUTO; a += GPT_ATTENTION_AUTO - GPT_ATTENTION_FUSED) {
        o = small(GPT_DEVICE_CPU); /* fp32: fused and auto are taken */
        o.attention = a;
        trainer *t = gpt_trainer_create(&o, err, sizeof err);
        assert_non_null(t);
        t->destroy(t);
    }
    o = small(GPT_DEVICE_AUTO);
    o.precision = GPT_PRECISION_BF16;
    o.attention = GPT_ATTENTION_GEMM;
    bf16_step_or_refused(&o); /* the gemm attention itself: tests/test_cuda_bf16.c */
}

/* --attention flash: parsed; with --precision bf16 on a GPU a step runs at head size 16 and head size 8
 * is refused by gpt_trainer_create with the kernels' limit; without a GPU both need the CUDA backend */
static void test_attention_flash(void **state)
{
    (void)state;
    gpt_options o = small(GPT_DEVICE_AUTO);
    char a0[] = "--attention=flash", *argv[] = {a0, NULL}, err[256];
    assert_int_equal(gpt_options_parse(&o, 1, argv, err, sizeof err), 1);
    assert_int_equal(o.attention, GPT_ATTENTION_FLASH);
    o.precision = GPT_PRECISION_BF16; /* small: dim 16, 2 heads: head size 8 */
    trainer *t = gpt_trainer_create(&o, err, sizeof err);
    assert_null(t);
    printf("--attention flash, head size 8: %s\n", err);
    assert_non_null(strstr(err, have_device() ? "multiple of 16" : "--precision bf16 needs the CUDA backend"));
    o.model.dim = 32;         /* head size 16 */
    bf16_step_or_refused(&o); /* the flash attention itself: tests/test_cuda_bf16.c */
    /* auto, the default: flash at head size 16, the fused kernels at head size 8 (no refusal) */
    o.attention = GPT_ATTENTION_AUTO;
    bf16_step_or_refused(&o);
    o.model.dim = 16;
    bf16_step_or_refused(&o);
}

/* Run alone by it_cuda_emu.sh, with the CPU CUDA emulator refusing every launch of flash_mma_forward_k
 * (CUDA_EMU_REFUSE_KERNEL, as a GPU refuses a kernel it has not the resources for): --attention auto's
 * device check of the flash kernels meets a CUDA error, and gpt_trainer_create fails saying where and how
 * to train without them; --attention fused then trains. */
static void test_flash_check_refused(void **state)
{
    (void)state;
    gpt_options o = small(GPT_DEVICE_CUDA);
    char err[512];
    o.model.dim = 32; /* head size 16: auto checks flash */
    o.precision = GPT_PRECISION_BF16;
    o.attention = GPT_ATTENTION_AUTO;
    assert_null(gpt_trainer_create(&o, err, sizeof err));
    printf("auto, flash launches refused: %s\n", err);
    assert_non_null(strstr(err, "too many resources requested for launch"));
    assert_non_null(strstr(err, "--attention fused trains without them"));
    o.attention = GPT_ATTENTION_FUSED;
    bf16_step_or_refused(&o);
    printf("--attention fused: a bf16 step runs\n");
}

static void test_no_device_paths(void **state)
{
    (void)state;
#ifdef DILOCO_HAVE_CUDA
    if (have_device()) {
        printf("a CUDA device is present: the no-device paths are not exercised here\n");
        return;
    }
    char err[256] = "", why[256] = "";
    assert_int_equal(gpt_cuda_device_count(why, sizeof why), 0);
    assert_true(why[0] != 0);
    printf("gpt_cuda_device_count: 0 (%s)\n", why);
    gpt_config c = {.layers = 1, .heads = 2, .dim = 16, .ctx = 16, .vocab = 32};
    assert_null(gpt_cuda_create(&c, 2, 8, 0, err, sizeof err));
    assert_non_null(strstr(err, "no CUDA device"));
    /* bin/libdiloco_gpt_cuda.so (found by this program's RUNPATH) loads on a machine without a device */
    assert_int_equal(gpt_cuda_backend_load(err, sizeof err), 0);
#else
    printf("built without CUDA: nothing to check\n");
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),           cmocka_unit_test(test_backend_choice),
        cmocka_unit_test(test_precision),       cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_flash), cmocka_unit_test(test_no_device_paths),
    };
    /* the emulator's fault injection (it_cuda_emu.sh) breaks the flash kernels for the whole process: the
     * one test of that, alone */
    const struct CMUnitTest refused[] = {cmocka_unit_test(test_flash_check_refused)};
    if (getenv("CUDA_EMU_REFUSE_KERNEL")) return cmocka_run_group_tests(refused, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
