/* http_status.c: the /status JSON document and the /metrics Prometheus text, both built from one
 * dl_status call (a consistent picture of the run) plus the tail of dl:{R}:events.
 *
 * dl_status returns hash fields as strings and worker/server records as msgpack-decoded objects;
 * here they become typed fields under the names the Forgather server uses where it has one
 * (sync_round, num_workers, total_worker_deaths, hostname, steps_per_second, ...), with every raw
 * field still available (config, state, and unknown worker fields such as staleness are copied). */
#include <jansson.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "evals.h"
#include "format/keys.h"
#include "format/runconf.h"
#include "http.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"

/* cjson encodes an empty Lua table as {}: treat it as an empty array. */
static json_t *arr(json_t *v)
{
    static json_t *empty;
    if (json_is_array(v)) return v;
    if (!empty) empty = json_array();
    return empty;
}

static double num(json_t *o, const char *k, double dflt)
{
    json_t *v = json_object_get(o, k);
    if (json_is_number(v)) return json_number_value(v);
    if (json_is_string(v)) {
        double d;
        if (parse_double(json_string_value(v), &d) == 0) return d;
    }
    return dflt;
}

static const char *str(json_t *o, const char *k, const char *dflt)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : dflt;
}

/* A number as an integer JSON value when it is one (counters), else a real. */
static json_t *jnum(double d)
{
    if (isfinite(d) && d == floor(d) && fabs(d) < 9e15) return json_integer((json_int_t)d);
    return json_real(isfinite(d) ? d : 0);
}

static void setn(json_t *o, const char *k, double d)
{
    json_object_set_new(o, k, jnum(d));
}

/* One entry of dl:{R}:events, [id, [field, value, ...]], as {id, t_ms, field: value, ...}; NULL when
 * malformed. */
static json_t *event_doc(const redisReply *e)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || e->element[0]->type != REDIS_REPLY_STRING ||
        e->element[1]->type != REDIS_REPLY_ARRAY)
        return NULL;
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(e->element[0]->str));
    json_object_set_new(o, "t_ms", json_integer(strtoll(e->element[0]->str, NULL, 10)));
    const redisReply *f = e->element[1];
    for (size_t j = 0; j + 1 < f->elements; j += 2) {
        if (f->element[j]->type != REDIS_REPLY_STRING || f->element[j + 1]->type != REDIS_REPLY_STRING) continue;
        if (!strcmp(f->element[j]->str, "id") || !strcmp(f->element[j]->str, "t_ms")) continue;
        json_object_set_new(o, f->element[j]->str, json_string(f->element[j + 1]->str));
    }
    return o;
}

/* The newest n events of the run, newest first. 0, or -1 + err. */
static int fetch_events(rconn *rc, const char *run, int n, json_t **events, char *err, size_t errlen)
{
    char key[KEY_MAX];
    redisReply *r = rconn_command(rc, "XREVRANGE %s + - COUNT %d", key_run(key, sizeof key, run, "events"), n);
    if (rconn_reply_error(rc, r, err, errlen) < 0 || r->type != REDIS_REPLY_ARRAY) {
        if (r) freeReplyObject(r);
        return -1;
    }
    json_t *ev = json_array();
    for (size_t i = 0; i < r->elements; i++) {
        json_t *o = event_doc(r->element[i]);
        if (o) json_array_append_new(ev, o);
    }
    freeReplyObject(r);
    *events = ev;
    return 0;
}

