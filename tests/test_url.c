/*
 * test_url.c: Redis URL parsing (common/redis/url.c): every accepted form with its defaults, the
 * password-free formatting used in logs, every class of rejection with a helpful message, and
 * redis_url_pick: where a process takes its URL from (--redis, --redis-file, $DL_REDIS_URL); and the
 * pieces of common/redis/sentinel.c that read the Sentinels' replies: the failover announcements (which
 * master, its new address; another master's or a malformed one ignored) and the count of their answers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>

#include "redis/sentinel.h"
#include "redis/url.h"

static void parses_host_only_with_defaults(void **state)
{
    (void)state;
    redis_url u;
    char err[256];
    assert_int_equal(redis_url_parse("redis://127.0.0.1", &u, err, sizeof err), 0);
    assert_int_equal(u.is_unix, 0);
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.port, 6379);
    assert_int_equal(u.db, 0);
    assert_string_equal(u.user, "");
    assert_string_equal(u.pass, "");
}

static void parses_user_pass_port_db(void **state)
{
    (void)state;
    redis_url u;
    char err[256];
    assert_int_equal(redis_url_parse("redis://worker:s3cret@redis.example:6380/5", &u, err, sizeof err), 0);
    assert_string_equal(u.user, "worker");
    assert_string_equal(u.pass, "s3cret");
    assert_string_equal(u.host, "redis.example");
    assert_int_equal(u.port, 6380);
    assert_int_equal(u.db, 5);
}

static void parses_password_only(void **state)
{
    (void)state;
    redis_url u;
    char err[256];
    assert_int_equal(redis_url_parse("redis://:pw@localhost", &u, err, sizeof err), 0);
    assert_string_equal(u.user, "");
    assert_string_equal(u.pass, "pw");
    assert_string_equal(u.host, "localhost");
    assert_int_equal(u.port, 6379);
}

static void percent_decodes_user_and_password(void **state)
{
    (void)state;
    redis_url u;
    char err[256];
    assert_int_equal(redis_url_parse("redis://a%40b:p%3Aw%2Fd%25@h:1/", &u, err, sizeof err), 0);
    assert_string_equal(u.user, "a@b");
    assert_string_equal(u.pass, "p:w/d%");
    assert_int_equal(u.port, 1);
    assert_int_equal(u.db, 0);
}

static void parses_ipv6_in_brackets(void **state)
{
    (void)state;
    redis_url u;
    char err[256];
    char buf[512];
    assert_int_equal(redis_url_parse("redis://[::1]:6390/2", &u, err, sizeof err), 0);
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 6390);
    assert_int_equal(u.db, 2);
    assert_int_equal(redis_url_format(&u, buf, sizeof buf), 0);
    assert_string_equal(buf, "redis://[::1]:6390/2");
    assert_int_equal(redis_url_parse("redis://[fe80::1]", &u, err, sizeof err), 0);
    assert_string_equal(u.host, "fe80::1");
    assert_int_equal(u.port, 6379);
}

static void parses_unix_socket(void **state)
{
    (void)state;
    redis_url u;
    char err[256];
    assert_int_equal(redis_url_parse("unix:///run/redis/redis.sock", &u, err, sizeof err), 0);
    assert_int_equal(u.is_unix, 1);
    assert_string_equal(u.path, "/run/redis/redis.sock");
    assert_int_equal(u.db, 0);
    assert_int_equal(redis_url_parse("unix:///tmp/r.sock?db=3", &u, err, sizeof err), 0);
    assert_string_equal(u.path, "/tmp/r.sock");
    assert_int_equal(u.db, 3);
    assert_int_equal(redis_url_parse("unix://alice:p%40ss@/tmp/r.sock?db=1", &u, err, sizeof err), 0);
    assert_string_equal(u.user, "alice");
    assert_string_equal(u.pass, "p@ss");
    assert_string_equal(u.path, "/tmp/r.sock");
    assert_int_equal(u.db, 1);
}

static void parses_cluster_seeds(void **state)
{
    (void)state;
    redis_url u;
    char err[256];
    assert_int_equal(redis_url_parse("redis://op:pw@10.0.0.1:7000,10.0.0.2,[::1]:7002/0", &u, err, sizeof err), 0);
    assert_int_equal(u.nhosts, 3);
    assert_string_equal(u.host, "10.0.0.1");
    assert_int_equal(u.port, 7000);
    assert_string_equal(u.hosts[1].host, "10.0.0.2");
    assert_int_equal(u.hosts[1].port, 6379);
    assert_string_equal(u.hosts[2].host, "::1");
    assert_int_equal(u.hosts[2].port, 7002);
    assert_string_equal(u.user, "op");
    assert_string_equal(u.sentinel_master, "");
}

static void parses_sentinel_urls(void **state)
{
    (void)state;
    redis_url u;
    char err[256];
    assert_int_equal(redis_url_parse("redis+sentinel://w:p%40ss@127.0.0.1:26379,127.0.0.1:26380,h3/diloco/2"
                                     "?sentinel_username=sen&sentinel_password=s%3Acret",
                                     &u, err, sizeof err),
                     0);
    assert_int_equal(u.nhosts, 3);
    assert_int_equal(u.hosts[1].port, 26380);
    assert_string_equal(u.hosts[2].host, "h3");
    assert_int_equal(u.hosts[2].port, 26379); /* Sentinel's default port */
    assert_string_equal(u.sentinel_master, "diloco");
    assert_int_equal(u.db, 2);
    assert_string_equal(u.user, "w");
    assert_string_equal(u.pass, "p@ss");
    assert_string_equal(u.sentinel_user, "sen");
    assert_string_equal(u.sentinel_pass, "s:cret");
    assert_int_equal(redis_url_parse("redis-sentinel://10.1.1.1/mymaster", &u, err, sizeof err), 0);
    assert_int_equal(u.nhosts, 1);
    assert_string_equal(u.sentinel_master, "mymaster");
    assert_int_equal(u.db, 0);
    char buf[600];
    assert_int_equal(redis_url_format(&u, buf, sizeof buf), 0);
    assert_string_equal(buf, "redis+sentinel://10.1.1.1:26379/mymaster/0");
}

