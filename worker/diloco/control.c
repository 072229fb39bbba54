/* control.c: the session's control plane, at the bottom of libdiloco: commands on the control
 * connection to Redis (reconnecting as needed), waiting for replicas, whether we are stopping, and who
 * we are to the run: registration, our incarnation, whether it is still a member.
 *
 * Every other file of the library talks to Redis through dl_command; this file calls none of them
 * (docs/architecture.md "Layers").
 *
 * A stop (SIGINT, SIGTERM: o.stop, or diloco_request_stop) must not wait for a Redis that does not answer
 * (frozen, its packets dropped). Every connection of the session that the host's stop could find blocked
 * watches it (dl_watch_stop, rconn_watch_stop): the training thread's and the owner threads' ctl, each
 * round's lane, the barrier's blocking connection. The thread that runs a command looks at the stop itself
 * while it waits (every 100 ms), so no thread ever touches another's connection for it: ctl stays under
 * ctl_mu, a lane with its round's thread, blk with whoever pops (wake.c). A command in flight at the stop
 * ends at once and breaks its connection; one begun after it gets CLOSING_REDIS_TIMEOUT_MS. A broken
 * connection is not opened again while stopping, except by the close itself (diloco_close: dl_closing),
 * which needs it for its best-effort commands (confirming the last round, completing a submission,
 * deregistering): then with that timeout, and not at all once Redis left a command begun after the stop,
 * or such a reopen, unanswered (d->redis_unanswered: a close pays one closing timeout for a Redis that does
 * not answer, not one per command). The heartbeat's
 * and the hub's connections, which never carry the training thread's commands, are ended by their stops
 * (heartbeat_stop, wake_hub_stop: rconn_interrupt, and their flags end a connect's handshake). A reconnect
 * (its retries, its handshake) watches the stop too, o.stop or diloco_request_stop (rconn_connect_watched):
 * a host that stops only through diloco_request_stop must not wait for Redis to come back.
 *
 * Registration gives us an incarnation number. Everything we send (arrivals, pushes, heartbeats)
 * carries it, so a worker that was evicted and came back can never have an old pseudo-gradient of
 * its previous life counted. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "internal.h"
#include "redis/rconn.h"

/* A round in flight's own control connection (dl_round_ctl_use), used by its thread alone: rounds of several
 * fragments in flight at once would otherwise take turns on ctl, a round trip of the WAN each. */
static _Thread_local rconn **round_ctl;

rconn **dl_round_ctl_use(rconn **c)
{
    rconn **prev = round_ctl;
    round_ctl = c;
    return prev;
}

/* The connection this thread's commands go on, taken: the round's own, or ctl under ctl_mu. */
static rconn **ctl_take(diloco *d)
{
    if (round_ctl) return round_ctl;
    pthread_mutex_lock(&d->ctl_mu);
    return &d->ctl;
}

static void ctl_give(diloco *d, rconn **c)
{
    if (c != round_ctl) pthread_mutex_unlock(&d->ctl_mu);
}

int dl_stop_seen(void *d)
{
    return dl_stopping(d);
}

void dl_watch_stop(diloco *d, rconn *c)
{
    rconn_watch_stop(c, dl_stop_seen, d, CLOSING_REDIS_TIMEOUT_MS);
}

void dl_closing(diloco *d)
{
    __atomic_store_n(&d->closing, 1, __ATOMIC_RELAXED);
}

/* While stopping: none before the close; in it, one attempt with the closing timeout, none once one failed
 * (see the top). */
static rconn *reopen_stopping(diloco *d, char *err, size_t errlen)
{
    if (!__atomic_load_n(&d->closing, __ATOMIC_RELAXED)) {
        err_set(err, errlen, "stopping (the connection to Redis was cut)");
        return NULL;
    }
    if (__atomic_load_n(&d->redis_unanswered, __ATOMIC_RELAXED)) {
        err_set(err, errlen, "stopping, and Redis did not answer since the stop");
        return NULL;
    }
    rconn *c = rconn_connect(&d->url, CLOSING_REDIS_TIMEOUT_MS, err, errlen);
    if (c == NULL) __atomic_store_n(&d->redis_unanswered, 1, __ATOMIC_RELAXED);
    return c;
}

/* With *c taken: a usable control connection, reconnecting if it is missing or broken (with backoff, for
 * as long as it takes: Redis restarts are survivable; a refusal of our credentials ends it at once;
 * stopping: reopen_stopping). 0, or -1 + err when there is none (stopping, or refused). */
