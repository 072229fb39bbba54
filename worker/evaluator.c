/* evaluator.c: validation loss of a run's global model while it trains (see evaluator.h). */
#include "evaluator.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "format/mpmap.h"
#include "redis/run_state.h"
#include "redis/url.h"

/* The evaluations dl:{R}:evals keeps (XADD MAXLEN ~): some 6 MB; its readers take the newest 500 */
#define EVALS_MAXLEN 100000

/* The last version in dl:{R}:evals (its entry ID "<version>-1"), or -1 when the stream is empty. */
static int last_evaluated(rconn *c, const char *run, long long *version, char *err, size_t errlen)
{
    char key[KEY_MAX];
    redisReply *r = rconn_command(c, "XREVRANGE %s + - COUNT 1", key_run(key, sizeof key, run, "evals"));
    if (rconn_reply_error(c, r, err, errlen) < 0) {
        if (r) freeReplyObject(r);
        return -1;
    }
    *version = -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->type == REDIS_REPLY_ARRAY &&
        r->element[0]->elements >= 1 && r->element[0]->element[0]->type == REDIS_REPLY_STRING)
        *version = atoll(r->element[0]->element[0]->str);
    freeReplyObject(r);
    return 0;
}

/* 1 when the operator shut the run down. */
static int run_shut_down(rconn *c, const char *run)
{
    char key[KEY_MAX];
    redisReply *r = rconn_command(c, "HGET %s status", key_run(key, sizeof key, run, "tunables"));
    int down = r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "shutdown");
    if (r) freeReplyObject(r);
    return down;
}

/* Tokens the live workers have reported (their records' "tokens"). */
static unsigned long long worker_tokens(rconn *c, const char *run)
{
    char key[KEY_MAX];
    redisReply *r = rconn_command(c, "HVALS %s", key_run(key, sizeof key, run, "workers"));
    unsigned long long sum = 0;
    if (r && r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++) {
            double t;
            if (r->element[i]->type == REDIS_REPLY_STRING &&
                mpmap_get_num(r->element[i]->str, r->element[i]->len, "tokens", &t) == 0 && t > 0)
                sum += (unsigned long long)t;
        }
    if (r) freeReplyObject(r);
    return sum;
}

/* Append one evaluation, the stream cut to about its newest EVALS_MAXLEN (as the events stream is: a run of weeks
 * evaluated at every version would keep them all). 0 written, 1 the version was already there (another
 * evaluator), -1 error. */
static int publish(rconn *c, const char *run, int64_t version, double loss, unsigned long long tokens, char *err,
                   size_t errlen)
{
    char key[KEY_MAX], id[32], lossbuf[32], when[32];
    snprintf(id, sizeof id, "%" PRId64 "-1", version);
    snprintf(lossbuf, sizeof lossbuf, "%.6f", loss);
    snprintf(when, sizeof when, "%.3f", (double)wall_ms() / 1000.0);
    redisReply *r = rconn_command(c, "XADD %s MAXLEN ~ %d %s loss %s version %lld tokens %llu time %s",
                                  key_run(key, sizeof key, run, "evals"), EVALS_MAXLEN, id, lossbuf, (long long)version,
                                  tokens, when);
    if (r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "equal or smaller")) {
        freeReplyObject(r);
        return 1;
    }
    int rc = rconn_reply_error(c, r, err, errlen);
    if (r) freeReplyObject(r);
    return rc;
}

/* Rebuild the global model at its current version into t->params and evaluate it. 1 done (*version,
 * *loss), 0 not now (no consistent version yet), -1 a Redis error, -2 the trainer failed. */
static int evaluate_now(rconn *c, const runconf *rc, run_state *st, trainer *t, int64_t *version, double *loss,
                        char *err, size_t errlen)
{
    char why[512];
    int versions = rc->nfragments > 1 ? RUN_STATE_ANY : RUN_STATE_ONE_VERSION; /* (fragments never line up) */
    int r = run_state_read_once(c, rc, versions, st, why, sizeof why, err, errlen);
    if (r != 0) return r < 0 ? -1 : 0;
    memcpy(t->params, st->params, rc->numel * sizeof(float));
    if (t->params_changed && t->params_changed(t, 0, rc->numel, err, errlen) < 0) return -2;
    if (t->evaluate(t, loss, err, errlen) < 0) return -2;
    *version = st->version;
    return 1;
}

/* One look at the run: evaluate when the global model reached *next. -1 on a Redis error, -2 when the
 * trainer failed. */