int status_fetch(rconn *rc, const char *run, int n_events, json_t **raw, json_t **events, char *err, size_t errlen)
{
    char key[KEY_MAX];
    *raw = NULL;
    if (events) *events = NULL;
    int lib = runconf_check_library(rc, run, err, errlen);
    if (lib < 0) return lib;
    redisReply *r = rconn_command(rc, "FCALL dl_status 1 %s", key_run(key, sizeof key, run, "config"));
    if (rconn_reply_error(rc, r, err, errlen) < 0 || r->type != REDIS_REPLY_STRING) {
        int absent = r && r->type == REDIS_REPLY_ERROR && runconf_error_gone(r->str);
        if (r && r->type != REDIS_REPLY_ERROR) err_set(err, errlen, "dl_status: unexpected reply type %d", r->type);
        if (r) freeReplyObject(r);
        return absent ? RUNCONF_ABSENT : -1;
    }
    json_error_t jerr;
    *raw = json_loadb(r->str, r->len, 0, &jerr);
    freeReplyObject(r);
    if (!*raw) {
        err_set(err, errlen, "malformed dl_status document: %s", jerr.text);
        return -1;
    }
    if (evals_attach(rc, run, *raw, err, errlen) < 0 ||
        (events && n_events > 0 && fetch_events(rc, run, n_events, events, err, errlen) < 0)) {
        json_decref(*raw); /* (a failure leaves the caller nothing to free) */
        *raw = NULL;
        return -1;
    }
    return 0;
}

static json_t *worker_doc(json_t *w, json_t *arrived0)
{
    json_t *o = json_deep_copy(w); /* keeps every field the record has (staleness, tokens, ...) */
    const char *id = str(w, "id", "");
    json_object_set_new(o, "worker_id", json_string(id));
    json_object_set_new(o, "hostname", json_string(str(w, "host", "")));
    double speed = num(w, "speed", -1); /* -1: no report yet (lua/30_workers.lua): null */
    json_object_set_new(o, "steps_per_second", speed >= 0 ? json_real(speed) : json_null());
    json_object_set_new(o, "speed", speed >= 0 ? json_real(speed) : json_null());
    double loss = num(w, "loss", -1);
    json_object_set_new(o, "loss", loss >= 0 ? json_real(loss) : json_null());
    double h = num(w, "h", 0), se = num(w, "sync_every", 0);
    setn(o, "sync_every", se);
    setn(o, "H", h > 0 ? h : se);
    double age = num(w, "heartbeat_age_ms", 0);
    setn(o, "heartbeat_age_ms", age);
    json_object_set_new(o, "last_heartbeat_s", json_real(age / 1000.0));
    setn(o, "incarnation", num(w, "inc", 0));
    json_t *joined = json_object_get(w, "joined");
    json_object_set_new(o, "joined", json_deep_copy(arr(joined)));
    setn(o, "sync_round", json_is_array(joined) ? json_number_value(json_array_get(joined, 0)) : 0);
    int here = 0;
    size_t i;
    json_t *a;
    json_array_foreach(arr(arrived0), i, a) if (json_is_string(a) && !strcmp(json_string_value(a), id)) here = 1;
    json_object_set_new(o, "submitted", json_boolean(here));
    return o;
}

/* The run's name, its settings for the dashboard and who may do what: the head of the document. */
static void doc_identity(json_t *d, json_t *raw, int auth_required, int dashboard, int can_save, double uptime_s)
{
    json_t *cfg = json_object_get(raw, "config"), *st = json_object_get(raw, "state");
    const char *run = str(raw, "run", "");
    /* "dl:{R}" -> "R" */
    const char *lb = strchr(run, '{'), *rb = strrchr(run, '}');
    json_object_set_new(d, "run", lb && rb && rb > lb ? json_stringn(lb + 1, (size_t)(rb - lb - 1)) : json_string(run));
    json_object_set_new(d, "mode", json_string(str(cfg, "mode", "sync")));
    json_object_set_new(d, "status", json_string(str(st, "status", "unknown")));
    setn(d, "now_ms", num(raw, "now_ms", 0));
    json_object_set_new(d, "coordinator_uptime_s", json_real(uptime_s));
    json_object_set_new(d, "auth_required", json_boolean(auth_required));
    json_object_set_new(d, "dashboard", json_boolean(dashboard));
    json_object_set_new(d, "save_state_available", json_boolean(can_save));
}

