/*
 * test_log.c: the logger (common/base/log.c): the exact line format, level filtering (also from the
 * LOG_LEVEL environment variable), that lines written by many threads at once never interleave, and
 * per-thread sinks (log_use_sink, what a libdiloco session's log_callback rides on): each thread's
 * messages reach its own sink and only that one, filtered at the sink's level, and putting the previous
 * sink back restores stderr.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <regex.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/log.h"

#define THREADS 8
#define LINES_PER_THREAD 500

/* Run fn with stderr redirected to a temporary file; returns the file's contents (caller frees). */
static char *capture_stderr(void (*fn)(void))
{
    char path[] = "/tmp/test_log_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    dup2(fd, STDERR_FILENO);
    fn();
    dup2(saved, STDERR_FILENO);
    close(saved);
    off_t size = lseek(fd, 0, SEEK_END);
    char *text = calloc(1, (size_t)size + 1);
    assert_non_null(text);
    assert_int_equal(pread(fd, text, (size_t)size, 0), size);
    close(fd);
    return text;
}

static size_t count_lines(const char *text)
{
    size_t n = 0;
    for (const char *p = text; *p; p++) n += *p == '\n';
    return n;
}

static void log_levels(void)
{
    log_init("unit-test");
    log_set_level(LOG_INFO);
    log_debug("hidden %d", 1);
    log_info("shown %d", 2);
    log_warn("careful");
    log_error("broken: %s", "disk");
}

static void line_format_and_level_filter(void **state)
{
    (void)state;
    char *text = capture_stderr(log_levels);
    assert_int_equal(count_lines(text), 3);
    assert_null(strstr(text, "hidden"));
    regex_t re;
    assert_int_equal(regcomp(&re,
                             "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z unit-test\\[[0-9]+\\] "
                             "INFO shown 2\n"
                             "[^\n]+ unit-test\\[[0-9]+\\] WARN careful\n"
                             "[^\n]+ unit-test\\[[0-9]+\\] ERROR broken: disk\n$",
                             REG_EXTENDED),
                     0);
    if (regexec(&re, text, 0, NULL, 0) != 0) fail_msg("unexpected log output:\n%s", text);
    regfree(&re);
    free(text);
}

static void log_level_from_env(void)
{
    setenv("LOG_LEVEL", "error", 1);
    log_init("env-test");
    log_warn("not shown");
    log_error("shown");
    setenv("LOG_LEVEL", "debug", 1);
    log_init("env-test");
    log_debug("debug shown");
    unsetenv("LOG_LEVEL");
}

static void level_from_environment(void **state)
{
    (void)state;
    char *text = capture_stderr(log_level_from_env);
    assert_int_equal(count_lines(text), 2);
    assert_null(strstr(text, "not shown"));
    assert_non_null(strstr(text, "ERROR shown"));
    assert_non_null(strstr(text, "DEBUG debug shown"));
    free(text);
}

static void *log_many(void *arg)
{
    long id = (long)arg;
    for (int i = 0; i < LINES_PER_THREAD; i++)
        log_info("thread %ld line %d %s", id, i, "padding-padding-padding-padding-padding-padding-padding");
    return NULL;
}

static void log_from_threads(void)
{
    log_init("threads");
    log_set_level(LOG_INFO);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, log_many, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
}

