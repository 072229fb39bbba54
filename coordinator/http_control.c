/* http_control.c: the operator's control actions, shared by POST /control/<action> and
 * `coordinator control`. Bodies are Forgather's:
 *
 *   save_state          {}                                  -> checkpoint export into serve --save-dir
 *   kick_worker         {"worker_id": "w1"}                 -> dl_kick
 *   update_optimizer    {"lr": 0.5, "momentum": 0.8}        -> dl_set outer_lr .. outer_momentum ..
 *                       (either may be omitted; also "nesterov": true/false)
 *   update_num_workers  {"num_workers": 4}                  -> dl_set target_workers 4
 *                       (also "min_workers": N)
 *   update_staleness    {"max_staleness": 8}                -> dl_set max_staleness 8
 *                       (async runs: submissions older than K versions are refused; 0: no limit)
 *   shutdown            {}                                  -> dl_shutdown
 *
 * Everything is validated before the one FCALL that makes the change, and the Redis Function checks
 * again (ranges), and alone what depends on the run's stored settings (min_workers <= the expected
 * workers), before its first write, so a rejected request changes nothing. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "checkpoint.h"
#include "format/keys.h"
#include "format/runconf.h"
#include "http.h"
#include "math/outer.h"
#include "redis/fcall.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"

const char *const control_actions[] = {
    "save_state", "kick_worker", "update_optimizer", "update_num_workers", "update_staleness", "shutdown", NULL};

static int error_reply(json_t **reply, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int error_reply(json_t **reply, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *reply = json_pack("{s:s}", "error", msg);
    return code;
}

/* The shortest decimal that reads back as d, so Redis shows "0.5", not "0.50000000000000000". */
static void fmt_double(double d, char *buf, size_t cap)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, d);
        if (strtod(buf, NULL) == d) return;
    }
}

/* Only the listed fields may appear in the body: a typo ("learning_rate") is an error, not a no-op. */
static int check_fields(json_t *body, const char *const *allowed, const char *action, json_t **reply)
{
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++) ok |= !strcmp(*a, k);
        if (!ok) return error_reply(reply, 400, "%s: unknown field '%s'", action, k);
    }
    return 0;
}

/* Whether Redis refused the command to this coordinator's user (its ACL): NOPERM, or the error a function
 * gets when its user may not run a command it calls ("ERR The user executing the script can't run this
 * command or subcommand"). */
static int redis_error_acl(const char *msg)
{
    return !strncmp(msg, "NOPERM", 6) || strstr(msg, "can't run this command") || strstr(msg, "no permissions") ||
           strstr(msg, "can't access");
}

/* HTTP status for an error reply of a Redis Function ("-CODE message"): 404 for a run that is not there
 * (NORUN, or no function library at all), 403 when the ACL of serve's Redis user forbids the change (it is
 * not the client's to fix, and no retry helps), 502 for another error of Redis. */
static int code_of_redis_error(const char *msg)
{
    if (!strncmp(msg, "BADARG", 6)) return 400;
    if (!strncmp(msg, "UNKNOWN_WORKER", 14)) return 404;
    if (runconf_error_gone(msg)) return 404;
    if (!strncmp(msg, "SHUTDOWN", 8)) return 409;
    if (redis_error_acl(msg)) return 403;
    return 502;
}

/* The error reply of a failed control call: what Redis said, and what to do where it is not plain. */
static int fcall_error_reply(const char *run, const char *err, int code, json_t **reply)
{
    if (code == 404 && !strncmp(err, "ERR Function not found", 22))
        return error_reply(reply, code,
                           "run '%s' does not exist in this Redis (no ReDiLoCo function library: %s); run "
                           "`coordinator init --run %s` first",
                           run, err, run);
    if (code == 403)
        return error_reply(reply, code,
                           "Redis refuses this coordinator's user the change (%s): serve with a Redis user whose ACL "
                           "allows control, e.g. operator (deploy/redis/users.acl)",
                           err);
    return error_reply(reply, code, "%s", err);
}

/* One call of the run's function fn with args[0..n); 200 + reply OK (the function's answer, a status or a
 * string, into said when said is not NULL), or the error mapped. */
static int control_fcall_said(rconn *rc, const char *run, const char *fn, int n, const char **args, json_t **reply,
                              const char *what, char *said, size_t said_cap)
{
    char key[KEY_MAX], err[512];
    redisReply *r = fcall_run(rc, key_run(key, sizeof key, run, "config"), fn, n, args);
    if (rconn_reply_error(rc, r, err, sizeof err) < 0) {
        if (r && r->type == REDIS_REPLY_ERROR) rconn_sentinel_error(rc, r->str, err, sizeof err);
        int code = r && r->type == REDIS_REPLY_ERROR ? code_of_redis_error(r->str) : 503;
        if (r) freeReplyObject(r);
        log_warn("control %s: %s", what, err);
        return fcall_error_reply(run, err, code, reply);
    }
    if (said != NULL)
        snprintf(said, said_cap, "%s",
                 (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) && r->str ? r->str : "");
    freeReplyObject(r);
    log_info("control: %s", what);
    return 200;
}