/* The open round of each fragment, the run's shape, and the counters of dl:{R}:state. */
static void doc_rounds_and_counters(json_t *d, json_t *cfg, json_t *st)
{
    int F = (int)num(cfg, "fragments", 1);
    json_t *rounds = json_array();
    for (int f = 0; f < F; f++) {
        char k[32];
        snprintf(k, sizeof k, "round:%d", f);
        json_array_append_new(rounds, jnum(num(st, k, 0)));
    }
    setn(d, "sync_round", num(st, "round:0", 0));
    json_object_set_new(d, "rounds", rounds);
    setn(d, "num_fragments", F);
    setn(d, "numel", num(cfg, "numel", 0));
    setn(d, "num_shards", num(cfg, "shards", 0));
    json_object_set_new(d, "trainer", json_string(str(cfg, "trainer", "")));
    static const char *counters[] = {"rounds_closed", "commits",       "rejections",  "duplicates", "deaths",
                                     "joins",         "lease_changes", "corruptions", "repairs"};
    for (size_t i = 0; i < sizeof counters / sizeof *counters; i++) setn(d, counters[i], num(st, counters[i], 0));
    setn(d, "total_worker_deaths", num(st, "deaths", 0));
}

/* The settings an operator changes (control.c): membership, the outer optimizer, timeouts, DyLU, DN. */
static void doc_settings(json_t *d, json_t *st)
{
    setn(d, "num_workers", num(st, "target_workers", 1));
    setn(d, "min_workers", num(st, "min_workers", 1));
    json_object_set_new(d, "outer_lr", json_real(num(st, "outer_lr", 0.7)));
    json_object_set_new(d, "outer_momentum", json_real(num(st, "outer_momentum", 0.9)));
    json_object_set_new(d, "nesterov", json_boolean(num(st, "nesterov", 1) != 0));
    setn(d, "heartbeat_timeout_ms", num(st, "heartbeat_timeout_ms", 0));
    json_object_set_new(d, "heartbeat_timeout", json_real(num(st, "heartbeat_timeout_ms", 0) / 1000.0));
    json_object_set_new(d, "dylu_enabled", json_boolean(num(st, "dylu", 0) != 0));
    /* init records a base H in every run's state; it means something only when the run has DyLU */
    if (num(st, "dylu", 0) != 0 && json_object_get(st, "dylu_base_sync_every"))
        setn(d, "dylu_base_sync_every", num(st, "dylu_base_sync_every", 0));
}

/* cfg (dl:{R}:config as dl_status returns it, every value a string) into rc: 0, or -1 (rc: runconf_free). */
static int runconf_of_json(json_t *cfg, runconf *rc)
{
    size_t n = json_object_size(cfg), i = 0;
    const char **names = calloc(n + 1, sizeof *names), **values = calloc(n + 1, sizeof *values);
    const char *k;
    json_t *v;
    json_object_foreach(cfg, k, v) if (json_is_string(v))
    {
        names[i] = k;
        values[i++] = json_string_value(v);
    }
    char err[256];
    runconf_fields f = {names, values, i};
    int rcode = names && values ? runconf_parse(&f, rc, err, sizeof err) : -1;
    free(names);
    free(values);
    return rcode;
}

/* raw's run config when the run is async: 0, else -1; either way runconf_free(rc) after. */
static int async_conf(json_t *raw, runconf *rc)
{
    return runconf_of_json(json_object_get(raw, "config"), rc) == 0 && rc->async ? 0 : -1;
}

/* Fragment f's version: its first shard's (a submission to f advances each of its shards by one). */
static uint64_t frag_version(const runconf *rc, json_t *raw, int f)
{
    json_t *shards = arr(json_object_get(raw, "shards"));
    return (uint64_t)num(json_array_get(shards, (size_t)rc->frag_bounds[f]), "version", 0);
}

int status_async_text(json_t *raw, char *buf, size_t cap)
{
    runconf rc = {0};
    int ok = async_conf(raw, &rc) == 0;
    if (ok) {
        uint64_t sum = 0;
        size_t used = 0;
        for (int f = 0; f < rc.nfragments; f++) sum += frag_version(&rc, raw, f);
        used += (size_t)snprintf(buf, cap, "submissions applied %" PRIu64, sum);
        for (int f = 0; rc.nfragments > 1 && f < rc.nfragments && used < cap; f++)
            used += (size_t)snprintf(buf + used, cap - used, "%s%" PRIu64 "%s", f ? "/" : " (fragment versions ",
                                     frag_version(&rc, raw, f), f + 1 == rc.nfragments ? ")" : "");
    }
    runconf_free(&rc);
    return ok ? 0 : -1;
}