static int ctl_ready(diloco *d, rconn **c, char *err, size_t errlen)
{
    if (*c != NULL && !rconn_broken(*c)) return 0;
    if (*c) rconn_free(*c);
    *c = dl_stopping(d) ? reopen_stopping(d, err, errlen)
                        : rconn_connect_watched(&d->url, REDIS_TIMEOUT_MS, -1, dl_stop_seen, d, NULL, err, errlen);
    if (*c == NULL && !dl_stopping(d)) log_error("%s", err);
    if (*c != NULL) dl_watch_stop(d, *c);
    return *c ? 0 : -1;
}

/* Whether a command whose try `attempt` broke its connection is tried again: once, not while stopping
 * (what a stop interrupted is not sent again). */
static int try_again(diloco *d, int attempt)
{
    return attempt == 0 || (attempt == 1 && !dl_stopping(d));
}

/* Why the command with reply r failed, if it did: no connection (why: the reconnect's error), or c's. A
 * command begun while stopping that broke its connection was not answered in time: no reopen after it. */
static void ctl_error(diloco *d, int stopping, const rconn *c, redisReply *r, const char *why, char *err, size_t errlen)
{
    int end;
    if (stopping && r == NULL && c != NULL) __atomic_store_n(&d->redis_unanswered, 1, __ATOMIC_RELAXED);
    if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "SHUTDOWN ", 9) == 0) {
        /* a Function says the run was shut down: the same news as a heartbeat's, maybe sooner (a round's
         * refused arrival), and a sync that fails on it is the end, not a failure to retry */
        pthread_mutex_lock(&d->hb_mu);
        dl_shutdown_told_locked(d);
        pthread_mutex_unlock(&d->hb_mu);
    } else if (r && r->type == REDIS_REPLY_ERROR && (end = dl_reply_end(d, r->str)) != 0) {
        pthread_mutex_lock(&d->hb_mu); /* (the same ends: a registration into the run made again, say) */
        dl_end_told_locked(d, end);
        pthread_mutex_unlock(&d->hb_mu);
    }
    if (c == NULL)
        err_set(err, errlen, "no connection to Redis: %s", why);
    else if (r == NULL && rconn_broken_not_master(c)) /* (Redis answered: READONLY, ... with what to do) */
        err_set(err, errlen, "%s", rconn_errstr(c));
    else
        rconn_reply_error(c, r, err, errlen);
}

/* Run a command on the control connection; on a connection error reconnect and try once more (try_again). The
 * command may then run twice (the first try ran, its reply was lost): only idempotent commands, or
 * ones whose caller finds out (dl_arrive: STALE, closed with us; dl_submit: its submission number).
 * NULL or an error reply: err says why. It is written before ctl_mu is released: a NULL reply's reason
 * is the connection's error string, and the next reconnect of any thread frees that connection. */
static redisReply *ctl_vcommand(diloco *d, int *not_master, char *err, size_t errlen, const char *fmt, va_list ap)
{
    redisReply *r = NULL;
    rconn **c = ctl_take(d);
    char why[256] = "";
    int stopping = dl_stopping(d);
    for (int attempt = 0; try_again(d, attempt) && r == NULL && ctl_ready(d, c, why, sizeof why) == 0; attempt++) {
        va_list again;
        va_copy(again, ap);
        r = rconn_vcommand(*c, fmt, again);
        va_end(again);
    }
    ctl_error(d, stopping, *c, r, why, err, errlen);
    if (not_master != NULL) *not_master = r == NULL && *c != NULL && rconn_broken_not_master(*c);
    ctl_give(d, c);
    return r;
}

redisReply *dl_command(diloco *d, char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = ctl_vcommand(d, NULL, err, errlen, fmt, ap);
    va_end(ap);
    return r;
}

/* dl_command; *not_master: no reply because Redis answered as a node that does not lead (rconn_broken_not_master:
 * a replica), not because it did not answer. */
static redisReply *ctl_command_led(diloco *d, int *not_master, char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = ctl_vcommand(d, not_master, err, errlen, fmt, ap);
    va_end(ap);
    return r;
}

redisReply *dl_command_argv(diloco *d, int argc, const char **argv, const size_t *lens, char *err, size_t errlen)
{
    redisReply *r = NULL;
    rconn **c = ctl_take(d);
    char why[256] = "";
    int stopping = dl_stopping(d);
    for (int attempt = 0; try_again(d, attempt) && r == NULL && ctl_ready(d, c, why, sizeof why) == 0; attempt++)
        r = rconn_command_argv(*c, argc, argv, lens);
    ctl_error(d, stopping, *c, r, why, err, errlen);
    ctl_give(d, c);
    return r;
}

