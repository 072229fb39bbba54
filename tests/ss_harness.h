/*
 * ss_harness.h: what the shard-server's unit tests (tests/test_ss_*.c) share.
 *
 * A private redis-server on a unix socket in a temporary directory, a run created by the real
 * `bin/coordinator init`, shard-servers started with the library's own start-up (ss_ctx_load_run,
 * ss_ctx_start) on one event base that the test drives, and data-plane requests fed to ops_dispatch
 * the way server.c does, their replies captured through the request's on_reply hook.
 */
#ifndef TESTS_SS_HARNESS_H
#define TESTS_SS_HARNESS_H

#include <hiredis/hiredis.h>

#include "ss.h"

/* The group setup of a one-server test: ssh_setup, then server "S" (lease ttl 3 s) with shard 0 ready.
 * NULL on failure. */
ss_ctx *ssh_setup_one_server(const char *run, const char *init_args, struct event_base **base);
/* Its teardown: the server, then ssh_teardown. */
void ssh_teardown_one_server(ss_ctx *ss, struct event_base *base);
/* Shard k's v0 parameters (n floats) as coordinator init wrote them, checked against the shard's digest
 * in Redis (a cmocka failure otherwise). */
void ssh_read_v0(const char *run, int k, float *theta, size_t n);
/* Start redis-server (0 ok, -1: it did not start). */
int ssh_redis_start(void);
/* A test group's setup: quiet logs, redis-server, an event base, the run created with
 * `coordinator init` and init_args. 0 ok. */
int ssh_setup(const char *run, const char *init_args, struct event_base **base);
void ssh_redis_stop(void);
/* A test group's teardown: the event base freed, redis-server stopped (free the servers first). */
void ssh_teardown(struct event_base *base);
/* A command on the test's own synchronous connection; the caller frees the reply. */
redisReply *ssh_cmd(const char *fmt, ...);
/* An integer or string field of the run's dl:{R}:shards hash ("" / -1 when absent). */
long long ssh_shard_int(const char *run, int k, const char *field);
void ssh_shard_str(const char *run, int k, const char *field, char *out, size_t cap);
/* FCALL fn with the run's config key and args; the caller frees the reply. */
redisReply *ssh_fcall(const char *run, const char *fn, int nargs, const char **args);
/* dl_register of worker w: its incarnation (a cmocka failure if refused). */
long long ssh_register(const char *run, const char *w);
/* dl_arrive of w:inc at round of fragment 0; the barrier must then be in state want ("open", "closed"). */
void ssh_arrive(const char *run, const char *w, long long inc, long long round, const char *want);
/* bin/coordinator init with extra arguments (e.g. "--shards 1 --numel 512"); 0 ok. */
int ssh_init_run(const char *run, const char *extra);

/* A shard-server of run with id and lease ttl on base. NULL on failure. */
ss_ctx *ssh_server(struct event_base *base, const char *run, const char *id, int ttl_ms);
/* Take a server of ssh_server down (ss_ctx_free) and free it. */
void ssh_server_free(ss_ctx *ss);
/* Run the loop until cond(arg) holds or timeout_ms passes; 0 when it holds. */
int ssh_pump_until(struct event_base *base, int (*cond)(void *), void *arg, int timeout_ms);
void ssh_pump_for(struct event_base *base, int ms);
int ssh_shard_ready(void *shard); /* cond: an ss_shard is SH_READY */

/* A request's reply, as captured. */
typedef struct ssh_reply {
    int done;
    blob_header h;
    float *params; /* a params reply's payload (copied; free it) */
    size_t n;
} ssh_reply;
/* Feed the request (header h, payload) to ss and run the loop until it is answered (at most
 * timeout_ms); 0 answered. */
int ssh_request(ss_ctx *ss, blob_header *h, const void *payload, size_t len, ssh_reply *out, int timeout_ms);
/* get(k, version) from worker w; push(k, round) of n floats from worker w:inc. */
int ssh_get(ss_ctx *ss, int k, long long version, ssh_reply *out);
int ssh_push(ss_ctx *ss, int k, long long round, const char *w, long long inc, const float *d, size_t n,
             ssh_reply *out);
/* ssh_push waiting at most timeout_ms (0: sent, not waited for; its reply comes into *out when the loop runs) */
int ssh_push_within(ss_ctx *ss, int k, long long round, const char *w, long long inc, const float *d, size_t n,
                    ssh_reply *out, int timeout_ms);

#endif
