/* barrier.c: a sync round's barrier from the worker's side (docs/PROTOCOL.md, "A sync round", step 3):
 * arrive (dl_arrive), listening on our wake list meanwhile (wake.c); if the close's token did not come,
 * wait on the list (BLPOP, with a timeout) and read the barrier (dl_barrier) until it closes (STALE if it
 * closed without us: we were dropped from it). A joiner of the next round waits here for the open round
 * to close (barrier_wait_closed). */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "internal.h"
#include "redis/rconn.h"
#include "wake.h"

/* Is this incarnation in a closed barrier's participants (dl_barrier's second element)? */
static int among_participants(diloco *d, const redisReply *participants)
{
    char me[160];
    snprintf(me, sizeof me, "%s:%lld", d->worker_id, (long long)dl_inc(d));
    return participants->type == REDIS_REPLY_STRING && csv_has(participants->str, me);
}

/* Did round (f, round) close with this incarnation among its participants? A STALE dl_arrive can answer
 * dl_command's resend after a lost reply, the first try having run and closed the round. */
static int closed_with_us(diloco *d, int f, int64_t round)
{
    redisReply *b = dl_command(d, NULL, 0, "FCALL dl_barrier 1 %s %d %lld", d->config_key, f, (long long)round);
    int in = 0;
    if (b != NULL && b->type == REDIS_REPLY_ARRAY && b->elements >= 2 && b->element[0]->type == REDIS_REPLY_STRING &&
        strcmp(b->element[0]->str, "closed") == 0)
        in = among_participants(d, b->element[1]);
    if (in)
        log_info("round %lld of fragment %d: closed with us (our arrival ran; its reply was lost)", (long long)round,
                 f);
    if (b) freeReplyObject(b);
    return in;
}

static int arrive_once(diloco *d, int f, int64_t round, int *written, char *err, size_t errlen)
{
    redisReply *r = dl_command(d, err, errlen, "FCALL dl_arrive 1 %s %s %lld %d %lld %d", d->config_key, d->worker_id,
                               (long long)dl_inc(d), f, (long long)round, d->grp_rank);
    int rc = DL_OK;
    *written = !dl_reply_failed(r);
    if (!*written) {
        rc = DL_FAIL;
        if (r && strncmp(r->str, "STALE", 5) == 0)
            rc = closed_with_us(d, f, round) ? DL_OK : DL_STALE;
        else if (r && strncmp(r->str, "UNKNOWN_WORKER", 14) == 0)
            rc = DL_EVICTED;
        else if (!r)
            rc = DL_RETRY; /* outcome unknown: wait_barrier_as finds out whether we are in the barrier */
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && strcmp(r->element[0]->str, "closed") == 0) {
        rc = DL_OK;
    } else {
        rc = DL_RETRY; /* open: wait */
    }
    if (r) freeReplyObject(r);
    return rc;
}

/* dl_arrive; with min_replicas, only once our arrival is on that many replicas: an arrival lost in a
 * failover would leave the barrier waiting for us. If the connection breaks during that WAIT (the
 * failover itself), we arrive again on the new master: STALE then means the round closed meanwhile
 * (with our first arrival, or without it: the barrier and the get tell which), so we go and wait on
 * the barrier rather than drop our pseudo-gradient. */
#define ARRIVE_ATTEMPTS 3
static int arrive(diloco *d, int f, int64_t round, char *err, size_t errlen)
{
    for (int attempt = 0; attempt < ARRIVE_ATTEMPTS; attempt++) {
        int written, rc = arrive_once(d, f, round, &written, err, errlen);
        if (attempt > 0 && rc == DL_STALE) return DL_RETRY;
        if (!written || dl_wait_replicas(d, err, errlen) == 0) return rc;
        log_warn("round %lld of fragment %d: %s; arriving again", (long long)round, f, err);
    }
    return DL_RETRY;
}

/* The open barrier (f, round) lacks our arrival: the dl_arrive got no reply (Redis went away while it
 * was in flight) or its write was lost (a restart without it, a failover). The barrier waits for us, and
 * nobody else can bring it: arrive again. DL_RETRY: still open, keep waiting. */