/* An async run's progress: each fragment's version and their sum, the submissions applied; with Delayed
 * Nesterov its buffer size N and, per fragment, the submissions its buffer holds now ((dn_t0 + version)
 * mod N: the shard-servers step the momentum at every N-th submission, checkpoint.c's dn_t). Absent for
 * sync runs. */
static void doc_async(json_t *d, json_t *raw)
{
    runconf rc = {0};
    if (async_conf(raw, &rc) == 0) {
        json_t *versions = json_array(), *buffered = json_array();
        uint64_t sum = 0;
        for (int f = 0; f < rc.nfragments; f++) {
            uint64_t v = frag_version(&rc, raw, f), t = runconf_dn_t0(&rc, rc.frag_bounds[f]) + v;
            sum += v;
            json_array_append_new(versions, json_integer((json_int_t)v));
            if (rc.dn_buffer > 0)
                json_array_append_new(buffered, json_integer((json_int_t)(t % (uint64_t)rc.dn_buffer)));
        }
        json_object_set_new(d, "fragment_versions", versions);
        setn(d, "submissions_applied", (double)sum);
        if (rc.dn_buffer > 0) {
            setn(d, "dn_buffer_size", rc.dn_buffer);
            json_object_set(d, "dn_buffered", buffered);
        }
        json_decref(buffered);
    }
    runconf_free(&rc);
}

/* Open barriers: who has submitted (arrived) for the open round of each fragment. Returns fragment
 * 0's arrivals (raw's, NULL when it has no barrier): each worker's "submitted" is read from it. */
static json_t *doc_pending(json_t *d, json_t *raw)
{
    json_t *b, *arrived0 = NULL, *pending = json_array();
    size_t i;
    json_array_foreach(arr(json_object_get(raw, "barriers")), i, b)
    {
        json_t *p = json_object();
        setn(p, "fragment", num(b, "frag", 0));
        setn(p, "round", num(b, "round", 0));
        json_object_set_new(p, "submitted", json_deep_copy(arr(json_object_get(b, "arrived"))));
        if (num(b, "frag", 0) == 0) arrived0 = json_object_get(b, "arrived");
        json_array_append_new(pending, p);
    }
    json_object_set_new(d, "pending", pending);
    setn(d, "pending_submissions", json_array_size(arr(arrived0)));
    return arrived0;
}

static void doc_workers(json_t *d, json_t *raw, json_t *arrived0)
{
    json_t *workers = json_array(), *w;
    size_t i;
    json_array_foreach(arr(json_object_get(raw, "workers")), i, w)
        json_array_append_new(workers, worker_doc(w, arrived0));
    json_object_set_new(d, "workers", workers);
    setn(d, "workers_live", json_array_size(workers));
}

static json_t *server_doc(json_t *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(str(s, "id", "")));
    json_object_set_new(o, "addr", json_string(str(s, "addr", "")));
    json_t *pid = json_object_get(s, "pid");
    json_object_set_new(o, "pid", json_is_string(pid) ? json_copy(pid) : jnum(num(s, "pid", 0)));
    setn(o, "last_beat_age_ms", num(s, "age_ms", 0));
    setn(o, "shards_held", num(s, "held", 0));
    return o;
}

static void doc_servers(json_t *d, json_t *raw)
{
    json_t *servers = json_array(), *s;
    size_t i;
    json_array_foreach(arr(json_object_get(raw, "servers")), i, s) json_array_append_new(servers, server_doc(s));
    json_object_set_new(d, "servers", servers);
    setn(d, "servers_live", json_array_size(servers));
}

/* A lease's age = time since the owner last renewed it (its last beat, from the last server record of
 * that id); null when the shard is unowned or its lease expired. */