redisReply *dl_command_argv_once(diloco *d, int argc, const char **argv, const size_t *lens, char *err, size_t errlen)
{
    rconn **c = ctl_take(d);
    int stopping = dl_stopping(d), tried = *c && !rconn_broken(*c);
    redisReply *r = tried ? rconn_command_argv(*c, argc, argv, lens) : NULL;
    ctl_error(d, stopping && tried, *c, r, "the connection to Redis is broken", err, errlen);
    ctl_give(d, c);
    return r;
}

int dl_reply_failed(const redisReply *r)
{
    return r == NULL || r->type == REDIS_REPLY_ERROR;
}

#define WAIT_REPLICAS_MS 500      /* one WAIT */
#define WAIT_REPLICAS_LOG_MS 5000 /* a warning while fewer replicas have our write */

int dl_wait_replicas(diloco *d, char *err, size_t errlen)
{
    if (d->rc.min_replicas <= 0) return 0;
    uint64_t t0 = now_ms(), logged = t0;
    for (;;) {
        rconn **c = ctl_take(d); /* (the connection our writes went on) */
        int n =
            *c && !rconn_broken(*c) ? rconn_wait_replicas(*c, d->config_key, d->rc.min_replicas, WAIT_REPLICAS_MS) : -1;
        ctl_give(d, c);
        if (n >= d->rc.min_replicas) return 0;
        if (n < 0 || dl_stopping(d)) {
            err_set(err, errlen, "waiting for %d Redis replica(s) to have our write: %s", d->rc.min_replicas,
                    n < 0 ? "the connection broke (a failover?)" : "stopping");
            return -1;
        }
        if (now_ms() - logged >= WAIT_REPLICAS_LOG_MS) {
            log_warn("%d of %d Redis replica(s) have our write after %.1f s; waiting (are the replicas up?)", n,
                     d->rc.min_replicas, (double)(now_ms() - t0) / 1000.0);
            logged = now_ms();
        }
    }
}

/* Read from every thread of the session while a signal handler or another thread sets the flags: atomic
 * loads (lock-free on an int, so a handler's atomic store pairs with them) */
int dl_stopping(const diloco *d)
{
    return __atomic_load_n(&d->stop_flag, __ATOMIC_RELAXED) ||
           (d->o.stop && __atomic_load_n(d->o.stop, __ATOMIC_RELAXED));
}

void diloco_request_stop(diloco *d)
{
    __atomic_store_n(&d->stop_flag, 1, __ATOMIC_RELAXED);
}

/* A worker of one process stops on its host's word at once; a group's ranks only where they agreed on it
 * (group.c agree_stop), so that they stop after the same inner step. */
int diloco_stop_requested(const diloco *d)
{
    diloco *m = (diloco *)d;
    pthread_mutex_lock(&m->hb_mu);
    int s = m->stop_requested;
    if (s == DILOCO_STOP_SHUTDOWN && m->run_end) s = m->run_end;
    pthread_mutex_unlock(&m->hb_mu);
    if (s == 0 && !d->grp && dl_stopping(d)) s = DILOCO_STOP_ASKED;
    return s;
}

int64_t dl_inc(diloco *d)
{
    pthread_mutex_lock(&d->hb_mu);
    int64_t inc = d->inc;
    pthread_mutex_unlock(&d->hb_mu);
    return inc;
}

/* A flag the heartbeat thread writes, read under its lock. */
static int heartbeat_flag(diloco *d, const int *flag)
{
    pthread_mutex_lock(&d->hb_mu);
    int v = *flag;
    pthread_mutex_unlock(&d->hb_mu);
    return v;
}

int dl_register(diloco *d, char *err, size_t errlen)
{
    if (d->grp) return 0;
    int64_t *held = malloc((size_t)d->run_nshards * sizeof *held);
    if (held == NULL) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    dl_held_by_run(d, held);
    int rc = dl_register_now(d, held, err, errlen);
    free(held);
    return rc;
}

void dl_held_by_run(const diloco *d, int64_t *held)
{
    for (int k = 0; k < d->run_nshards; k++) held[k] = -1;
    for (int k = 0; k < d->rc.nshards; k++) held[dl_shard_id(d, k)] = d->shard_version[k];
}

