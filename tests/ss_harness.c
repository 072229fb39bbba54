/*
 * ss_harness.c: the shard-server unit tests' redis-server, run, servers and requests (ss_harness.h).
 */
#include "ss_harness.h"

#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "math/outer.h"
#include "redis/rconn.h"

static pid_t g_redis_pid = -1;
static char g_dir[] = "/tmp/test_ss_XXXXXX";
static char g_sock[256];
static char g_url[300];
static rconn *g_conn;

int ssh_redis_start(void)
{
    if (mkdtemp(g_dir) == NULL) return -1;
    snprintf(g_sock, sizeof g_sock, "%s/redis.sock", g_dir);
    snprintf(g_url, sizeof g_url, "unix://%s", g_sock);
    char logfile[300];
    snprintf(logfile, sizeof logfile, "%s/redis.log", g_dir);
    g_redis_pid = fork();
    if (g_redis_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a crashed test */
        execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", g_sock, "--save", "", "--appendonly",
               "no", "--dir", g_dir, "--logfile", logfile, "--loglevel", "warning", (char *)NULL);
        _exit(127);
    }
    redis_url u;
    char err[256];
    if (redis_url_parse(g_url, &u, err, sizeof err) != 0) return -1;
    for (int i = 0; i < 100 && g_conn == NULL; i++) {
        g_conn = rconn_connect(&u, 500, err, sizeof err);
        if (g_conn == NULL) sleep_ms(50);
    }
    if (g_conn == NULL) fprintf(stderr, "redis-server did not start: %s\n", err);
    return g_conn != NULL ? 0 : -1;
}

void ssh_redis_stop(void)
{
    if (g_conn != NULL) rconn_free(g_conn);
    g_conn = NULL;
    if (g_redis_pid > 0) {
        kill(g_redis_pid, SIGTERM);
        waitpid(g_redis_pid, NULL, 0);
    }
    const char *files[3] = {"redis.sock", "redis.log", "init.log"};
    char path[300];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, files[i]);
        unlink(path);
    }
    rmdir(g_dir);
}

redisReply *ssh_cmd(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = rconn_vcommand(g_conn, fmt, ap);
    va_end(ap);
    return r;
}

void ssh_shard_str(const char *run, int k, const char *field, char *out, size_t cap)
{
    char key[KEY_MAX];
    redisReply *r = ssh_cmd("HGET %s %d:%s", key_run(key, sizeof key, run, "shards"), k, field);
    snprintf(out, cap, "%s", r != NULL && r->type == REDIS_REPLY_STRING ? r->str : "");
    if (r != NULL) freeReplyObject(r);
}

long long ssh_shard_int(const char *run, int k, const char *field)
{
    char v[64];
    ssh_shard_str(run, k, field, v, sizeof v);
    return v[0] ? strtoll(v, NULL, 10) : -1;
}

redisReply *ssh_fcall(const char *run, const char *fn, int nargs, const char **args)
{
    char key[KEY_MAX];
    const char *argv[16] = {"FCALL", fn, "1", key_run(key, sizeof key, run, "config")};
    for (int i = 0; i < nargs && i < 12; i++) argv[4 + i] = args[i];
    return rconn_command_argv(g_conn, 4 + nargs, argv, NULL);
}

long long ssh_register(const char *run, const char *w)
{
    const char *args[3] = {w, "test", "1"};
    redisReply *r = ssh_fcall(run, "dl_register", 3, args);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long inc = r->element[0]->integer;
    freeReplyObject(r);
    return inc;
}

void ssh_arrive(const char *run, const char *w, long long inc, long long round, const char *want)
{
    char incs[24], rounds[24];
    snprintf(incs, sizeof incs, "%lld", inc);
    snprintf(rounds, sizeof rounds, "%lld", round);
    const char *args[4] = {w, incs, "0", rounds};
    redisReply *r = ssh_fcall(run, "dl_arrive", 4, args);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[0]->str, want);
    freeReplyObject(r);
}

int ssh_setup(const char *run, const char *init_args, struct event_base **base)
{
    log_init("test_ss");
    log_set_level(LOG_WARN);
    if (ssh_redis_start() != 0) return -1;
    *base = event_base_new();
    return *base != NULL && ssh_init_run(run, init_args) == 0 ? 0 : -1;
}

int ssh_init_run(const char *run, const char *extra)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "bin/coordinator init --redis '%s' --run %s %s >%s/init.log 2>&1", g_url, run, extra,
             g_dir);
    int rc = system(cmd);
    if (rc != 0) {
        snprintf(cmd, sizeof cmd, "cat %s/init.log >&2", g_dir);
        if (system(cmd) != 0) fprintf(stderr, "coordinator init failed\n");
    }
    return rc == 0 ? 0 : -1;
}

ss_ctx *ssh_server(struct event_base *base, const char *run, const char *id, int ttl_ms)
{
    ss_ctx *ss = calloc(1, sizeof *ss);
    if (ss == NULL) return NULL;
    snprintf(ss->opts.redis, sizeof ss->opts.redis, "%s", g_url);
    snprintf(ss->opts.run, sizeof ss->opts.run, "%s", run);
    snprintf(ss->opts.listen_host, sizeof ss->opts.listen_host, "127.0.0.1");
    snprintf(ss->id, sizeof ss->id, "%s", id);
    ss->opts.lease_ttl_ms = ttl_ms;
    ss->opts.max_pending_rounds = 4;
    char err[512];
    err[0] = '\0';
    if (ss_ctx_load_run(ss, NULL) != 0 || ss_ctx_start(ss, base, err, sizeof err) != 0) {
        fprintf(stderr, "shard-server %s did not start: %s\n", id, err);
        ssh_server_free(ss);
        return NULL;
    }
    return ss;
}