static int arrive_again(diloco *d, int f, int64_t round, char *err, size_t errlen)
{
    log_warn("round %lld of fragment %d: the barrier does not have our arrival (dl_arrive got no reply, or Redis "
             "lost it); arriving again",
             (long long)round, f);
    return arrive(d, f, round, err, errlen);
}

/* A long wait at a barrier is said in the log, first after BARRIER_NOTE_FIRST_MS, then every
 * BARRIER_NOTE_EVERY_MS: otherwise a worker whose run waits for workers that never come (one started
 * of a run made with --workers 2, say) just stops printing, with nothing saying why. A joiner's wait for a
 * round that cannot close because a shard is marked corrupt is named as such: it saw only "it waits for its
 * participants". */
#define BARRIER_NOTE_FIRST_MS 10000
#define BARRIER_NOTE_EVERY_MS 60000

/* Whom the open barrier (f, round) waits for, as "for 2 member(s): a (last heartbeat 45 s ago), b (0.3 s ago);
 * ..." (dl_waiting), into out; "" when it cannot say (an older function library, Redis away). A member that
 * died is waited for until the reaper evicts it, a heartbeat timeout after its last beat; a worker restarted
 * under a new id (the default <host>-<pid>) waits for its own old incarnation all that time, which the
 * generic "it waits for its participants" did not tell (a PyTorch user's restart waited 2 minutes). */
#define WAITING_NAMED 3
static void waiting_for(diloco *d, int f, int64_t round, char *out, size_t cap)
{
    out[0] = '\0';
    redisReply *r =
        dl_command(d, NULL, 0, "FCALL dl_waiting 1 %s %d %lld %d", d->config_key, f, (long long)round, WAITING_NAMED);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[0]->integer == 0) {
        if (r) freeReplyObject(r);
        return;
    }
    long long missing = r->element[0]->integer, timeout_ms = r->element[1]->integer, oldest_ms = 0;
    size_t len = (size_t)snprintf(out, cap, "it waits for %lld member(s): ", missing);
    for (size_t i = 2; i + 1 < r->elements && len < cap; i += 2) {
        long long age = r->element[i + 1]->integer;
        if (age > oldest_ms) oldest_ms = age;
        len += (size_t)snprintf(out + len, cap - len, "%s%s (last heartbeat %.1f s ago)", i > 2 ? ", " : "",
                                r->element[i]->type == REDIS_REPLY_STRING ? r->element[i]->str : "?", age / 1000.0);
    }
    if (len < cap && missing > WAITING_NAMED) len += (size_t)snprintf(out + len, cap - len, ", ...");
    if (len < cap && timeout_ms > 0 && oldest_ms > timeout_ms / 4) /* (beats come a quarter timeout apart at most) */
        snprintf(out + len, cap - len,
                 "; a member silent for %.0f s (the run's heartbeat timeout) is evicted and no longer waited for, "
                 "and a worker started again under its worker id takes its place at once",
                 timeout_ms / 1000.0);
    freeReplyObject(r);
}

static void note_wait(diloco *d, int f, int64_t round, int joiner, uint64_t waited_ms)
{
    /* (no round closes while a shard is marked: its participants each wait for the repair and say so, but a
     * joiner would not know; one HKEYS of the shards hash, a joiner's only: a run's members waiting at a
     * barrier can be thousands) */
    int corrupt = joiner ? repair_marked(d) : 0;
    char who[600];
    if (corrupt <= 0) waiting_for(d, f, round, who, sizeof who);
    if (corrupt > 0)
        log_warn("round %lld of fragment %d: waited %.0f s for it to close before joining; it cannot close while %d "
                 "shard(s) of run '%s' are marked corrupt (`coordinator status` names them): run `coordinator repair`",
                 (long long)round, f, (double)waited_ms / 1000.0, corrupt, d->run);
    else if (joiner && who[0] != '\0')
        log_info("round %lld of fragment %d: waited %.0f s for it to close before joining; %s", (long long)round, f,
                 (double)waited_ms / 1000.0, who);
    else if (joiner)
        log_info("round %lld of fragment %d: waited %.0f s for it to close before joining; it waits for its "
                 "participants (`coordinator status` shows the run's workers)",
                 (long long)round, f, (double)waited_ms / 1000.0);
    else if (who[0] != '\0')
        log_info("round %lld of fragment %d: waited %.0f s at the barrier for the other workers of run '%s'; %s",
                 (long long)round, f, (double)waited_ms / 1000.0, d->run, who);
    else
        log_info("round %lld of fragment %d: waited %.0f s at the barrier for the other workers of run '%s' "
                 "(`coordinator status` shows how many it waits for; start more workers, or lower the number: "
                 "`coordinator control set-workers N`)",
                 (long long)round, f, (double)waited_ms / 1000.0, d->run);
}