static void lines_from_threads_never_interleave(void **state)
{
    (void)state;
    char *text = capture_stderr(log_from_threads);
    assert_int_equal(count_lines(text), THREADS * LINES_PER_THREAD);
    regex_t re;
    assert_int_equal(regcomp(&re, "^[^ ]+Z threads\\[[0-9]+\\] INFO thread [0-9]+ line [0-9]+ (padding-?)+$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
        if (regexec(&re, line, 0, NULL, 0) != 0) fail_msg("mangled line: '%s'", line);
    regfree(&re);
    free(text);
}

/* A sink that keeps what it got as "LEVEL:message\n" lines. */
typedef struct kept {
    char text[8192];
    size_t len;
} kept;

static void keep_message(void *ctx, int level, const char *message)
{
    kept *k = ctx;
    k->len += (size_t)snprintf(k->text + k->len, sizeof k->text - k->len, "%d:%s\n", level, message);
}

typedef struct sink_thread {
    log_sink *sink;
    const char *name;
} sink_thread;

static void *log_to_own_sink(void *arg)
{
    sink_thread *t = arg;
    log_sink *before = log_use_sink(t->sink);
    for (int i = 0; i < 100; i++) log_info("%s says %d", t->name, i);
    log_debug("%s debug", t->name);
    log_use_sink(before);
    return NULL;
}

static void sinks_of_two_threads(void)
{
    static kept a, b;
    log_sink sa, sb;
    log_sink_init(&sa, keep_message, &a, LOG_INFO);
    log_sink_init(&sb, keep_message, &b, LOG_DEBUG);
    sink_thread ta = {&sa, "alpha"}, tb = {&sb, "beta"};
    pthread_t t[2];
    pthread_create(&t[0], NULL, log_to_own_sink, &ta);
    pthread_create(&t[1], NULL, log_to_own_sink, &tb);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    log_info("main thread to stderr"); /* the main thread never had a sink */
    assert_int_equal(count_lines(a.text), 100);
    assert_int_equal(count_lines(b.text), 101);
    assert_non_null(strstr(a.text, "1:alpha says 0\n"));
    assert_non_null(strstr(a.text, "1:alpha says 99\n"));
    assert_null(strstr(a.text, "beta"));
    assert_null(strstr(a.text, "alpha debug")); /* below sa's level */
    assert_non_null(strstr(b.text, "0:beta debug\n"));
    assert_null(strstr(b.text, "alpha"));
    log_sink_destroy(&sa);
    log_sink_destroy(&sb);
}

static void sinks_route_per_thread(void **state)
{
    (void)state;
    log_set_level(LOG_INFO);
    char *text = capture_stderr(sinks_of_two_threads);
    assert_int_equal(count_lines(text), 1);
    assert_non_null(strstr(text, "INFO main thread to stderr"));
    free(text);
}

static void nested_sinks(void)
{
    static kept outer, inner;
    log_sink so, si, quiet;
    log_sink_init(&so, keep_message, &outer, -1); /* the process's level */
    log_sink_init(&si, keep_message, &inner, LOG_WARN);
    log_sink_init(&quiet, NULL, NULL, LOG_ERROR); /* stderr, but only errors */
    log_set_level(LOG_DEBUG);
    assert_null(log_use_sink(&so));
    log_debug("to outer");
    assert_ptr_equal(log_use_sink(&si), &so);
    log_info("dropped by inner");
    log_warn("to inner");
    assert_ptr_equal(log_use_sink(&so), &si);
    log_error("outer again");
    assert_ptr_equal(log_use_sink(&quiet), &so);
    log_warn("below the quiet sink's level");
    log_error("error to stderr");
    assert_ptr_equal(log_use_sink(NULL), &quiet);
    log_info("stderr again");
    assert_string_equal(outer.text, "0:to outer\n3:outer again\n");
    assert_string_equal(inner.text, "2:to inner\n");
    log_sink_destroy(&so);
    log_sink_destroy(&si);
    log_sink_destroy(&quiet);
}

static void sinks_nest_and_restore(void **state)
{
    (void)state;
    char *text = capture_stderr(nested_sinks);
    assert_int_equal(count_lines(text), 2);
    assert_non_null(strstr(text, "ERROR error to stderr\n"));
    assert_non_null(strstr(text, "INFO stderr again\n"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(line_format_and_level_filter),
        cmocka_unit_test(level_from_environment),
        cmocka_unit_test(lines_from_threads_never_interleave),
        cmocka_unit_test(sinks_route_per_thread),
        cmocka_unit_test(sinks_nest_and_restore),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