/* What a registration records for a replay of the run (lua/30_workers.lua, dl_register): the inner steps
 * trained so far, and the versions held ("shard:version,...": those the parameters were trained from since
 * they last took versions, by_run: dl_held_by_run's), whose steps registering again drops. A shard whose get
 * failed holds no version (-1, sync.c get_round): it is left out, as dl_register takes versions from 0 (a
 * worker registering again after failed syncs was refused BADARG and gave up for good). NULL when out of
 * memory. */
static char *held_versions(diloco *d, const int64_t *by_run, uint64_t *steps)
{
    pthread_mutex_lock(&d->hb_mu);
    *steps = d->total_steps;
    pthread_mutex_unlock(&d->hb_mu);
    size_t len = (size_t)d->run_nshards * 32 + 1, at = 0;
    char *held = malloc(len);
    if (held == NULL) return NULL;
    held[0] = '\0';
    for (int k = 0; k < d->run_nshards; k++)
        if (by_run[k] >= 0) at += (size_t)snprintf(held + at, len - at, "%s%d:%" PRId64, at ? "," : "", k, by_run[k]);
    return held;
}

#define NO_ANSWER (-2)       /* register_once: Redis gave no reply (unreachable, or the connection broke) */
/* register_once: Redis refused it for now (rconn_error_transient: out of memory, a replica, ...) */
#define REFUSED_FOR_NOW (-3)

static int register_once(diloco *d, const int64_t *by_run, char *err, size_t errlen)
{
    uint64_t steps;
    char *held = held_versions(d, by_run, &steps);
    if (held == NULL) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    int not_master;
    redisReply *r = ctl_command_led(d, &not_master, err, errlen, "FCALL dl_register 1 %s %s %s %d %d %" PRIu64 " %s %s",
                                    d->config_key, d->worker_id, d->host, d->sync_every, d->grp ? d->o.group.size : 1,
                                    steps, held, d->made_at);
    free(held);
    /* (a replica, READONLY: refused for now, as OOM is; a reconnect to a plain URL finds the same node, and the
     * operator may be promoting it) */
    if (r == NULL) return not_master ? REFUSED_FOR_NOW : NO_ANSWER;
    if (dl_reply_failed(r)) {
        int for_now = rconn_error_transient(r->str);
        freeReplyObject(r);
        return for_now ? REFUSED_FOR_NOW : -1;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 4 || r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[2]->type != REDIS_REPLY_ARRAY || r->element[2]->elements < 1) {
        err_set(err, errlen, "unexpected reply to dl_register");
        freeReplyObject(r);
        return -1;
    }
    pthread_mutex_lock(&d->hb_mu);
    int again = d->inc != 0;
    d->inc = r->element[0]->integer;
    d->evicted = 0;
    pthread_mutex_unlock(&d->hb_mu);
    __atomic_store_n(&d->place_lost, 0, __ATOMIC_RELEASE); /* (the old incarnation's places are no-ops now) */
    redisReply *rounds = r->element[2], *joined = r->element[3];
    if ((int)rounds->elements != d->rc.nfragments) {
        err_set(err, errlen, "dl_register returned %zu rounds for %d fragments", rounds->elements, d->rc.nfragments);
        freeReplyObject(r);
        return -1;
    }
    for (int f = 0; f < d->rc.nfragments; f++) {
        dl_set_frag_version(d, f, rounds->element[f]->integer);
        d->frag_joined[f] = joined->type == REDIS_REPLY_ARRAY && (int)joined->elements == d->rc.nfragments &&
                                    joined->element[f]->type == REDIS_REPLY_INTEGER
                                ? joined->element[f]->integer
                                : d->frag_version[f];
    }
    /* (incarnations number the run's registrations, every worker's: a first one said "incarnation 2" alone, which
     * read as a registration of ours before it) */
    log_info("registered as %s (incarnation %" PRId64 "%s), open round %" PRId64, d->worker_id, d->inc,
             again        ? ", again"
             : d->inc > 1 ? ": the run numbers every worker's registrations"
                          : "",
             d->frag_version[0]);
    freeReplyObject(r);
    return 0;
}

/* How often a registration that Redis refuses for now says so (its first refusal is said at once). */
#define REFUSED_TELL_MS 60000

void dl_sleep_unless_stopped(const diloco *d, unsigned ms)
{
    for (unsigned slept = 0; slept < ms && !dl_stopping(d); slept += 100) sleep_ms(ms - slept < 100 ? ms - slept : 100);
}