/* The barrier (f, round) is neither open nor closed (dl_barrier's state): "expired", the fragment's open round
 * moved past it while we waited (`coordinator repair` installs a new version above every round and deletes
 * the open barrier), or "none". Said in err, which the round's loss is logged with (round.c). */
static void barrier_gone(const redisReply *b, char *err, size_t errlen)
{
    if (b->elements >= 4 && b->element[3]->type == REDIS_REPLY_INTEGER)
        err_set(err, errlen,
                "its barrier is %s (the fragment's open round is now %lld: the run moved past it, as `coordinator "
                "repair` does)",
                b->element[0]->str, (long long)b->element[3]->integer);
    else
        err_set(err, errlen, "its barrier is %s", b->element[0]->str);
}

/* Block until barrier (f, round) closes: BLPOP our wake list with a timeout, then look. A joiner (not
 * expected at round, not arrived) stops waiting with DL_NEED when the barrier waits for nobody else:
 * it needs an arrival to close (at least target_workers), and only we can bring one. A participant whose
 * arrival the open barrier lacks arrives again (arrive_again). */
static int wait_barrier_as(diloco *d, int f, int64_t round, int joiner, char *err, size_t errlen)
{
    char wake[KEY_MAX];
    wake_key(d, wake, sizeof wake);
    uint64_t t0 = now_ms(), next_note = t0 + BARRIER_NOTE_FIRST_MS;
    for (unsigned polls = 1;; polls++) {
        if (now_ms() >= next_note) {
            note_wait(d, f, round, joiner, now_ms() - t0);
            next_note = now_ms() + BARRIER_NOTE_EVERY_MS;
        }
        if (dl_stopping(d)) {
            err_set(err, errlen, "stopped while waiting for round %lld", (long long)round);
            return DL_FAIL;
        }
        if (dl_shutdown_seen(d)) { /* the round may never close: its other members stop (a group's other
                                    * ranks, refused, never arrive) */
            err_set(err, errlen, "%s while we waited for round %lld", dl_run_end(d), (long long)round);
            return DL_FAIL;
        }
        if (d->hub) {
            (void)wake_hub_wait(d, f, round, d->o.wait_poll_ms); /* (the barrier below says what happened) */
        } else if (!d->blk || rconn_broken(d->blk)) {
            if (d->blk) rconn_free(d->blk);
            d->blk = wake_blk_open(d, dl_stop_seen, d);
            if (!d->blk) sleep_ms((unsigned)d->o.wait_poll_ms);
        }
        if (!d->hub && d->blk) {
            redisReply *r = rconn_command(d->blk, "BLPOP %s %.3f", wake, d->o.wait_poll_ms / 1000.0);
            if (r) freeReplyObject(r);
        }
        redisReply *b =
            joiner ? dl_command(d, err, errlen, "FCALL dl_barrier 1 %s %d %lld 1", d->config_key, f, (long long)round)
                   : dl_command(d, err, errlen, "FCALL dl_barrier 1 %s %d %lld 0 %s %d", d->config_key, f,
                                (long long)round, d->worker_id, d->grp ? d->grp_rank : -1);
        if (!dl_reply_failed(b) && b->type == REDIS_REPLY_ARRAY && b->elements >= 1) {
            const char *state = b->element[0]->str;
            int rc = strcmp(state, "closed") == 0 ? DL_OK : strcmp(state, "open") == 0 ? DL_RETRY : DL_STALE;
            if (rc == DL_STALE) barrier_gone(b, err, errlen);
            /* closed without our arrival: we were dropped from it (evicted after a long stop or a network cut,
             * which took our arrival out of the barrier). STALE, so that we register again now instead of
             * taking the round's result and training the next round as a dead incarnation */
            if (!joiner && rc == DL_OK && b->elements >= 2 && !among_participants(d, b->element[1])) {
                err_set(err, errlen, "round %lld of fragment %d closed without us (we were dropped from it)",
                        (long long)round, f);
                log_warn("%s", err);
                rc = DL_STALE;
            }
            /* a Redis library older than this worker sends no count: do not wait */
            if (joiner && rc == DL_RETRY &&
                (b->elements < 5 || b->element[4]->type != REDIS_REPLY_INTEGER || b->element[4]->integer == 0))
                rc = DL_NEED;
            /* (an older library does not say whether we arrived: nothing to do then) */
            int lost = !joiner && rc == DL_RETRY && b->elements >= 6 && b->element[5]->type == REDIS_REPLY_INTEGER &&
                       b->element[5]->integer == 0;
            freeReplyObject(b);
            if (lost) rc = arrive_again(d, f, round, err, errlen);
            if (rc != DL_RETRY) return rc;
        } else if (b) {
            freeReplyObject(b);
        } else if (!dl_stopping(d)) {
            /* no reply at once: Redis refused it as a node that does not lead (READONLY: a master demoted under a
             * plain URL), which the heartbeat says; the hub may hold this round's close already, and then nothing
             * else waited here: 4,600 connections a second to the replica */
            int poll = d->o.wait_poll_ms < 1000 ? d->o.wait_poll_ms : 1000;
            dl_sleep_unless_stopped(d, poll > 0 ? (unsigned)poll : 0);
        }
        if (polls % 5 == 0 && !dl_still_member(d)) { /* (round.c logs the round lost with err) */
            err_set(err, errlen, "no longer a member of the run while we waited at the barrier");
            return DL_EVICTED;
        }
    }
}