static json_t *lease_age(json_t *servers, const char *owner, double left)
{
    json_t *age = json_null(), *srv;
    size_t j;
    json_array_foreach(arr(servers), j, srv)
    {
        if (owner[0] && left > 0 && !strcmp(str(srv, "id", ""), owner)) {
            json_decref(age);
            age = jnum(num(srv, "age_ms", 0));
        }
    }
    return age;
}

/* Shard i of raw's "shards": its version, lease, digest, and its corruption mark if it has one. */
static json_t *shard_doc(json_t *sh, size_t i, json_t *servers)
{
    json_t *o = json_object();
    /* the key at fault and why, while the shard is marked corrupt (until coordinator repair) */
    json_t *ck = json_object_get(sh, "corrupt");
    json_object_set_new(o, "corrupt", json_is_string(ck) ? json_copy(ck) : json_null());
    json_object_set_new(o, "corrupt_reason",
                        json_is_string(ck) ? json_string(str(sh, "corrupt_reason", "")) : json_null());
    setn(o, "shard", num(sh, "shard", (double)i));
    setn(o, "version", num(sh, "version", 0));
    const char *owner = str(sh, "owner", "");
    json_object_set_new(o, "owner", owner[0] ? json_string(owner) : json_null());
    setn(o, "epoch", num(sh, "epoch", 0));
    double left = num(sh, "lease_left_ms", 0);
    setn(o, "lease_left_ms", left);
    json_object_set_new(o, "lease_age_ms", lease_age(servers, owner, left));
    json_object_set_new(o, "lease_valid", json_boolean(owner[0] && left > 0));
    json_object_set_new(o, "digest", json_string(str(sh, "digest", "")));
    json_object_set_new(o, "snapshot", json_string(str(sh, "snap", "")));
    return o;
}

static void doc_shards(json_t *d, json_t *raw)
{
    json_t *shards = json_array(), *sh;
    int corrupt = 0;
    size_t i;
    json_array_foreach(arr(json_object_get(raw, "shards")), i, sh)
    {
        corrupt += json_is_string(json_object_get(sh, "corrupt"));
        json_array_append_new(shards, shard_doc(sh, i, json_object_get(raw, "servers")));
    }
    json_object_set_new(d, "shards", shards);
    setn(d, "corrupt_shards", corrupt);
}

/* A 'close' event as the participation chart wants it. */
static json_t *close_doc(json_t *e)
{
    json_t *c = json_object();
    setn(c, "t_ms", num(e, "t_ms", 0));
    setn(c, "fragment", num(e, "frag", 0));
    setn(c, "round", num(e, "round", 0));
    setn(c, "participants", num(e, "participants", 0));
    return c;
}

/* events (newest first): the last 30 that are not routine (joins, leaves, evictions, kicks,
 * rejections, leases, settings, ...; commits, closes and async submissions are in the counters: an async
 * run's submissions, one event a shard, filled the 30 within a second), and the closed rounds (oldest
 * first) for the participation chart */
static void doc_events(json_t *d, json_t *events)
{
    json_t *recent = json_array(), *closes = json_array(), *e;
    size_t i;
    json_array_foreach(arr(events), i, e)
    {
        const char *type = str(e, "type", "");
        if (json_array_size(recent) < 30 && strcmp(type, "commit") && strcmp(type, "close") && strcmp(type, "submit"))
            json_array_append(recent, e);
        if (!strcmp(type, "close")) json_array_insert_new(closes, 0, close_doc(e));
    }
    json_object_set_new(d, "events", recent);
    json_object_set_new(d, "recent_rounds", closes);
}

/* the evaluator's validation loss of the global model (oldest first) and the newest one */
static void doc_evals(json_t *d, json_t *raw)
{
    json_t *evals = arr(json_object_get(raw, "evals"));
    json_object_set_new(d, "evals", json_deep_copy(evals));
    json_t *last = json_array_get(evals, json_array_size(evals) - 1);
    json_object_set_new(d, "eval_loss", last ? json_real(num(last, "loss", 0)) : json_null());
    json_object_set_new(d, "eval_version", last ? jnum(num(last, "version", 0)) : json_null());
}

