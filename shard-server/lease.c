/*
 * lease.c: the lease loop.
 *
 * Every lease_ttl/3 the server calls dl_server_beat(id, addr, ttl, pid, loaded); the reply is the full
 * list of (shard, epoch) it now holds. `loaded` lists the shards this process has in memory: a lease of
 * our id on any other shard (we restarted, or dropped it) comes back with a new epoch, so workers holding
 * parameters we sent but had not committed know those are gone. Shards no longer held are dropped at once;
 * newly held ones are loaded.
 * `busy` lists the shards whose commit is under way: when a server joined and we hold more than our fair
 * share, those are not given back at this beat (is_busy). A server that gives shards back announces it
 * (lua/50_servers.lua); hearing that (subscribe.c), the others beat at once (lease_beat_now) to take them.
 * A lease is trusted only until (send time of the last answered beat) + ttl on our monotonic clock:
 * Redis set the expiry from a later instant, so this bound is conservative. If that bound passes (the
 * process was SIGSTOPped, Redis is unreachable) or a beat reply arrives more than a ttl after it was
 * sent, every lease is treated as lost before anything else happens; the next beat takes them again.
 * A beat also names the making of the run we loaded (its config's created_ms): once the run is made again
 * under its name (`coordinator init --force`), the beat is refused RECREATED and the process starts again
 * (run_recreated), instead of taking leases of the new run with the old layout and secret.
 * Two processes must not hold one server id (lua/50_servers.lua, check_server_process): each beat carries
 * this process's random token, and whether a beat of ours was answered yet. Our first beat takes the id over
 * (a restart after a crash); a later one finds the id taken by another process while that one beats, and is
 * refused REPLACED. We then serve nothing (every lease dropped) and keep beating: a process that stops
 * beating (a dead one, or a record of ours lost in a Redis failover) leaves the id to us again after its ttl;
 * one that goes on beating for ID_TAKEN_TTLS of our ttls has the id for good, and we stop (id_taken).
 * After each beat the server also refreshes the outer tunables (outer_lr, outer_momentum, nesterov), reads
 * the run's status (a shutdown is said once: see_status) and the shard -> owner address map it uses for
 * `moved` replies.
 */
#include "ss.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "format/mpmap.h"
#include "redis/runconf_load.h"

static void release_all(ss_ctx *ss, const char *why)
{
    for (int k = 0; k < ss->nshards; k++) shard_release(ss, &ss->shards[k], why);
}

void lease_check_expiry(ss_ctx *ss)
{
    if (ss_lease_valid(ss)) return;
    for (int k = 0; k < ss->nshards; k++)
        if (ss->shards[k].state != SH_FREE) {
            release_all(ss, "no lease renewal within the ttl");
            return;
        }
}

const char *lease_owner_addr(ss_ctx *ss, int k)
{
    if (k < 0 || k >= ss->nshards) return NULL;
    return ss->owner_addr[k];
}

/* ---------------------------------------------------------------------------------------------- */
/* tunables and owner map */

/* The run's status (tunables): the first time it reads "shutdown", one line says so and what this server does
 * then, which is what it did before: hold its leases, answer gets at the last committed version (the workers'
 * last fetches) and finish the commits under way; no round closes any more (arrivals are refused). */
static void see_status(ss_ctx *ss, const redisReply *status)
{
    if (ss->shutdown_told || status->type != REDIS_REPLY_STRING || strcmp(status->str, "shutdown") != 0) return;
    ss->shutdown_told = 1;
    log_info("run '%s' was shut down by an operator: no round closes any more; this server keeps serving the "
             "shards' last versions to the workers' final fetches; stop it (SIGTERM) once they are gone",
             ss->opts.run);
}