static void format_hides_the_password(void **state)
{
    (void)state;
    redis_url u;
    char err[256];
    char buf[512];
    assert_int_equal(redis_url_parse("redis://op:topsecret@h:7000/1", &u, err, sizeof err), 0);
    assert_int_equal(redis_url_format(&u, buf, sizeof buf), 0);
    assert_string_equal(buf, "redis://op@h:7000/1");
    assert_null(strstr(buf, "topsecret"));
    assert_int_equal(redis_url_format(&u, buf, 5), -1);
    /* every seed and Sentinel is written (IPv6 in brackets), and a master name that needed escapes
     * gets them back: found by fuzz/fuzz_url.c, whose round trip dropped all seeds but the first */
    assert_int_equal(redis_url_parse("redis://n1:7000,[::1]:7001", &u, err, sizeof err), 0);
    assert_int_equal(redis_url_format(&u, buf, sizeof buf), 0);
    assert_string_equal(buf, "redis://n1:7000,[::1]:7001/0");
    assert_int_equal(redis_url_parse("redis+sentinel://s1,[::1]:26380/my%2Fmaster/2", &u, err, sizeof err), 0);
    assert_int_equal(redis_url_format(&u, buf, sizeof buf), 0);
    assert_string_equal(buf, "redis+sentinel://s1:26379,[::1]:26380/my%2Fmaster/2");
    redis_url back;
    assert_int_equal(redis_url_parse(buf, &back, err, sizeof err), 0);
    assert_string_equal(back.sentinel_master, "my/master");
}

/* Every rejection returns -1 and an error message containing the expected words. */
static void expect_reject(const char *url, const char *needle)
{
    redis_url u;
    char err[256] = "";
    int rc = redis_url_parse(url, &u, err, sizeof err);
    if (rc != -1 || strstr(err, needle) == NULL)
        fail_msg("url '%s': rc %d err '%s', wanted '%s'", url ? url : "(null)", rc, err, needle);
}