json_t *status_document(json_t *raw, json_t *events, int auth_required, int dashboard, int can_save, double uptime_s)
{
    json_t *cfg = json_object_get(raw, "config"), *st = json_object_get(raw, "state");
    json_t *d = json_object();
    doc_identity(d, raw, auth_required, dashboard, can_save, uptime_s);
    doc_rounds_and_counters(d, cfg, st);
    doc_settings(d, st);
    doc_async(d, raw);
    json_t *arrived0 = doc_pending(d, raw);
    doc_workers(d, raw, arrived0);
    doc_servers(d, raw);
    doc_shards(d, raw);
    doc_events(d, events);
    doc_evals(d, raw);
    /* every raw field, for what the document does not name */
    json_object_set_new(d, "config", cfg ? json_deep_copy(cfg) : json_object());
    json_object_set_new(d, "state", st ? json_deep_copy(st) : json_object());
    return d;
}

/* ---- Prometheus text ---- */

/* The shortest decimal that reads back as d ("0.7", not "0.69999999999999996"). */
static const char *shortest(double d, char *buf, size_t cap)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, d);
        if (strtod(buf, NULL) == d) break;
    }
    return buf;
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + (size_t)k + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) return;
        b->p = np;
        b->cap = cap;
    }
}

/* label value escaping per the exposition format: \\, \" and \n */
static const char *esc(const char *s, char *buf, size_t cap)
{
    size_t j = 0;
    for (; *s && j + 3 < cap; s++) {
        if (*s == '\\' || *s == '"')
            buf[j++] = '\\', buf[j++] = *s;
        else if (*s == '\n')
            buf[j++] = '\\', buf[j++] = 'n';
        else
            buf[j++] = *s;
    }
    buf[j] = 0;
    return buf;
}

static void family(sbuf *b, const char *name, const char *type, const char *help)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The run's counters of dl:{R}:state; r is the run's name, escaped. */
static void prom_counters(sbuf *b, const char *r, json_t *st)
{
    static const struct {
        const char *field, *name, *help;
    } ctr[] = {
        {"rounds_closed", "diloco_rounds_closed_total", "Barriers closed (sync rounds), all fragments."},
        {"commits", "diloco_commits_total", "Shard versions committed."},
        {"rejections", "diloco_rejections_total", "Submissions rejected (bad input, stale, unknown worker)."},
        {"duplicates", "diloco_duplicates_total", "Pushes of a round that had committed already (a resend)."},
        {"deaths", "diloco_worker_deaths_total", "Workers evicted (heartbeat timeout) or kicked."},
        {"joins", "diloco_worker_joins_total", "Worker registrations."},
        {"lease_changes", "diloco_lease_changes_total", "Shard leases taken or given back."},
        {"corruptions", "diloco_corruptions_total", "Shards found with corrupt durable state (dl_mark_corrupt)."},
        {"repairs", "diloco_repairs_total", "Runs of coordinator repair that installed a restored state."},
    };
    for (size_t i = 0; i < sizeof ctr / sizeof *ctr; i++) {
        family(b, ctr[i].name, "counter", ctr[i].help);
        sb_printf(b, "%s{run=\"%s\"} %.0f\n", ctr[i].name, r, num(st, ctr[i].field, 0));
    }
}