static void on_tunables(redisReply *r, void *priv)
{
    ss_ctx *ss = priv;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 4) return;
    see_status(ss, r->element[3]);
    ss_tunables t = ss->tun;
    if (r->element[0]->type == REDIS_REPLY_STRING) t.lr = strtof(r->element[0]->str, NULL);
    if (r->element[1]->type == REDIS_REPLY_STRING) t.mu = strtof(r->element[1]->str, NULL);
    if (r->element[2]->type == REDIS_REPLY_STRING) t.nesterov = atoi(r->element[2]->str) != 0;
    if (t.lr != ss->tun.lr || t.mu != ss->tun.mu || t.nesterov != ss->tun.nesterov)
        log_info("outer optimizer: lr %g momentum %g nesterov %d", (double)t.lr, (double)t.mu, t.nesterov);
    ss->tun = t;
}

/* servers reply saved until the owners reply arrives */
static redisReply *servers_copy_lookup(redisReply *servers, const char *id, char *addr, size_t cap)
{
    for (size_t i = 0; i + 1 < servers->elements; i += 2)
        if (strcmp(servers->element[i]->str, id) == 0) {
            if (mpmap_get_str(servers->element[i + 1]->str, (size_t)servers->element[i + 1]->len, "addr", addr, cap) !=
                0)
                addr[0] = '\0';
            return servers;
        }
    addr[0] = '\0';
    return NULL;
}

typedef struct owners_q {
    ss_ctx *ss;
    char **addrs; /* per server entry: id, addr pairs */
    int n;
} owners_q;

static void on_owners(redisReply *r, void *priv)
{
    owners_q *q = priv;
    ss_ctx *ss = q->ss;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && (int)r->elements == ss->nshards) {
        for (int k = 0; k < ss->nshards; k++) {
            const char *owner = r->element[k]->type == REDIS_REPLY_STRING ? r->element[k]->str : "";
            const char *addr = "";
            for (int i = 0; i < q->n; i++)
                if (strcmp(q->addrs[2 * i], owner) == 0) addr = q->addrs[2 * i + 1];
            free(ss->owner_addr[k]);
            ss->owner_addr[k] = strdup(addr);
        }
    }
    for (int i = 0; i < 2 * q->n; i++) free(q->addrs[i]);
    free(q->addrs);
    free(q);
}

static void on_servers(redisReply *r, void *priv)
{
    ss_ctx *ss = priv;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) return;
    owners_q *q = calloc(1, sizeof *q);
    if (q == NULL) return;
    q->ss = ss;
    q->n = (int)(r->elements / 2);
    q->addrs = calloc((size_t)(2 * q->n + 1), sizeof(char *));
    for (int i = 0; q->addrs != NULL && i < q->n; i++) {
        char addr[300];
        servers_copy_lookup(r, r->element[2 * i]->str, addr, sizeof addr);
        q->addrs[2 * i] = strdup(r->element[2 * i]->str);
        q->addrs[2 * i + 1] = strdup(addr);
    }
    char key[KEY_MAX];
    int argc = 2 + ss->nshards;
    const char **argv = calloc((size_t)argc, sizeof *argv);
    char(*fields)[24] = calloc((size_t)ss->nshards, sizeof *fields);
    if (q->addrs == NULL || argv == NULL || fields == NULL) {
        free(argv);
        free(fields);
        q->n = 0;
        on_owners(NULL, q);
        return;
    }
    argv[0] = "HMGET";
    argv[1] = key_run(key, sizeof key, ss->opts.run, "shards");
    for (int k = 0; k < ss->nshards; k++) {
        snprintf(fields[k], sizeof fields[k], "%d:owner", k);
        argv[2 + k] = fields[k];
    }
    if (rlink_cmds(&ss->ctl, on_owners, q, argc, argv) != 0) on_owners(NULL, q);
    free(argv);
    free(fields);
}

static void refresh_views(ss_ctx *ss)
{
    char key[KEY_MAX];
    const char *tv[6] = {"HMGET",    key_run(key, sizeof key, ss->opts.run, "tunables"),
                         "outer_lr", "outer_momentum",
                         "nesterov", "status"};
    rlink_cmds(&ss->ctl, on_tunables, ss, 6, tv);
    char skey[KEY_MAX];
    const char *sv[2] = {"HGETALL", key_run(skey, sizeof skey, ss->opts.run, "servers")};
    rlink_cmds(&ss->ctl, on_servers, ss, 2, sv);
}

