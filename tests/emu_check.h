/* emu_check.h: the checks of the tests that run kernel source under the lane emulator (tests/test_*_emu.cc,
 * tests/test_simt_emu.cc): CHECK(cond, fmt, ...) prints a FAIL line and counts it without stopping, so one
 * run shows every failing case; emu_finish prints the count or the passing summary and gives the exit
 * status. */
#ifndef DILOCO_EMU_CHECK_H
#define DILOCO_EMU_CHECK_H

#include <stdio.h>

static int emu_failures;

#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            emu_failures++;                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
        }                                               \
    } while (0)

/* 0 when every check passed (and prints `passed`), 1 otherwise */
static inline int emu_finish(const char *passed)
{
    if (emu_failures) {
        printf("%d checks failed\n", emu_failures);
        return 1;
    }
    printf("%s\n", passed);
    return 0;
}

#endif