/* The run's gauges: up, membership, the outer optimizer, and the open round of each fragment. */
static void prom_run(sbuf *b, const char *r, json_t *raw)
{
    char l1[512];
    json_t *st = json_object_get(raw, "state");
    json_t *workers = arr(json_object_get(raw, "workers")), *servers = arr(json_object_get(raw, "servers"));
    family(b, "diloco_up", "gauge", "1 while the run is running, 0 once shut down.");
    sb_printf(b, "diloco_up{run=\"%s\"} %d\n", r, !strcmp(str(st, "status", ""), "running"));
    family(b, "diloco_workers_live", "gauge", "Live (registered, heartbeating) workers.");
    sb_printf(b, "diloco_workers_live{run=\"%s\"} %zu\n", r, json_array_size(workers));
    family(b, "diloco_workers_target", "gauge", "Arrivals a barrier needs (expected workers).");
    sb_printf(b, "diloco_workers_target{run=\"%s\"} %.0f\n", r, num(st, "target_workers", 1));
    family(b, "diloco_workers_min", "gauge", "Floor of the expected workers.");
    sb_printf(b, "diloco_workers_min{run=\"%s\"} %.0f\n", r, num(st, "min_workers", 1));
    family(b, "diloco_servers_live", "gauge", "Live shard-servers.");
    sb_printf(b, "diloco_servers_live{run=\"%s\"} %zu\n", r, json_array_size(servers));
    family(b, "diloco_outer_lr", "gauge", "Outer learning rate.");
    sb_printf(b, "diloco_outer_lr{run=\"%s\"} %s\n", r, shortest(num(st, "outer_lr", 0), l1, sizeof l1));
    family(b, "diloco_outer_momentum", "gauge", "Outer momentum.");
    sb_printf(b, "diloco_outer_momentum{run=\"%s\"} %s\n", r, shortest(num(st, "outer_momentum", 0), l1, sizeof l1));
    family(b, "diloco_round", "gauge", "Open round of each fragment.");
    int F = (int)num(json_object_get(raw, "config"), "fragments", 1);
    for (int f = 0; f < F; f++) {
        char k[32];
        snprintf(k, sizeof k, "round:%d", f);
        sb_printf(b, "diloco_round{run=\"%s\",fragment=\"%d\"} %.0f\n", r, f, num(st, k, 0));
    }
}

/* Each shard's committed version and lease epoch. */
static void prom_shard_versions(sbuf *b, const char *r, json_t *shards)
{
    json_t *sh;
    size_t i;
    family(b, "diloco_shard_version", "gauge", "Committed version of each shard.");
    json_array_foreach(shards, i, sh) sb_printf(b, "diloco_shard_version{run=\"%s\",shard=\"%.0f\"} %.0f\n", r,
                                                num(sh, "shard", (double)i), num(sh, "version", 0));
    family(b, "diloco_shard_lease_epoch", "gauge", "Lease epoch (fencing token) of each shard.");
    json_array_foreach(shards, i, sh) sb_printf(b, "diloco_shard_lease_epoch{run=\"%s\",shard=\"%.0f\"} %.0f\n", r,
                                                num(sh, "shard", (double)i), num(sh, "epoch", 0));
}

/* Each shard's corruption mark and lease, and the count of those marked. */
static void prom_shard_health(sbuf *b, const char *r, json_t *shards)
{
    json_t *sh;
    size_t i;
    family(b, "diloco_shard_corrupt", "gauge",
           "1 while the shard's durable state is marked corrupt (see coordinator repair).");
    int ncorrupt = 0;
    json_array_foreach(shards, i, sh)
    {
        int c = json_is_string(json_object_get(sh, "corrupt"));
        ncorrupt += c;
        sb_printf(b, "diloco_shard_corrupt{run=\"%s\",shard=\"%.0f\"} %d\n", r, num(sh, "shard", (double)i), c);
    }
    family(b, "diloco_shards_corrupt", "gauge",
           "Shards marked corrupt: the run cannot go on until coordinator repair.");
    sb_printf(b, "diloco_shards_corrupt{run=\"%s\"} %d\n", r, ncorrupt);
    family(b, "diloco_shard_lease_valid", "gauge", "1 if the shard is leased to a server now.");
    json_array_foreach(shards, i, sh)
    {
        int valid = str(sh, "owner", "")[0] && num(sh, "lease_left_ms", 0) > 0;
        sb_printf(b, "diloco_shard_lease_valid{run=\"%s\",shard=\"%.0f\"} %d\n", r, num(sh, "shard", (double)i), valid);
    }
}