/* ---------------------------------------------------------------------------------------------- */
/* the beat */

/* The run was made again under its name (`coordinator init --force`; dl_server_beat refused RECREATED before
 * we took a lease of it): its layout, secret and shards are not the ones we loaded. Nothing of the old run
 * is left to serve, so the loop ends and main.c starts the process again, which loads the new run. */
static void run_recreated(ss_ctx *ss, const char *why)
{
    log_warn("%s: starting again to serve the new run", why + strlen("RECREATED "));
    ss->recreated = 1;
    ss->stopping = 1;
    event_base_loopbreak(ss->base);
}

/* How many of our lease ttls another process must go on beating under our id before we leave it the id. A
 * dead process's record stops looking alive one of its ttls after its last beat; two are a margin. */
#define ID_TAKEN_TTLS 3

/* dl_server_beat refused REPLACED: another process beats under our id. Serve nothing meanwhile (its beats
 * renew the leases of our id, and its epochs fence our commits); stop once it has beaten for ID_TAKEN_TTLS
 * ttls, for then it is alive, not a record of a dead process that a later beat of ours replaces. */
static void id_taken(ss_ctx *ss, const char *why)
{
    uint64_t now = now_ms();
    why += strlen("REPLACED ");
    if (ss->taken_since_ms == 0) {
        ss->taken_since_ms = now;
        log_warn("%s: serving nothing while it beats (two shard-servers must not share an --id)", why);
    }
    ss->lease_valid_until = 0;
    release_all(ss, "server id taken over by another process");
    if (now - ss->taken_since_ms < (uint64_t)ID_TAKEN_TTLS * (uint64_t)ss->opts.lease_ttl_ms) return;
    log_error("%s, and it has gone on beating for %.1f s: stopping (exit status %d); give each shard-server "
              "its own --id",
              why, (double)(now - ss->taken_since_ms) / 1000.0, SS_EXIT_ID_TAKEN);
    ss->replaced = 1;
    ss->stopping = 1;
    event_base_loopbreak(ss->base);
}

/* A beat was answered with our leases: the id is ours. */
static void id_held(ss_ctx *ss)
{
    if (ss->taken_since_ms != 0)
        log_info("server id %s is ours again (the other process stopped beating under it)", ss->id);
    ss->taken_since_ms = 0;
    ss->beat_accepted = 1;
}

/* A renewal failed for a reason other than the run being gone: said when it is news (the first failure, or
 * another reason than the last one said) and then once every RENEW_WARN_EVERY_MS while it lasts. A Redis that
 * refuses writes (MISCONF after a failed RDB save, say) refuses every beat, and each beat (ttl/3) said so. */
#define RENEW_WARN_EVERY_MS 30000
static void renewal_failed(ss_ctx *ss, const char *what)
{
    uint64_t now = now_ms();
    int news = ss->renew_warned_ms == 0 || strncmp(ss->renew_warned, what, sizeof ss->renew_warned - 1) != 0;
    if (!news && now - ss->renew_warned_ms < RENEW_WARN_EVERY_MS) return;
    char why[768];
    rconn_explain_error(what, why, sizeof why);
    log_warn("lease renewal failed: %s%s", why, news ? "" : " (still; said every 30 s while it lasts)");
    ss->renew_warned_ms = now;
    snprintf(ss->renew_warned, sizeof ss->renew_warned, "%s", what);
}