static int poll_once(rconn *c, const runconf *rc, run_state *st, trainer *t, int every, long long *next, char *err,
                     size_t errlen)
{
    int64_t lo, hi;
    if (run_state_versions(c, rc, &lo, &hi, err, errlen) < 0) return -1;
    if (lo < *next) return 0;
    long long last; /* another evaluator may have published since */
    if (last_evaluated(c, rc->run, &last, err, errlen) < 0) return -1;
    if (last >= 0 && (last / every + 1) * every > *next) *next = (last / every + 1) * every;
    if (lo < *next) return 0;
    int64_t v;
    double loss;
    int r = evaluate_now(c, rc, st, t, &v, &loss, err, errlen);
    if (r <= 0) return r;
    if (v < *next) return 0;
    int p = publish(c, rc->run, v, loss, worker_tokens(c, rc->run), err, errlen);
    if (p < 0) return -1;
    if (p == 0)
        log_info("version %" PRId64 ": validation loss %.4f", v, loss);
    else
        log_info("version %" PRId64 " was already evaluated (another evaluator?)", v);
    *next = (v / every + 1) * every;
    return 0;
}

/* What both roles need before their first look: a trainer that evaluates, the URL, the state's buffers. */
static int evaluator_prepare(const evaluator_options *o, const runconf *rc, const trainer *t, redis_url *u,
                             run_state *st, char *err, size_t errlen)
{
    if (!t->evaluate) {
        err_set(err, errlen, "the %s trainer has no validation loss: nothing to evaluate", t->name);
        return -1;
    }
    if (redis_url_parse(o->redis_url, u, err, errlen) < 0) return -1;
    return run_state_alloc(st, rc, err, errlen);
}

int evaluator_run(const evaluator_options *o, const runconf *rc, trainer *t, char *err, size_t errlen)
{
    redis_url u;
    run_state st;
    if (evaluator_prepare(o, rc, t, &u, &st, err, errlen) < 0) return -1;
    rconn *c = NULL;
    long long next = -1;
    int status = 0;
    while (!*o->stop) {
        if (!c || rconn_broken(c)) {
            rconn_free(c);
            int refused = 0;
            c = rconn_connect_retry(&u, 5000, o->connect_timeout_ms, o->stop, &refused, err, errlen);
            if (!c) {
                status = *o->stop ? 0 : -1;
                break;
            }
            long long last;
            if (last_evaluated(c, rc->run, &last, err, errlen) < 0) goto warn;
            next = last < 0 ? 0 : (last / o->every + 1) * o->every;
            log_info("evaluator of run '%s': every %d versions, next at version %lld", rc->run, o->every, next);
        }
        if (run_shut_down(c, rc->run)) {
            log_info("the run was shut down");
            break;
        }
        int r = poll_once(c, rc, &st, t, o->every, &next, err, errlen);
        if (r == -2) {
            status = -1;
            break;
        }
        if (r == 0) {
            sleep_ms((unsigned)o->poll_ms);
            continue;
        }
    warn:
        log_warn("evaluator: %s (trying again)", err);
        sleep_ms(1000);
    }
    if (*o->stop && status == 0) log_info("evaluator of run '%s': stopped by a signal", rc->run);
    rconn_free(c);
    run_state_free(&st);
    return status;
}

int evaluator_once(const evaluator_options *o, const runconf *rc, trainer *t, int64_t *version, double *loss, char *err,
                   size_t errlen)
{
    redis_url u;
    run_state st;
    if (evaluator_prepare(o, rc, t, &u, &st, err, errlen) < 0) return -1;
    rconn *c = rconn_connect_retry(&u, 5000, o->connect_timeout_ms, o->stop, NULL, err, errlen);
    int status = -1;
    for (uint64_t deadline = now_ms() + EVALUATOR_ONCE_WAIT_MS; c;) {
        int r = evaluate_now(c, rc, &st, t, version, loss, err, errlen);
        if (r == 1) status = 0;
        if (r != 0) break;
        if (*o->stop) {
            err_set(err, errlen, "stopped");
            break;
        }
        if (now_ms() > deadline) {
            err_set(err, errlen,
                    "the shards of run '%s' stayed at different versions for %d s (a commit that does "
                    "not finish: `coordinator status` shows the shard-servers)",
                    rc->run, EVALUATOR_ONCE_WAIT_MS / 1000);
            break;
        }
        sleep_ms((unsigned)o->poll_ms);
    }
    rconn_free(c);
    run_state_free(&st);
    return status;
}