/* " (still refused after S s, the connect timeout)" after err, when it fits */
static void append_waited(char *err, size_t errlen, uint64_t waited_ms)
{
    size_t n = strlen(err);
    if (n < errlen)
        snprintf(err + n, errlen - n, " (still refused after %.0f s, the connect timeout)", waited_ms / 1000.0);
}

/* register_once, sent again while Redis refuses it for now (rconn_error_transient: out of memory, writes stopped
 * after a failed RDB save, a replica, ...). Such a refusal lasts as long as the operator leaves Redis so, and the
 * worker that gave up at the first one exited ("sync failed for good") a second after Redis stopped taking
 * writes, its syncs having failed meanwhile (it_redis_refuses_writes). Said at the first refusal, then once a
 * minute. At open (never registered yet) for up to the connect timeout, as diloco_open waits for an unreachable
 * Redis; afterwards until Redis takes it or we are stopped, as a fetch after registering waits for a server. */
static int register_patient(diloco *d, const int64_t *by_run, char *err, size_t errlen)
{
    uint64_t t0 = now_ms(), told = 0;
    int opening = dl_inc(d) == 0;
    for (unsigned attempt = 0;; attempt++) {
        int rc = register_once(d, by_run, err, errlen);
        if (rc != REFUSED_FOR_NOW) {
            if (rc == 0 && told != 0)
                log_info("Redis took our registration after %.0f s of refusals", (double)(now_ms() - t0) / 1000.0);
            return rc;
        }
        uint64_t waited = now_ms() - t0;
        if (dl_stopping(d)) return -1;
        if (opening && waited >= (uint64_t)d->o.connect_timeout_ms) {
            if (attempt > 0) append_waited(err, errlen, waited);
            return -1;
        }
        if (told == 0 || now_ms() - told >= REFUSED_TELL_MS) {
            if (opening)
                log_warn("Redis refuses our registration for now: %s; trying again for up to %.0f s more "
                         "(--connect-timeout; a stop ends the wait)",
                         err, (double)((uint64_t)d->o.connect_timeout_ms - waited) / 1000.0);
            else
                log_warn("Redis refuses our registration for now: %s; trying again until it takes it (a stop ends "
                         "the wait)",
                         err);
            told = now_ms();
        }
        unsigned pause = backoff_ms(attempt, 100, 2000);
        if (opening && waited + pause > (uint64_t)d->o.connect_timeout_ms) /* (the last try at the deadline) */
            pause = (unsigned)((uint64_t)d->o.connect_timeout_ms - waited);
        dl_sleep_unless_stopped(d, pause);
    }
}

/* register_once after our WAIT broke: a failover is under way, and until a replica is master Redis does not
 * answer at all; asked again with backoff while it does not, for up to the connect timeout (as long as
 * diloco_open waits for Redis). Before, the first such try failed and a worker starting during a failover
 * exited (a Cluster's master killed while the registration waited for its replica). */
static int register_again(diloco *d, const int64_t *by_run, char *err, size_t errlen)
{
    uint64_t deadline = now_ms() + (uint64_t)d->o.connect_timeout_ms;
    for (unsigned attempt = 0;; attempt++) {
        int rc = register_patient(d, by_run, err, errlen);
        if (rc != NO_ANSWER) return rc;
        if (dl_stopping(d) || now_ms() >= deadline) return -1;
        sleep_ms(backoff_ms(attempt, 50, 1000));
    }
}

/* register_once; with min_replicas, only once the registration is on that many replicas. One lost in a
 * failover (the old master answered, its replicas never had it) leaves us training as an incarnation the
 * run does not know until the heartbeat says so, and its record (the steps and versions a replay drops) is
 * gone. If the connection breaks during the WAIT, we register again on the new master (register_again): a
 * registration that survived is replaced by the new one, and the incarnation it gave is never used. */
#define REGISTER_ATTEMPTS 3
static void set_registering(diloco *d, int on)
{
    pthread_mutex_lock(&d->hb_mu);
    d->registering = on;
    pthread_mutex_unlock(&d->hb_mu);
}

int dl_register_now(diloco *d, const int64_t *by_run, char *err, size_t errlen)
{
    if (heartbeat_flag(d, &d->run_end) == DILOCO_STOP_REPLACED) { /* (taking the id back would start a fight) */
        err_set(err, errlen, "%s: this process does not register again", dl_run_end(d));
        return -1;
    }
    set_registering(d, 1);
    int rc = -1;
    for (int attempt = 0; attempt < REGISTER_ATTEMPTS && rc < 0; attempt++) {
        if ((attempt == 0 ? register_patient(d, by_run, err, errlen) : register_again(d, by_run, err, errlen)) < 0)
            break;
        if (dl_wait_replicas(d, err, errlen) == 0)
            rc = 0;
        else if (dl_stopping(d))
            break;
        else
            log_warn("%s; registering again", err);
    }
    set_registering(d, 0);
    return rc;
}