static void rejects_empty_and_other_schemes(void **state)
{
    (void)state;
    expect_reject("", "empty");
    expect_reject(NULL, "empty");
    expect_reject("http://h:6379", "unsupported");
    expect_reject("rediss://h", "unsupported");
    expect_reject("127.0.0.1:6379", "unsupported");
}

static void rejects_bad_sentinel_and_seed_urls(void **state)
{
    (void)state;
    expect_reject("redis+sentinel://127.0.0.1:26379", "missing master name");
    expect_reject("redis+sentinel://127.0.0.1:26379/", "missing master name");
    expect_reject("redis+sentinel://127.0.0.1/m?foo=1", "unknown query");
    expect_reject("redis+sentinel://127.0.0.1/m/x", "bad database");
    expect_reject("redis://h1,,h3", "missing host");
    expect_reject("redis://h1?db=2", "a redis:// URL takes no query ('?db=2'): give the database as its path");
    expect_reject("redis://h1:6379?db=2", "takes no query");
    expect_reject("redis://a,b,c,d,e,f,g,h,i", "too many hosts");
}

static void rejects_bad_ports(void **state)
{
    (void)state;
    expect_reject("redis://h:0", "bad port");
    expect_reject("redis://h:65536", "bad port");
    expect_reject("redis://h:99999999999999999999", "bad port");
    expect_reject("redis://h:abc", "bad port");
    expect_reject("redis://h:", "bad port");
    expect_reject("redis://h:-1", "bad port");
    expect_reject("redis://h:+80", "bad port");
    expect_reject("redis://[::1]:x", "bad port");
}

static void rejects_bad_db(void **state)
{
    (void)state;
    expect_reject("redis://h/x", "database");
    expect_reject("redis://h/-1", "database");
    expect_reject("redis://h/1/2", "database");
    expect_reject("redis://h/99999999999", "database");
    expect_reject("unix:///s?db=", "database");
    expect_reject("unix:///s?db=q", "database");
    expect_reject("unix:///s?timeout=3", "unknown query");
}

static void rejects_missing_host_or_path(void **state)
{
    (void)state;
    expect_reject("redis://", "missing host");
    expect_reject("redis://:6379", "missing host");
    expect_reject("redis://u:p@", "missing host");
    expect_reject("redis://[]:1", "missing host");
    expect_reject("redis://[::1", "unterminated");
    expect_reject("redis://[::1]x", "after ']'");
    expect_reject("unix://", "missing socket path");
    /* found by fuzz/fuzz_url.c: "[[]" parsed to the host "[", which no resolver knows and which
     * redis_url_format wrote back as an unterminated bracket */
    expect_reject("redis://[[]", "not an IPv6 address");
    expect_reject("redis://[[:]", "bad character '['");
    expect_reject("redis://a]b:1", "bad character ']'");
    expect_reject("redis://ho st", "bad character (byte 0x20)");
    expect_reject("redis://h!x:1", "bad character '!'");
    expect_reject("redis://h:p@h%41", "bad character '%'");
    expect_reject("redis://[5%25_0]", "not an IPv6 address"); /* formatted back without brackets: "5%25_0" */
}

static void rejects_overlong_parts_and_bad_escapes(void **state)
{
    (void)state;
    char url[1200];
    char longpart[600];
    memset(longpart, 'a', sizeof longpart - 1);
    longpart[sizeof longpart - 1] = '\0';
    snprintf(url, sizeof url, "redis://%s:1", longpart);
    expect_reject(url, "host");
    snprintf(url, sizeof url, "redis://%.200s@h", longpart);
    expect_reject(url, "user name");
    snprintf(url, sizeof url, "redis://:%s@h", longpart);
    expect_reject(url, "password");
    snprintf(url, sizeof url, "unix://%s", longpart);
    expect_reject(url, "socket path");
    expect_reject("redis://:p%4@h", "percent");
    expect_reject("redis://:p%zz@h", "percent");
    expect_reject("redis://:p%00@h", "%00");
}