void ssh_server_free(ss_ctx *ss)
{
    if (ss == NULL) return;
    ss_ctx_free(ss);
    free(ss);
}

void ssh_teardown(struct event_base *base)
{
    if (base != NULL) event_base_free(base);
    ssh_redis_stop();
}

int ssh_pump_until(struct event_base *base, int (*cond)(void *), void *arg, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    while (!cond(arg)) {
        if (now_ms() >= end) return -1;
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        sleep_ms(1);
    }
    return 0;
}

static int never(void *arg)
{
    (void)arg;
    return 0;
}

void ssh_pump_for(struct event_base *base, int ms)
{
    ssh_pump_until(base, never, NULL, ms);
}

int ssh_shard_ready(void *shard)
{
    return ((ss_shard *)shard)->state == SH_READY;
}

static void on_reply(ss_req *req, const blob_header *h, const void *payload, size_t len)
{
    ssh_reply *out = req->reply_arg;
    out->h = *h;
    if (strcmp(h->op, "params") == 0 && len > 0) {
        out->params = malloc(len);
        if (out->params != NULL) memcpy(out->params, payload, len);
        out->n = len / sizeof(float);
    }
    out->done = 1;
}

static int reply_done(void *arg)
{
    return ((ssh_reply *)arg)->done;
}

int ssh_request(ss_ctx *ss, blob_header *h, const void *payload, size_t len, ssh_reply *out, int timeout_ms)
{
    memset(out, 0, sizeof *out);
    uint8_t hdr[BLOB_HEADER_MAX];
    char err[256];
    int hlen = blob_encode_header(h, payload, len, hdr, sizeof hdr, err, sizeof err);
    ss_req *req = calloc(1, sizeof *req);
    uint8_t *frame = malloc((size_t)(hlen > 0 ? hlen : 0) + len + FRAME_SLACK);
    if (hlen < 0 || req == NULL || frame == NULL) {
        free(req);
        free(frame);
        return -1;
    }
    memcpy(frame, hdr, (size_t)hlen);
    if (len > 0) memcpy(frame + hlen, payload, len);
    if (req_take_frame(req, frame, (size_t)hlen + len, err, sizeof err) != 0) {
        free(req);
        free(frame);
        return -1;
    }
    req->on_reply = on_reply;
    req->reply_arg = out;
    ops_dispatch(ss, req);
    return ssh_pump_until(ss->base, reply_done, out, timeout_ms);
}

int ssh_get(ss_ctx *ss, int k, long long version, ssh_reply *out)
{
    blob_header h;
    blob_header_init(&h, "get");
    h.shard = k;
    h.version = version;
    snprintf(h.worker, sizeof h.worker, "tester");
    return ssh_request(ss, &h, NULL, 0, out, 5000);
}

int ssh_push(ss_ctx *ss, int k, long long round, const char *w, long long inc, const float *d, size_t n, ssh_reply *out)
{
    return ssh_push_within(ss, k, round, w, inc, d, n, out, 5000);
}

int ssh_push_within(ss_ctx *ss, int k, long long round, const char *w, long long inc, const float *d, size_t n,
                    ssh_reply *out, int timeout_ms)
{
    blob_header h;
    blob_header_init(&h, "push");
    h.shard = k;
    h.round = round;
    h.inc = inc;
    h.dtype = BLOB_F32;
    h.count = n;
    snprintf(h.worker, sizeof h.worker, "%s", w);
    return ssh_request(ss, &h, d, n * sizeof(float), out, timeout_ms);
}

ss_ctx *ssh_setup_one_server(const char *run, const char *init_args, struct event_base **base)
{
    if (ssh_setup(run, init_args, base) != 0) return NULL;
    ss_ctx *ss = ssh_server(*base, run, "S", 3000);
    if (ss != NULL && ssh_pump_until(*base, ssh_shard_ready, &ss->shards[0], 5000) == 0) return ss;
    if (ss != NULL) ssh_server_free(ss);
    return NULL;
}

void ssh_teardown_one_server(ss_ctx *ss, struct event_base *base)
{
    ssh_server_free(ss);
    ssh_teardown(base);
}

void ssh_read_v0(const char *run, int k, float *theta, size_t n)
{
    char key[KEY_MAX], digest[32], want[32], err[256];
    key_shard(key, sizeof key, run, k, "snap:0:0");
    redisReply *r = ssh_cmd("GET %s", key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    blob_header h;
    const uint8_t *payload;
    size_t len;
    assert_int_equal(blob_decode((const uint8_t *)r->str, r->len, &h, &payload, &len, err, sizeof err), 0);
    assert_int_equal(h.dtype, BLOB_F32);
    assert_int_equal(len, n * sizeof(float));
    memcpy(theta, payload, len);
    freeReplyObject(r);
    snprintf(digest, sizeof digest, "%016" PRIx64, digest_f32(theta, n));
    ssh_shard_str(run, k, "digest", want, sizeof want);
    assert_string_equal(digest, want);
}