static void beat_answered(ss_ctx *ss, redisReply *r)
{
    if (ss->stopping) return;
    if (r != NULL && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "RECREATED ", 10) == 0) {
        run_recreated(ss, r->str);
        return;
    }
    if (r != NULL && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "REPLACED ", 9) == 0) {
        id_taken(ss, r->str);
        return;
    }
    uint64_t now = now_ms();
    uint64_t took = now - ss->beat_sent_ms;
    const char *gone = r != NULL && r->type == REDIS_REPLY_ERROR ? runconf_error_gone(r->str) : NULL;
    if (gone) {
        if (ss->gone_logged_ms == 0 || now - ss->gone_logged_ms >= RUN_GONE_LOG_EVERY_MS) {
            log_error("lease renewal failed: run '%s' is gone from this Redis (%s): " RUN_GONE_HINT, ss->opts.run,
                      gone);
            ss->gone_logged_ms = now;
        }
        lease_check_expiry(ss);
        return;
    }
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        renewal_failed(ss, r == NULL                      ? "Redis connection lost"
                           : r->type == REDIS_REPLY_ERROR ? r->str
                                                          : "unexpected reply");
        lease_check_expiry(ss);
        return;
    }
    ss->gone_logged_ms = 0;
    ss->renew_warned_ms = 0;
    if (took > (uint64_t)ss->opts.lease_ttl_ms) {
        log_warn("lease renewal answered after %llu ms (> ttl %d ms): treating every lease as lost",
                 (unsigned long long)took, ss->opts.lease_ttl_ms);
        ss->lease_valid_until = 0;
        release_all(ss, "late lease renewal");
        lease_beat_now(ss);
        return;
    }
    id_held(ss);
    ss->lease_valid_until = ss->beat_sent_ms + (uint64_t)ss->opts.lease_ttl_ms;
    char *held = calloc((size_t)ss->nshards, 1);
    int64_t *epochs = calloc((size_t)ss->nshards, sizeof *epochs);
    if (held == NULL || epochs == NULL) {
        free(held);
        free(epochs);
        return;
    }
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        long long k = r->element[i]->integer, e = r->element[i + 1]->integer;
        if (r->element[i]->type == REDIS_REPLY_INTEGER && k >= 0 && k < ss->nshards) {
            held[k] = 1;
            epochs[k] = e;
        }
    }
    for (int k = 0; k < ss->nshards; k++) {
        if (held[k])
            shard_acquire(ss, &ss->shards[k], epochs[k]);
        else
            shard_release(ss, &ss->shards[k], "not renewed");
    }
    free(held);
    free(epochs);
    refresh_views(ss);
}

static void on_beat(redisReply *r, void *priv)
{
    ss_ctx *ss = priv;
    ss->beat_in_flight = 0;
    beat_answered(ss, r);
    if (ss->beat_again) lease_beat_now(ss); /* another server gave shards back meanwhile (subscribe.c) */
}

/* "k,k,..." of the shards for which pick says yes; NULL if out of memory. */
static char *shards_csv(ss_ctx *ss, int (*pick)(ss_ctx *ss, ss_shard *s))
{
    size_t cap = (size_t)ss->nshards * 12 + 1, len = 0;
    char *out = malloc(cap);
    if (out == NULL) return NULL;
    out[0] = '\0';
    for (int k = 0; k < ss->nshards; k++)
        if (pick(ss, &ss->shards[k])) len += (size_t)snprintf(out + len, cap - len, "%s%d", len ? "," : "", k);
    return out;
}

/* The shards this process holds in memory (loading or ready): the beat's `loaded`. */
static int is_loaded(ss_ctx *ss, ss_shard *s)
{
    (void)ss;
    return s->state != SH_FREE;
}

/* A shard is named busy at this many beats in a row at most (is_busy). */
#define BUSY_BEATS_MAX 3

/* The shards whose sync commit is under way: the beat's `busy`, which dl_server_beat does not give back at
 * this beat (lua/50_servers.lua): the workers may hold the version served before its dl_commit, and a
 * commit fenced by the give-back makes the new owner recompute the round from every pseudo-gradient again
 * (each worker's confirm resends its own, and the version becomes durable only then). A commit usually
 * takes milliseconds; a shard is named busy at BUSY_BEATS_MAX beats in a row at most (busy_beats, counted
 * here), so a give-back waits that many beats at most, however slow or frequent its commits. */