/* What each worker reports: its heartbeat's age, speed, loss and inner steps. */
static void prom_workers(sbuf *b, const char *r, json_t *workers)
{
    char l1[512];
    json_t *w;
    size_t i;
    family(b, "diloco_worker_heartbeat_age_seconds", "gauge", "Seconds since each worker's last heartbeat.");
    json_array_foreach(workers, i, w)
        sb_printf(b, "diloco_worker_heartbeat_age_seconds{run=\"%s\",worker=\"%s\"} %.3f\n", r,
                  esc(str(w, "id", ""), l1, sizeof l1), num(w, "heartbeat_age_ms", 0) / 1000.0);
    family(b, "diloco_worker_steps_per_second", "gauge",
           "Training speed each worker reports (absent before its first report).");
    json_array_foreach(workers, i, w)
    {
        double speed = num(w, "speed", -1);
        if (speed >= 0)
            sb_printf(b, "diloco_worker_steps_per_second{run=\"%s\",worker=\"%s\"} %.6g\n", r,
                      esc(str(w, "id", ""), l1, sizeof l1), speed);
    }
    family(b, "diloco_worker_loss", "gauge", "Training loss each worker reports (absent before its first report).");
    json_array_foreach(workers, i, w)
    {
        double loss = num(w, "loss", -1);
        if (loss >= 0)
            sb_printf(b, "diloco_worker_loss{run=\"%s\",worker=\"%s\"} %.9g\n", r, esc(str(w, "id", ""), l1, sizeof l1),
                      loss);
    }
    family(b, "diloco_worker_step", "gauge", "Inner steps each worker reports.");
    json_array_foreach(workers, i, w) sb_printf(b, "diloco_worker_step{run=\"%s\",worker=\"%s\"} %.0f\n", r,
                                                esc(str(w, "id", ""), l1, sizeof l1), num(w, "step", 0));
}

/* The evaluator's last validation loss of the global model (evals.c), when there is one. */
static void prom_evals(sbuf *b, const char *r, json_t *raw)
{
    json_t *evals = arr(json_object_get(raw, "evals"));
    json_t *last = json_array_get(evals, json_array_size(evals) - 1);
    family(b, "diloco_eval_loss", "gauge",
           "Validation loss of the global model at its last evaluated version (absent before the first evaluation).");
    if (last) sb_printf(b, "diloco_eval_loss{run=\"%s\"} %.9g\n", r, num(last, "loss", 0));
    family(b, "diloco_eval_version", "gauge", "The version the last validation loss is of.");
    if (last) sb_printf(b, "diloco_eval_version{run=\"%s\"} %.0f\n", r, num(last, "version", 0));
}

/* Each shard-server's lease beat age and the shards it holds. */
static void prom_servers(sbuf *b, const char *r, json_t *servers)
{
    char l1[512];
    json_t *s;
    size_t i;
    family(b, "diloco_server_beat_age_seconds", "gauge", "Seconds since each shard-server's last lease beat.");
    json_array_foreach(servers, i, s) sb_printf(b, "diloco_server_beat_age_seconds{run=\"%s\",server=\"%s\"} %.3f\n", r,
                                                esc(str(s, "id", ""), l1, sizeof l1), num(s, "age_ms", 0) / 1000.0);
    family(b, "diloco_server_shards_held", "gauge", "Shards each shard-server holds.");
    json_array_foreach(servers, i, s) sb_printf(b, "diloco_server_shards_held{run=\"%s\",server=\"%s\"} %.0f\n", r,
                                                esc(str(s, "id", ""), l1, sizeof l1), num(s, "held", 0));
}

char *metrics_text(json_t *raw, const char *run)
{
    sbuf b = {0};
    char r[256];
    esc(run, r, sizeof r);
    json_t *shards = arr(json_object_get(raw, "shards"));
    prom_counters(&b, r, json_object_get(raw, "state"));
    prom_run(&b, r, raw);
    prom_shard_versions(&b, r, shards);
    prom_shard_health(&b, r, shards);
    prom_workers(&b, r, arr(json_object_get(raw, "workers")));
    prom_evals(&b, r, raw);
    prom_servers(&b, r, arr(json_object_get(raw, "servers")));
    if (!b.p) return strdup("");
    return b.p;
}