/* A temporary file holding `content`; its path goes to path (unlinked by the caller). */
static void temp_file(char *path, size_t cap, const char *content)
{
    snprintf(path, cap, "/tmp/test_url.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(content);
    assert_int_equal(write(fd, content, n), (ssize_t)n);
    close(fd);
}

static void pick_prefers_the_flag_then_the_file_then_the_environment(void **state)
{
    (void)state;
    char out[REDIS_URL_MAX], err[256], path[64];
    setenv(REDIS_URL_ENV, "redis://env:pw@h:1", 1);
    assert_int_equal(redis_url_pick("redis://flag@h:2", NULL, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "redis://flag@h:2");
    temp_file(path, sizeof path, "  redis://worker:s3cret@10.0.0.1:6379/2 \r\nsecond line\n");
    assert_int_equal(redis_url_pick(NULL, path, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "redis://worker:s3cret@10.0.0.1:6379/2"); /* blanks and newline dropped */
    assert_int_equal(redis_url_pick(NULL, NULL, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "redis://env:pw@h:1");
    /* a file without a final newline is fine too */
    unlink(path);
    temp_file(path, sizeof path, "unix:///run/redis.sock");
    assert_int_equal(redis_url_pick(NULL, path, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "unix:///run/redis.sock");
    unlink(path);
    unsetenv(REDIS_URL_ENV);
}

static void pick_refuses_ambiguity_absence_and_bad_files(void **state)
{
    (void)state;
    char out[REDIS_URL_MAX], err[256], path[64];
    unsetenv(REDIS_URL_ENV);
    assert_int_equal(redis_url_pick(NULL, NULL, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "--redis-file"));
    assert_non_null(strstr(err, REDIS_URL_ENV));
    setenv(REDIS_URL_ENV, "", 1);
    assert_int_equal(redis_url_pick(NULL, NULL, out, sizeof out, err, sizeof err), -1);
    unsetenv(REDIS_URL_ENV);
    /* REDIS_URL, other tools' variable, is not read, and the refusal says so */
    setenv("REDIS_URL", "redis://h", 1);
    assert_int_equal(redis_url_pick(NULL, NULL, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "$REDIS_URL is set, but not read: the variable is " REDIS_URL_ENV));
    unsetenv("REDIS_URL");
    temp_file(path, sizeof path, "redis://h\n");
    assert_int_equal(redis_url_pick("redis://h", path, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "not both"));
    unlink(path);
    assert_int_equal(redis_url_pick(NULL, "/nonexistent/url", out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent/url"));
    temp_file(path, sizeof path, "  \n");
    assert_int_equal(redis_url_pick(NULL, path, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "no Redis URL"));
    unlink(path);
    temp_file(path, sizeof path, "");
    assert_int_equal(redis_url_pick(NULL, path, out, sizeof out, err, sizeof err), -1);
    unlink(path);
    char big[REDIS_URL_MAX + 100];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    temp_file(path, sizeof path, big);
    assert_int_equal(redis_url_pick(NULL, path, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer"));
    unlink(path);
    char small[8];
    assert_int_equal(redis_url_pick("redis://host:6379", NULL, small, sizeof small, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer"));
}

/* A URL that does not parse is refused at the pick, naming where it came from. */
static void pick_refuses_a_bad_url_naming_its_source(void **state)
{
    (void)state;
    char out[REDIS_URL_MAX], err[512], path[64];
    assert_int_equal(redis_url_pick("foo://bar", NULL, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "--redis: unsupported Redis URL 'foo://bar'"));
    temp_file(path, sizeof path, "redis://h:notaport\n");
    assert_int_equal(redis_url_pick(NULL, path, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "--redis-file"));
    assert_non_null(strstr(err, "bad port 'notaport'"));
    unlink(path);
    setenv(REDIS_URL_ENV, "http://h:1", 1);
    assert_int_equal(redis_url_pick(NULL, NULL, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "$" REDIS_URL_ENV ": unsupported Redis URL"));
    unsetenv(REDIS_URL_ENV);
}

/* rediss:// (TLS) is refused saying that TLS goes through stunnel, and where the docs say how (it was "unsupported"
 * with the list of the accepted schemes only). */
/* A refused URL's message never quotes its password: not when its scheme is mistyped or unsupported (it was
 * quoted whole), nor when a '/' in the password, not percent-encoded, cut the URL short (its first characters
 * were quoted as a "bad port"). */
static void refusals_hide_the_password(void **state)
{
    (void)state;
    static const char *const urls[] = {
        "redis:/alice:s3cret@127.0.0.1:6379",
        "redis//alice:s3cret@127.0.0.1:6379",
        "http://alice:s3cret@h:6379",
        "rediss://alice:s3cret@h:6380",
        "redis:alice:s3cret@h",
        "alice:s3cret@h:6379",
        "redis://alice:pa/s3cret@h:6379",
        "redis://:pa/s3cret@h",
        "redis://alice:s3cret@h?x=1",
        "redis+sentinel://u:pa/s3cret@s1/m",
        "redis://alice:s3c@ret@h:x/s3cret@",
        "unix2://alice:s3cret@/tmp/s",
        "redis+sentinel://s1/m?sentinel_pasword=s3cret",
        "unix:///tmp/s?password=s3cret",
    };
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        redis_url u;
        char err[512] = "";
        if (redis_url_parse(urls[i], &u, err, sizeof err) != -1) fail_msg("url '%s' was accepted", urls[i]);
        if (strstr(err, "s3c") != NULL || strstr(err, "pa/") != NULL || strstr(err, "'pa'") != NULL)
            fail_msg("url '%s': the message quotes the password: %s", urls[i], err);
    }
    expect_reject("redis://alice:pa/s3cret@h:6379", "percent-encode a '/'");
    expect_reject("redis:/alice:s3cret@127.0.0.1:6379", "'redis:/alice:***@127.0.0.1:6379'");
    expect_reject("http://alice:s3cret@h:6379", "'http://alice:***@h:6379'");
    expect_reject("127.0.0.1:6379", "a host and port alone want redis:// before them");
    /* what still parses: a '?' or '@' in a password, an '@' in a Sentinel's password, a scheme in capitals */
    redis_url u;
    char err[256];
    assert_int_equal(redis_url_parse("redis://u:p?w@h:7", &u, err, sizeof err), 0);
    assert_string_equal(u.pass, "p?w");
    assert_int_equal(redis_url_parse("redis+sentinel://s1/m?sentinel_password=a@b", &u, err, sizeof err), 0);
    assert_string_equal(u.sentinel_pass, "a@b");
    assert_int_equal(redis_url_parse("REDIS://H:7/2", &u, err, sizeof err), 0);
    assert_int_equal(u.port, 7);
    assert_int_equal(u.db, 2);
}

static void tls_url_points_to_stunnel(void **state)
{
    (void)state;
    redis_url u;
    char err[512];
    assert_int_equal(redis_url_parse("rediss://user:pw@redis.example.org:6380/0", &u, err, sizeof err), -1);
    assert_non_null(strstr(err, "the processes do not speak TLS themselves; put stunnel in front"));
    assert_non_null(strstr(err, "docs/deploy.md, \"Across machines\", 3. TLS with stunnel"));
    assert_int_equal(redis_url_parse("rediss+sentinel://s1/m", &u, err, sizeof err), -1);
    assert_non_null(strstr(err, "put stunnel in front"));
}

/* A pub/sub message as hiredis gives it: ["message", channel, text]. */
typedef struct fake_message {
    redisReply r, part[3], *parts[3];
} fake_message;

static redisReply *message(fake_message *m, const char *kind, const char *channel, const char *text)
{
    const char *s[3] = {kind, channel, text};
    memset(m, 0, sizeof *m);
    for (int i = 0; i < 3; i++) {
        m->part[i] = (redisReply){.type = REDIS_REPLY_STRING, .str = (char *)s[i], .len = strlen(s[i])};
        m->parts[i] = &m->part[i];
    }
    m->r = (redisReply){.type = REDIS_REPLY_ARRAY, .elements = 3, .element = m->parts};
    return &m->r;
}

static void announcements_name_the_new_master(void **state)
{
    (void)state;
    fake_message m;
    char host[256];
    int port = 0;
    assert_int_equal(sentinel_announcement(message(&m, "message", "+switch-master", "m 127.0.0.1 6379 10.0.0.2 6380"),
                                           "m", host, sizeof host, &port),
                     1);
    assert_string_equal(host, "10.0.0.2");
    assert_int_equal(port, 6380);
    assert_int_equal(sentinel_announcement(message(&m, "message", "+promoted-slave",
                                                   "slave 10.0.0.3:6381 10.0.0.3 6381 @ m 127.0.0.1 6379"),
                                           "m", host, sizeof host, &port),
                     1);
    assert_string_equal(host, "10.0.0.3");
    assert_int_equal(port, 6381);
    /* another master of the same Sentinels, a name that only starts like ours, a confirmation, garbage */
    assert_int_equal(sentinel_announcement(message(&m, "message", "+switch-master", "m2 127.0.0.1 6379 10.0.0.2 6380"),
                                           "m", host, sizeof host, &port),
                     0);
    assert_int_equal(sentinel_announcement(message(&m, "message", "+promoted-slave",
                                                   "slave 10.0.0.3:6381 10.0.0.3 6381 @ other 127.0.0.1 6379"),
                                           "m", host, sizeof host, &port),
                     0);
    assert_int_equal(
        sentinel_announcement(message(&m, "subscribe", "+switch-master", "1"), "m", host, sizeof host, &port), 0);
    assert_int_equal(
        sentinel_announcement(message(&m, "message", "+switch-master", "m 127.0.0.1"), "m", host, sizeof host, &port),
        0);
    assert_int_equal(sentinel_announcement(message(&m, "message", "+sdown", "master m 127.0.0.1 6379"), "m", host,
                                           sizeof host, &port),
                     0);
}

static void votes_put_the_most_named_master_first(void **state)
{
    (void)state;
    sentinel_named named[REDIS_URL_MAX_HOSTS];
    int n = 0;
    n = sentinel_vote(named, n, "10.0.0.1", 6379); /* a Sentinel that has not seen the failover yet */
    n = sentinel_vote(named, n, "10.0.0.2", 6380);
    n = sentinel_vote(named, n, "10.0.0.2", 6380);
    assert_int_equal(n, 2);
    assert_string_equal(named[0].host, "10.0.0.2");
    assert_int_equal(named[0].port, 6380);
    assert_int_equal(named[0].votes, 2);
    assert_int_equal(named[1].votes, 1);
    n = sentinel_vote(named, n, "10.0.0.2", 6381); /* same host, another port: another master */
    assert_int_equal(n, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_host_only_with_defaults),
        cmocka_unit_test(parses_user_pass_port_db),
        cmocka_unit_test(parses_password_only),
        cmocka_unit_test(percent_decodes_user_and_password),
        cmocka_unit_test(parses_ipv6_in_brackets),
        cmocka_unit_test(parses_unix_socket),
        cmocka_unit_test(parses_cluster_seeds),
        cmocka_unit_test(parses_sentinel_urls),
        cmocka_unit_test(rejects_bad_sentinel_and_seed_urls),
        cmocka_unit_test(format_hides_the_password),
        cmocka_unit_test(rejects_empty_and_other_schemes),
        cmocka_unit_test(rejects_bad_ports),
        cmocka_unit_test(refusals_hide_the_password),
        cmocka_unit_test(rejects_bad_db),
        cmocka_unit_test(rejects_missing_host_or_path),
        cmocka_unit_test(rejects_overlong_parts_and_bad_escapes),
        cmocka_unit_test(pick_prefers_the_flag_then_the_file_then_the_environment),
        cmocka_unit_test(pick_refuses_ambiguity_absence_and_bad_files),
        cmocka_unit_test(pick_refuses_a_bad_url_naming_its_source),
        cmocka_unit_test(tls_url_points_to_stunnel),
        cmocka_unit_test(announcements_name_the_new_master),
        cmocka_unit_test(votes_put_the_most_named_master_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