static int control_fcall(rconn *rc, const char *run, const char *fn, int n, const char **args, json_t **reply,
                         const char *what)
{
    return control_fcall_said(rc, run, fn, n, args, reply, what, NULL, 0);
}

static int do_kick(rconn *rc, const char *run, json_t *body, json_t **reply)
{
    static const char *const allowed[] = {"worker_id", NULL};
    if (check_fields(body, allowed, "kick_worker", reply)) return 400;
    json_t *w = json_object_get(body, "worker_id");
    if (!json_is_string(w) || !json_string_length(w))
        return error_reply(reply, 400, "kick_worker: body must be {\"worker_id\": \"...\"}");
    const char *id = json_string_value(w);
    char what[300];
    snprintf(what, sizeof what, "kick worker %.200s", id);
    int code = control_fcall(rc, run, "dl_kick", 1, &id, reply, what);
    if (code == 200) *reply = json_pack("{s:s,s:s}", "status", "ok", "worker_id", id);
    return code;
}

/* An outer lr that makes the run diverge is set (the operator may mean it) but said, in the reply's "warning"
 * and the log, with what to use, as coordinator init says it (OUTER_LR_WARN). */
static void warn_outer_lr(const char *run, double lr, json_t *reply)
{
    if (!(lr > OUTER_LR_WARN)) return;
    char msg[400];
    snprintf(msg, sizeof msg,
             "outer lr %g is far above DiLoCo's %g: the outer step moves the parameters lr times the workers' mean "
             "drift, so above %g it overshoots and the run diverges instead of learning; use %g to 2",
             lr, OUTER_DEFAULT_LR, OUTER_LR_WARN, OUTER_DEFAULT_LR);
    json_object_set_new(reply, "warning", json_string(msg));
    log_warn("control update_optimizer on run %s: %s", run, msg);
}

static int do_optimizer(rconn *rc, const char *run, json_t *body, json_t **reply)
{
    static const char *const allowed[] = {"lr", "momentum", "nesterov", NULL};
    if (check_fields(body, allowed, "update_optimizer", reply)) return 400;
    json_t *lr = json_object_get(body, "lr"), *mu = json_object_get(body, "momentum");
    json_t *nest = json_object_get(body, "nesterov");
    if (!lr && !mu && !nest)
        return error_reply(reply, 400,
                           "update_optimizer: body must set at least one of \"lr\" (number > 0), \"momentum\" "
                           "(number in [0, 1)) and \"nesterov\" (true or false)");
    if ((lr && !json_is_number(lr)) || (mu && !json_is_number(mu)))
        return error_reply(reply, 400, "update_optimizer: \"lr\" and \"momentum\" must be numbers");
    if (nest && !json_is_boolean(nest))
        return error_reply(reply, 400, "update_optimizer: \"nesterov\" must be true or false");
    if (lr && !(json_number_value(lr) > 0 && isfinite(json_number_value(lr))))
        return error_reply(reply, 400, "update_optimizer: lr must be a positive number");
    if (mu && !(json_number_value(mu) >= 0 && json_number_value(mu) < 1))
        return error_reply(reply, 400, "update_optimizer: momentum must be in [0, 1)");
    const char *args[6];
    char lrs[32], mus[32], what[128] = "set";
    int n = 0;
    if (lr) {
        fmt_double(json_number_value(lr), lrs, sizeof lrs);
        args[n++] = "outer_lr";
        args[n++] = lrs;
        snprintf(what + strlen(what), sizeof what - strlen(what), " outer_lr=%s", lrs);
    }
    if (mu) {
        double m = json_number_value(mu);
        fmt_double(m == 0 ? 0.0 : m, mus, sizeof mus); /* (-0 is 0: stored and shown as 0, not -0) */
        args[n++] = "outer_momentum";
        args[n++] = mus;
        snprintf(what + strlen(what), sizeof what - strlen(what), " outer_momentum=%s", mus);
    }
    if (nest) {
        args[n++] = "nesterov";
        args[n++] = json_is_true(nest) ? "1" : "0";
        snprintf(what + strlen(what), sizeof what - strlen(what), " nesterov=%s", args[n - 1]);
    }
    int code = control_fcall(rc, run, "dl_set", n, args, reply, what);
    if (code != 200) return code;
    *reply = json_pack("{s:s}", "status", "ok");
    if (lr) json_object_set_new(*reply, "lr", json_real(strtod(lrs, NULL)));
    if (mu) json_object_set_new(*reply, "momentum", json_real(strtod(mus, NULL)));
    if (nest) json_object_set(*reply, "nesterov", nest);
    if (lr) warn_outer_lr(run, json_number_value(lr), *reply);
    return 200;
}