static int wait_barrier(diloco *d, int f, int64_t round, char *err, size_t errlen)
{
    return wait_barrier_as(d, f, round, 0, err, errlen);
}

int barrier_wait_closed(diloco *d, int f, int64_t round, char *err, size_t errlen)
{
    return wait_barrier_as(d, f, round, 1, err, errlen);
}

/* Arrive, listening for the close meanwhile: 1 when its token came within a poll of the arrival.
 * *arrived: when our arrival was answered (the wait for the others starts there). */
static int arrive_listening(diloco *d, int f, int64_t round, int *rc, uint64_t *arrived, char *err, size_t errlen)
{
    if (d->hub) { /* the session's listener pops the tokens (rounds in flight at once) */
        *rc = arrive(d, f, round, err, errlen);
        *arrived = now_ms();
        return *rc == DL_RETRY ? wake_hub_wait(d, f, round, d->o.wait_poll_ms) : 0; /* (DL_OK: closed by us) */
    }
    wake_wait w; /* listen for the close while we arrive (wake.c): no round trip after the arrive's */
    wake_start(d, f, round, &w);
    *rc = arrive(d, f, round, err, errlen);
    *arrived = now_ms();
    return *rc == DL_OK || *rc == DL_RETRY ? wake_finish(&w) : (wake_cancel(&w), 0);
}

int barrier_pass(diloco *d, int f, int64_t round, char *err, size_t errlen)
{
    uint64_t arrived = 0;
    int rc, closed = arrive_listening(d, f, round, &rc, &arrived, err, errlen);
    if (rc != DL_RETRY) return rc;
    /* open at our arrival: from then on we wait for the others (the listening poll's part too) */
    rc = closed ? DL_OK : wait_barrier(d, f, round, err, errlen);
    dl_round_info(d)->wait_seconds = (double)(now_ms() - arrived) / 1000.0;
    return rc;
}