static int is_busy(ss_ctx *ss, ss_shard *s)
{
    int busy = !ss->rc.async && s->state == SH_READY && s->committing && s->busy_beats < BUSY_BEATS_MAX;
    s->busy_beats = busy ? s->busy_beats + 1 : 0;
    return busy;
}

void lease_beat_now(ss_ctx *ss)
{
    if (ss->stopping) return;
    if (ss->beat_in_flight) { /* (asked while one is on its way: once it is answered) */
        ss->beat_again = 1;
        return;
    }
    ss->beat_again = 0;
    lease_check_expiry(ss);
    char ttl[24], pid[24];
    snprintf(ttl, sizeof ttl, "%d", ss->opts.lease_ttl_ms);
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    char *loaded = shards_csv(ss, is_loaded), *busy = shards_csv(ss, is_busy);
    if (loaded == NULL || busy == NULL) {
        log_warn("lease renewal skipped: out of memory");
        free(loaded);
        free(busy);
        return;
    }
    char made[24] = ""; /* (a run made before created_ms was recorded: not checked) */
    if (ss->rc.created_ms > 0) snprintf(made, sizeof made, "%llu", (unsigned long long)ss->rc.created_ms);
    const char *args[9] = {ss->id, ss->addr, ttl, pid, loaded, busy, made, ss->token, ss->beat_accepted ? "0" : "1"};
    ss->beat_sent_ms = now_ms();
    if (store_fcall(ss, on_beat, ss, "dl_server_beat", 9, args) == 0) ss->beat_in_flight = 1;
    free(loaded);
    free(busy);
}

static void on_beat_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lease_beat_now(arg);
}

static void on_ctl_ready(void *arg)
{
    ss_ctx *ss = arg;
    ss->beat_in_flight = 0;
    lease_beat_now(ss);
}

int lease_start(ss_ctx *ss, char *err, size_t errlen)
{
    int period = ss->opts.lease_ttl_ms / 3;
    if (period < 1) period = 1;
    ss->beat_timer = event_new(ss->base, -1, EV_PERSIST, on_beat_timer, ss);
    if (ss->beat_timer == NULL) {
        err_set(err, errlen, "cannot create the lease timer");
        return -1;
    }
    struct timeval tv = {.tv_sec = period / 1000, .tv_usec = (period % 1000) * 1000};
    evtimer_add(ss->beat_timer, &tv);
    ss->ctl.on_ready = on_ctl_ready;
    ss->ctl.on_ready_arg = ss;
    if (ss->ctl.ready) lease_beat_now(ss);
    return 0;
}

typedef struct leave_q {
    void (*done)(void *);
    void *arg;
} leave_q;

static void on_leave(redisReply *r, void *priv)
{
    leave_q *q = priv;
    if (r == NULL || r->type == REDIS_REPLY_ERROR)
        log_warn("dl_server_leave failed: %s (leases will expire after the ttl)", r ? r->str : "connection lost");
    else if (r->type == REDIS_REPLY_STRING && strcmp(r->str, "REPLACED") == 0)
        log_info("leases not given back: another process holds this server id now");
    else
        log_info("leases given back");
    q->done(q->arg);
    free(q);
}

void lease_leave(ss_ctx *ss, void (*done)(void *), void *arg)
{
    release_all(ss, "shutting down");
    ss->lease_valid_until = 0;
    leave_q *q = malloc(sizeof *q);
    const char *args[2] = {ss->id, ss->token};
    if (q == NULL) {
        done(arg);
        return;
    }
    q->done = done;
    q->arg = arg;
    if (store_fcall(ss, on_leave, q, "dl_server_leave", 2, args) != 0) {
        log_warn("cannot give leases back (Redis not connected); they expire after the ttl");
        free(q);
        done(arg);
    }
}