static int int_field(json_t *v, long long lo, long long hi, long long *out)
{
    if (json_is_integer(v))
        *out = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)))
        *out = (long long)json_real_value(v);
    else
        return -1;
    return *out >= lo && *out <= hi ? 0 : -1;
}

/* An async run has no barrier: the worker counts wait for nobody. Set, but said in the reply's "warning" and
 * the log, with what they still do (lua/20_membership.lua: only a barrier reads target_workers). */
static void warn_workers_async(rconn *rc, const char *run, json_t *reply)
{
    runconf conf = {0};
    char why[256], msg[400];
    int async = runconf_load(rc, run, &conf, why, sizeof why) == 0 && conf.async;
    runconf_free(&conf);
    if (!async) return;
    snprintf(msg, sizeof msg,
             "run %s is async: no barrier waits for workers, so the worker counts change only what status shows "
             "(and the workers set-max-staleness compares with); the Delayed Nesterov buffer and the staleness "
             "reference keep what coordinator init set from --workers",
             run);
    json_object_set_new(reply, "warning", json_string(msg));
    log_warn("control update_num_workers on run %s: %s", run, msg);
}

static int do_num_workers(rconn *rc, const char *run, json_t *body, json_t **reply)
{
    static const char *const allowed[] = {"num_workers", "min_workers", NULL};
    if (check_fields(body, allowed, "update_num_workers", reply)) return 400;
    json_t *nw = json_object_get(body, "num_workers"), *mw = json_object_get(body, "min_workers");
    long long n = 0, m = 0;
    if (!nw && !mw) return error_reply(reply, 400, "update_num_workers: body must be {\"num_workers\": N}");
    if (nw && int_field(nw, 1, 1000000, &n) < 0)
        return error_reply(reply, 400, "update_num_workers: num_workers must be an integer >= 1");
    if (mw && int_field(mw, 1, 1000000, &m) < 0)
        return error_reply(reply, 400, "update_num_workers: min_workers must be an integer >= 1");
    /* min_workers <= num_workers is dl_set's check: it knows the stored value of the one not in the body */
    const char *args[4];
    char ns[32], ms[32], what[128] = "set";
    int k = 0;
    if (nw) {
        snprintf(ns, sizeof ns, "%lld", n);
        args[k++] = "target_workers";
        args[k++] = ns;
        snprintf(what + strlen(what), sizeof what - strlen(what), " target_workers=%s", ns);
    }
    if (mw) {
        snprintf(ms, sizeof ms, "%lld", m);
        args[k++] = "min_workers";
        args[k++] = ms;
        snprintf(what + strlen(what), sizeof what - strlen(what), " min_workers=%s", ms);
    }
    int code = control_fcall(rc, run, "dl_set", k, args, reply, what);
    if (code != 200) return code;
    *reply = json_pack("{s:s}", "status", "ok");
    if (nw) json_object_set_new(*reply, "num_workers", json_integer(n));
    if (mw) json_object_set_new(*reply, "min_workers", json_integer(m));
    warn_workers_async(rc, run, *reply);
    return 200;
}

/* A limit below the expected workers - 1 in an async run is set but said, in the reply's "warning" and the
 * log, as coordinator init says it: workers of equal speed submit about W - 1 versions stale, so most of
 * their work would be refused (the quadratic, 6 workers, limit 1: 40 of 60 submissions refused). A limit
 * set on a sync run is said too: it is stored, but only async submissions are ever judged by it. */