/* Is our incarnation still a live member? (The heartbeat thread also notices, but maybe later.) */
int dl_still_member(diloco *d)
{
    redisReply *r = dl_command(d, NULL, 0, "FCALL dl_member 1 %s %s", d->config_key, d->worker_id);
    int ok = !r || (r->type == REDIS_REPLY_INTEGER && r->integer == dl_inc(d)) || r->type == REDIS_REPLY_ERROR;
    if (r) freeReplyObject(r);
    return ok && !dl_evicted(d);
}

int dl_evicted(diloco *d)
{
    return heartbeat_flag(d, &d->evicted);
}

void dl_evicted_why(diloco *d, char *out, size_t cap)
{
    pthread_mutex_lock(&d->hb_mu);
    snprintf(out, cap, "%s", d->evicted_why[0] ? d->evicted_why : "heartbeats missed for longer than the timeout");
    pthread_mutex_unlock(&d->hb_mu);
}

uint64_t dl_shutdown_seen_ms(diloco *d)
{
    pthread_mutex_lock(&d->hb_mu);
    uint64_t ms = d->shutdown_seen_ms;
    pthread_mutex_unlock(&d->hb_mu);
    return ms;
}

int dl_shutdown_seen(diloco *d)
{
    return dl_shutdown_seen_ms(d) != 0;
}

int dl_run_ended(diloco *d)
{
    return heartbeat_flag(d, &d->run_end) != 0;
}

const char *dl_run_end(diloco *d)
{
    int end = heartbeat_flag(d, &d->run_end);
    return end == DILOCO_STOP_RECREATED  ? "the run was made again under its name (coordinator init --force)"
           : end == DILOCO_STOP_REPLACED ? "another process registered under this worker id"
                                         : "the run was shut down";
}

int dl_replaced(diloco *d, const char *why)
{
    /* A process group's ranks learn the group's new incarnation at its next collective after rank 0 registered
     * it again, so a rank's own refusals name a replaced incarnation for a while: not another process. Nor while
     * we register: the registration that replaced the incarnation may be our own, its reply not read yet. */
    if (d->grp || heartbeat_flag(d, &d->registering)) return 0;
    /* "worker <id> (incarnation <inc>) was replaced: incarnation ..." (lua/20_membership.lua not_member_why,
     * shard-server/ops.c) */
    const char *p = strstr(why, " (incarnation ");
    long long inc;
    if (strncmp(why, "worker ", 7) != 0 || strstr(why, ") was replaced: incarnation ") == NULL || p == NULL ||
        sscanf(p, " (incarnation %lld)", &inc) != 1)
        return 0;
    return inc > 0 && inc == dl_inc(d);
}

int dl_reply_end(diloco *d, const char *error)
{
    if (strncmp(error, "RECREATED ", 10) == 0) return DILOCO_STOP_RECREATED;
    if (strncmp(error, "UNKNOWN_WORKER ", 15) == 0 && dl_replaced(d, error + 15)) return DILOCO_STOP_REPLACED;
    return 0;
}

/* ---- the counters of the round a thread works for ------------------------------------------------------ */

/* (one pointer per thread: a Streaming round's thread and its owner threads point at the round's slot) */
static _Thread_local diloco_sync_info *round_info;

diloco_sync_info *dl_round_info(diloco *d)
{
    return round_info ? round_info : &d->cur;
}

diloco_sync_info *dl_round_info_use(diloco_sync_info *info)
{
    diloco_sync_info *prev = round_info;
    round_info = info;
    return prev;
}

diloco_sync_info *dl_round_info_current(void)
{
    return round_info;
}

void dl_group_leave(diloco *d)
{
    int64_t inc = dl_inc(d);
    if (inc <= 0) return;
    redisReply *r = dl_command(d, NULL, 0, "FCALL dl_deregister 1 %s %s %lld %d", d->config_key, d->worker_id,
                               (long long)inc, d->grp_rank);
    if (r) freeReplyObject(r);
}

int dl_stream_overlap(const diloco *d)
{
    return !d->rc.async && d->rc.nfragments > 1; /* (D > 1 is refused elsewhere: check_in_flight) */
}
