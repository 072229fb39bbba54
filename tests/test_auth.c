/* test_auth.c: the run-secret challenge (common/net/auth.h): the answer is HMAC-SHA256 of the documented
 * message (checked against a value computed independently with `openssl dgst -sha256 -hmac`), a wrong
 * secret, nonce, worker or run is refused, and nonces are fresh hex strings, made also when the process has
 * no descriptor left. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <sys/resource.h>
#include <unistd.h>

#include "net/auth.h"
#include "fd_limit.h"

static void test_known_answer(void **state)
{
    (void)state;
    char out[AUTH_MAC_LEN + 1];
    /* printf 'n0nce\nw1\nrunA' | openssl dgst -sha256 -hmac s3cret */
    auth_answer("s3cret", "n0nce", "w1", "runA", out);
    assert_string_equal(out, "3479412a2e165d98e99ef5e8dd5144dc3c30c351ab310c464980a6e9aa9c4e0b");
    assert_int_equal(auth_check("s3cret", "n0nce", "w1", "runA", out), 0);
}

static void test_refusals(void **state)
{
    (void)state;
    char out[AUTH_MAC_LEN + 1];
    auth_answer("s3cret", "n0nce", "w1", "runA", out);
    assert_int_equal(auth_check("other", "n0nce", "w1", "runA", out), -1);
    assert_int_equal(auth_check("s3cret", "n0ncf", "w1", "runA", out), -1);
    assert_int_equal(auth_check("s3cret", "n0nce", "w2", "runA", out), -1);
    assert_int_equal(auth_check("s3cret", "n0nce", "w1", "runB", out), -1);
    assert_int_equal(auth_check("s3cret", "n0nce", "w1", "runA", "short"), -1);
}

static void test_nonces(void **state)
{
    (void)state;
    char a[AUTH_NONCE_LEN + 1], b[AUTH_NONCE_LEN + 1];
    assert_int_equal(auth_nonce(a), 0);
    assert_int_equal(auth_nonce(b), 0);
    assert_int_equal(strlen(a), AUTH_NONCE_LEN);
    assert_int_equal(strspn(a, "0123456789abcdef"), AUTH_NONCE_LEN);
    assert_string_not_equal(a, b);
}

/* A shard-server at its descriptor limit (`ulimit -n`) still has the connection it accepted: its challenge must
 * not need another descriptor. auth_nonce read /dev/urandom, and every hello then got `BUSY cannot make a
 * challenge (no randomness)`, a message about the wrong thing, while the run stalled (failed before: -1). */
static void test_nonce_without_descriptors(void **state)
{
    (void)state;
    fd_limit lim;
    assert_int_equal(fd_limit_exhaust(&lim), 0);
    assert_int_equal(errno, EMFILE);
    char a[AUTH_NONCE_LEN + 1] = "";
    int rc = auth_nonce(a);
    assert_int_equal(fd_limit_restore(&lim), 0);
    assert_int_equal(rc, 0);
    assert_int_equal(strlen(a), AUTH_NONCE_LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answer),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_nonces),
        cmocka_unit_test(test_nonce_without_descriptors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