static void warn_staleness(rconn *rc, const char *run, long long k, json_t *reply)
{
    runconf conf = {0};
    char why[256], key[KEY_MAX], msg[400];
    int loaded = k > 0 && runconf_load(rc, run, &conf, why, sizeof why) == 0, async = loaded && conf.async;
    runconf_free(&conf);
    if (loaded && !async) {
        snprintf(msg, sizeof msg,
                 "run %s is sync: max_staleness limits the submissions of async runs only, so it changes nothing "
                 "here (a sync round takes only pseudo-gradients of its own round)",
                 run);
        json_object_set_new(reply, "warning", json_string(msg));
        log_warn("control update_staleness on run %s: %s", run, msg);
        return;
    }
    if (!async) return;
    redisReply *r = rconn_command(rc, "HGET %s expected_workers", key_run(key, sizeof key, run, "tunables"));
    long long w = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    if (r) freeReplyObject(r);
    if (k >= w - 1) return;
    snprintf(msg, sizeof msg,
             "max_staleness %lld with %lld expected workers: workers of equal speed submit about %lld versions stale, "
             "so most of their submissions would be refused and their training lost; use %lld or more (0: no limit)",
             k, w, w - 1, w - 1);
    json_object_set_new(reply, "warning", json_string(msg));
    log_warn("control update_staleness on run %s: %s", run, msg);
}

/* max_staleness K (docs/async.md): the Function refuses a K a rebase run cannot serve (outside [1, its window]) */
static int do_staleness(rconn *rc, const char *run, json_t *body, json_t **reply)
{
    static const char *const allowed[] = {"max_staleness", NULL};
    if (check_fields(body, allowed, "update_staleness", reply)) return 400;
    json_t *v = json_object_get(body, "max_staleness");
    long long k;
    if (!v || int_field(v, 0, 1000000000, &k) < 0)
        return error_reply(reply, 400,
                           "update_staleness: body must be {\"max_staleness\": K}, K an integer >= 0 (0: no limit)");
    char ks[32], what[64];
    snprintf(ks, sizeof ks, "%lld", k);
    snprintf(what, sizeof what, "set max_staleness=%s", ks);
    const char *args[2] = {"max_staleness", ks};
    int code = control_fcall(rc, run, "dl_set", 2, args, reply, what);
    if (code != 200) return code;
    *reply = json_pack("{s:s,s:I}", "status", "ok", "max_staleness", (json_int_t)k);
    warn_staleness(rc, run, k, *reply);
    return 200;
}

static int do_shutdown(rconn *rc, const char *run, json_t *body, json_t **reply)
{
    static const char *const allowed[] = {NULL};
    if (check_fields(body, allowed, "shutdown", reply)) return 400;
    char said[32];
    int code = control_fcall_said(rc, run, "dl_shutdown", 0, NULL, reply, "shutdown of the run", said, sizeof said);
    if (code != 200) return code;
    /* (a second shutdown is no error: the run is as asked) */
    const char *msg = strcmp(said, "ALREADY") == 0 ? "run already shut down: nothing changed"
                                                   : "run shut down: workers stop at their next heartbeat";
    *reply = json_pack("{s:s,s:s}", "status", "ok", "message", msg);
    return code;
}

static int do_save(rconn *rc, const control_env *env, json_t *body, json_t **reply)
{
    static const char *const allowed[] = {NULL};
    if (check_fields(body, allowed, "save_state", reply)) return 400;
    if (!env->save_dir)
        return error_reply(reply, 409,
                           "save_state: this coordinator has no --save-dir (committed parameters are durable in "
                           "Redis at every round; `coordinator checkpoint save` exports one from a terminal)");
    char path[4200], err[600];
    int64_t version = -1;
    uint64_t t0 = now_ms();
    if (checkpoint_save_dir(rc, env->run, env->save_dir, env->keep, 30000, path, sizeof path, &version, err,
                            sizeof err) < 0) {
        log_warn("control save_state: %s", err);
        return error_reply(reply, 500, "save_state: %s", err);
    }
    log_info("control: save_state wrote %s (version %lld) in %llu ms", path, (long long)version,
             (unsigned long long)(now_ms() - t0));
    *reply = json_pack("{s:s,s:s,s:I}", "status", "ok", "path", path, "version", (json_int_t)version);
    return 200;
}

int control_run(rconn *rc, const control_env *env, const char *action, json_t *body, json_t **reply)
{
    const char *run = env->run;
    *reply = NULL;
    if (!json_is_object(body)) return error_reply(reply, 400, "the body must be a JSON object");
    if (!strcmp(action, "kick_worker")) return do_kick(rc, run, body, reply);
    if (!strcmp(action, "update_optimizer")) return do_optimizer(rc, run, body, reply);
    if (!strcmp(action, "update_num_workers")) return do_num_workers(rc, run, body, reply);
    if (!strcmp(action, "update_staleness")) return do_staleness(rc, run, body, reply);
    if (!strcmp(action, "shutdown")) return do_shutdown(rc, run, body, reply);
    if (!strcmp(action, "save_state")) return do_save(rc, env, body, reply);
    return error_reply(reply, 404,
                       "unknown control action '%.100s' (known: save_state, kick_worker, update_optimizer, "
                       "update_num_workers, update_staleness, shutdown)",
                       action);
}
