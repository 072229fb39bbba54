/*
 * test_hash.c: common/math/hash.c gives exactly XXH3_64bits (the library's value) on this CPU's code path,
 * one-shot and streamed in uneven pieces, for every size class of XXH3 (0, 1-16, 17-128, 129-240,
 * longer) and for unaligned data.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "base/util.h"
#include "math/hash.h"

static uint8_t *random_bytes(size_t n, uint64_t seed)
{
    uint8_t *b = malloc(n + 1);
    assert_non_null(b);
    for (size_t i = 0; i < n + 1; i++) b[i] = (uint8_t)(splitmix64(&seed) >> 24);
    return b;
}

static void one_shot_equals_the_library(void **state)
{
    (void)state;
    const size_t sizes[] = {0, 1, 3, 16, 17, 100, 128, 129, 200, 240, 241, 1000, 4096, 65537, 3 << 20};
    uint8_t *b = random_bytes(3 << 20, 1);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        assert_int_equal(hash64(b, sizes[i]), XXH3_64bits(b, sizes[i]));
        assert_int_equal(hash64(b + 1, sizes[i]), XXH3_64bits(b + 1, sizes[i])); /* unaligned */
    }
    free(b);
}

static void streamed_in_uneven_pieces_equals_one_shot(void **state)
{
    (void)state;
    size_t n = (2 << 20) + 333;
    uint8_t *b = random_bytes(n, 2);
    XXH3_state_t *xs = XXH3_createState();
    assert_non_null(xs);
    uint64_t seed = 3;
    for (int round = 0; round < 4; round++) {
        XXH3_64bits_reset(xs);
        for (size_t off = 0; off < n;) {
            size_t len = (size_t)(splitmix64(&seed) % (round == 0 ? 300 : 200000)) + 1;
            if (len > n - off) len = n - off;
            hash_update(xs, b + off, len);
            off += len;
        }
        assert_int_equal(XXH3_64bits_digest(xs), XXH3_64bits(b, n));
    }
    XXH3_freeState(xs);
    /* and the check can fail: one byte changed changes the value */
    uint64_t before = hash64(b, n);
    b[n / 2] ^= 1;
    assert_int_not_equal(hash64(b, n), before);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_shot_equals_the_library),
        cmocka_unit_test(streamed_in_uneven_pieces_equals_one_shot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
