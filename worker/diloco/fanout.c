/* fanout.c: a job per shard of a range, one thread per owner (shard-server), so bandwidth adds up; used
 * for pushes and gets by sync.c, fetch.c and async.c, and the worst outcome is theirs.
 *
 * The shards of one owner go over one connection. fanout_push and fanout_get first try all of them
 * pipelined (conn_push_batch, conn_get_batch: every request sent before the first reply is read), then
 * run the one-shard job, with its retries, for each shard that did not succeed. Async submissions
 * (fanout_push_each, fanout_get with `after`) go for each shard's own place in its order, which the
 * pipelined requests (one round for all) cannot say: their shards go one by one from the start.
 *
 * A sync round's get goes out early (fanout_get_start, while the worker arrives at the barrier: sync.c):
 * each owner's thread sends its pipelined gets, then waits at a gate before it reads a reply;
 * fanout_get_finish opens the gate once the barrier said we are in the round (the replies are read and
 * the pass goes on as fanout_get's), or drops the gets (their connections are closed unread, so nothing
 * of what they brought reaches our state). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "internal.h"

enum { BATCH_NONE, BATCH_PUSH, BATCH_GET };

/* Where the threads of an early get wait before they read a reply (fanout_get_start). */
typedef struct fanout_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state; /* GATE_* */
} fanout_gate;

enum { GATE_SHUT, GATE_OPEN, GATE_DROP };

/* A job for one shard; its return is that shard's outcome. */
typedef int (*shard_job_fn)(diloco *d, int shard, void *arg, char *err, size_t errlen);

/* What a push sends: round, or each shard's own (each[k]) */
typedef struct push_arg {
    int64_t round;
    const int64_t *each;
} push_arg;

typedef struct owner_work {
    diloco *d;
    char addr[ADDR_MAX];
    int shards[RUNCONF_MAX_SHARDS];
    int nshards;
    shard_job_fn fn;
    void *arg;
    int batch; /* BATCH_*: how the first try of several shards goes */
    fanout_gate *gate; /* an early get's (else NULL): its requests are sent, then it waits here */
    diloco_sync_info *info; /* where the round's counters go (dl_round_info): the starting thread's */
    int rc;
    char err[256];
    pthread_t thread;
} owner_work;

static int push_job(diloco *d, int shard, void *arg, char *err, size_t errlen);
static int get_job(diloco *d, int shard, void *arg, char *err, size_t errlen);

static int outcome_rank(int rc);

#define NOT_TRIED 100 /* a shard the pipelined first try did not cover */

/* Wait until the gate opens (1) or says drop (0). */
static int gate_wait(fanout_gate *gate)
{
    pthread_mutex_lock(&gate->mu);
    while (gate->state == GATE_SHUT) pthread_cond_wait(&gate->cv, &gate->mu);
    int open = gate->state == GATE_OPEN;
    pthread_mutex_unlock(&gate->mu);
    return open;
}

/* An early get of an owner's shards: send them all, wait at the gate, then read the replies (trc, tgot as
 * conn_get_batch's). -1 when the gate said drop: the connection is closed unread. */
static int get_early(owner_work *g, const int *todo, int nt, int *trc, int64_t *tgot)
{
    const fanout_get_arg *ga = g->arg;
    dp_conn *c = NULL;
    int rc = conn_get_batch_send(g->d, todo, nt, ga->want, ga->flags, &c, g->err, sizeof g->err);
    if (!gate_wait(g->gate)) {
        if (c != NULL) conn_release(g->d, c, 1);
        g->rc = DL_RETRY;
        return -1;
    }
    if (rc == DL_OK) return conn_get_batch_recv(g->d, c, todo, nt, ga->want, trc, tgot, g->err, sizeof g->err), 0;
    for (int j = 0; j < nt; j++) trc[j] = DL_RETRY;
    return 0;
}

/* The first try of an owner's shards: all of them pipelined (a get: those an earlier pass of sync.c's
 * get_round has not brought yet), rcs[i] each one's outcome (NOT_TRIED: not covered). -1: an early get
 * that was dropped. */
static int first_try(owner_work *g, int *rcs)
{
    for (int i = 0; i < g->nshards; i++) rcs[i] = NOT_TRIED;
    if (g->batch == BATCH_PUSH && g->nshards > 1)
        conn_push_batch(g->d, g->shards, g->nshards, ((const push_arg *)g->arg)->round, rcs, g->err, sizeof g->err);
    if (g->batch != BATCH_GET) return 0;
    const fanout_get_arg *ga = g->arg;
    int todo[RUNCONF_MAX_SHARDS], idx[RUNCONF_MAX_SHARDS], nt = 0, trc[RUNCONF_MAX_SHARDS];
    int64_t tgot[RUNCONF_MAX_SHARDS];
    for (int i = 0; i < g->nshards; i++) {
        if ((ga->once && g->d->shard_version[g->shards[i]] >= ga->want) || (ga->have && ga->have[g->shards[i]]))
            rcs[i] = DL_OK;
        else {
            todo[nt] = g->shards[i];
            idx[nt++] = i;
        }
    }
    if (g->gate != NULL && nt > 0) {
        if (get_early(g, todo, nt, trc, tgot) != 0) return -1;
    } else if (nt > 1) {
        conn_get_batch(g->d, todo, nt, ga->want, ga->flags, trc, tgot, g->err, sizeof g->err);
    } else {
        return 0;
    }
    for (int j = 0; j < nt; j++) {
        if (trc[j] == DL_OK) g->d->shard_version[todo[j]] = tgot[j];
        rcs[idx[j]] = trc[j];
    }
    return 0;
}

/* A get's shard i of g came back corrupt: said in shard_corrupt (a pass goes on with the others). */
static void note_corrupt(owner_work *g, int i)
{
    g->rc = DL_CORRUPT;
    if (g->batch == BATCH_GET) g->d->shard_corrupt[g->shards[i]] = 1;
}

static void owner_run(owner_work *g)
{
    g->rc = DL_OK;
    int rcs[RUNCONF_MAX_SHARDS];
    int once = g->batch == BATCH_GET && ((const fanout_get_arg *)g->arg)->once;
    if (first_try(g, rcs) != 0) return; /* an early get dropped: its outcome is not looked at */
    /* a corrupt shard: nothing of it completes before coordinator repair, and its message (which the
     * pipelined try kept) is the one to report. A blocking job stops there; a pass still asks the owner's
     * other shards, sending our Δ where asked: another worker's round of such a shard may wait for it while
     * we wait for the repair (it_group_repair: a group's get waited for w2's Δ until its sync timeout) */
    for (int i = 0; i < g->nshards; i++)
        if (rcs[i] == DL_CORRUPT) note_corrupt(g, i);
    if (g->rc == DL_CORRUPT && !once) return;
    /* then each shard's job (with its retries, or once: after a pass, only where our Δ is asked for);
     * a blocking job stops the group at the first failure, a pass goes over every shard */
    char other[sizeof g->err] = ""; /* (once a shard is corrupt, its message stays the one in g->err) */
    for (int i = 0; i < g->nshards; i++) {
        int rc = rcs[i];
        int run_job = rc == NOT_TRIED || rc == DL_NEED || (rc == DL_RETRY && !once);
        if (run_job) rc = g->fn(g->d, g->shards[i], g->arg, g->rc == DL_CORRUPT ? other : g->err, sizeof other);
        if (rc == DL_CORRUPT) note_corrupt(g, i);
        if (outcome_rank(rc) > outcome_rank(g->rc)) g->rc = rc;
        if (!once && g->rc != DL_OK) break;
    }
}

/* An owner's work, on its own thread or in line on the caller's: logging to the session's sink and counting
 * in the round's info, as the thread that started it. */
static void *owner_main(void *p)
{
    owner_work *g = p;
    log_sink *prev = log_use_sink(&g->d->log);
    diloco_sync_info *prev_info = dl_round_info_use(g->info);
    owner_run(g);
    dl_round_info_use(prev_info);
    log_use_sink(prev);
    return NULL;
}

/* Worse outcomes win: corrupt state (nothing syncs until a repair) beats a failure beats eviction beats
 * staleness beats a retry. */
static int outcome_rank(int rc)
{
    switch (rc) {
    case DL_CORRUPT: return 6;
    case DL_FAIL: return 5;
    case DL_EVICTED: return 4;
    case DL_STALE: return 3;
    case DL_RETRY: return 2;
    case DL_NEED: return 1;
    default: return 0;
    }
}

/* The shards of [first, last) grouped by owner into work (the caller's array of last - first); the
 * number of owners. */
static int plan_owners(diloco *d, int first, int last, shard_job_fn fn, void *arg, int batch, owner_work *work)
{
    int ng = 0;
    for (int k = first; k < last; k++) {
        shard_owner o;
        owners_get(d, k, &o);
        int g = 0;
        while (g < ng && strcmp(work[g].addr, o.addr) != 0) g++;
        if (g == ng) {
            work[ng] = (owner_work){.d = d, .fn = fn, .arg = arg, .batch = batch, .info = dl_round_info_current()};
            snprintf(work[ng].addr, sizeof work[ng].addr, "%s", o.addr);
            ng++;
        }
        work[g].shards[work[g].nshards++] = k;
    }
    return ng;
}

/* The worst outcome of the owners (with its message). */
static int worst_outcome(const owner_work *work, int ng, char *err, size_t errlen)
{
    int worst = DL_OK;
    for (int g = 0; g < ng; g++)
        if (outcome_rank(work[g].rc) > outcome_rank(worst)) {
            worst = work[g].rc;
            err_set(err, errlen, "%s", work[g].err);
        }
    return worst;
}

static int run_jobs(diloco *d, int first, int last, shard_job_fn fn, void *arg, int batch, char *err, size_t errlen)
{
    owner_work *work = calloc((size_t)(last - first), sizeof *work);
    if (!work) {
        err_set(err, errlen, "out of memory");
        return DL_FAIL;
    }
    int ng = plan_owners(d, first, last, fn, arg, batch, work);
    for (int g = 1; g < ng; g++)
        if (pthread_create(&work[g].thread, NULL, owner_main, &work[g]) != 0) work[g].thread = 0;
    owner_main(&work[0]);
    for (int g = 1; g < ng; g++) {
        if (work[g].thread)
            pthread_join(work[g].thread, NULL);
        else
            owner_main(&work[g]);
    }
    int worst = worst_outcome(work, ng, err, errlen);
    free(work);
    return worst;
}

static int push_job(diloco *d, int shard, void *arg, char *err, size_t errlen)
{
    const push_arg *pa = arg;
    int64_t round = pa->each ? pa->each[shard] : pa->round;
    uint64_t deadline = now_ms() + (uint64_t)d->o.sync_timeout_ms;
    unsigned attempt = 0;
    for (;;) {
        int rc = conn_push(d, shard, round, err, errlen);
        if (rc == DL_OK) owners_wait_over(d, shard, "push");
        if (rc != DL_RETRY) return rc;
        if (owners_retry_pause(d, &attempt, deadline, shard, "push", err, errlen) != DL_OK) return DL_FAIL;
    }
}

/* Whether the Δ we hold is the one an owner asks for, whatever the get: a sync round (round) whose barrier
 * we passed with it. The owner asks only a live participant of that round: it counts our Δ, and without
 * it the shard's round waits for us until every worker's get times out. A get that may not push (after a
 * round we took as lost, a joiner's) still sends it then: it_cluster_sync_crash once stalled 120 s on a
 * worker that had concluded its round closed without it and fetched the current version, while the new
 * owner of a shard waited for that worker's Δ of the round (it_lost_round_resend). One way to conclude
 * so wrongly was a late `need` (it_stale_need, below). */
static int holds_counted_delta(const diloco *d, int shard, int64_t round)
{
    return !d->rc.async && round >= 0 && d->counted_round[runconf_fragment_of_shard(&d->rc, shard)] == round;
}

static int get_job(diloco *d, int shard, void *arg, char *err, size_t errlen)
{
    const fanout_get_arg *ga = arg;
    int64_t want = ga->after ? ga->after[shard] + 1 : ga->want;
    uint64_t t0 = now_ms(), deadline = t0 + (uint64_t)d->o.sync_timeout_ms;
    unsigned attempt = 0;
    int resent = 0; /* our Δ went again since the last pause */
    for (;;) {
        int64_t got = -1;
        int rc = conn_get(d, shard, want, ga->flags, &got, err, errlen);
        if (rc == DL_OK) {
            d->shard_version[shard] = got;
            owners_wait_over(d, shard, "get");
            return DL_OK;
        }
        /* the owner has no Δ of ours for this round (it is new, or restarted): send it again, once between
         * two pauses (each `need` sent it again and asked at once before: a loop without end) */
        int ours = got < 0 || got == want - 1;
        if (rc == DL_NEED && (ga->may_push || holds_counted_delta(d, shard, got)) && ours && !resent) {
            rc = conn_push(d, shard, want - 1, err, errlen);
            /* STALE (sync): the round committed before the Δ came again, the `need` was answered while the Δ we
             * sent first was on its way, and the commit that took it is done: the get tells how. Returned, it
             * ended the whole get as a round lost (it_stale_need). */
            if (rc == DL_STALE && !d->rc.async) rc = DL_OK;
            if (rc == DL_OK && ga->once) return DL_RETRY; /* the next pass asks again */
            if (rc == DL_OK) {
                resent = 1;
                continue;
            }
        } else if (rc == DL_NEED && (ours || !d->rc.async || !ga->may_push)) {
            err_set(err, errlen, "the owner still asks for our pseudo-gradient of round %" PRId64,
                    ours ? want - 1 : got);
        } else if (rc == DL_NEED) {
            /* async, a submission's get: a place of ours before its own (got), which only an earlier one of this
             * incarnation can have: one whose dl_submit ran but whose reply was lost (async.c), since any
             * other is applied or completed before the next goes out. Its window is in our Δ; nobody will
             * ever push to it, and the shard's order waits there for every worker until this incarnation
             * ends. Nothing is gained by waiting: fail now, and on_failure registers again at once, which
             * makes that place a no-op (the Δ we pushed to ours is applied all the same: it is stored). */
            err_set(err, errlen,
                    "the owner waits for our pseudo-gradient of round %" PRId64
                    ", an earlier place than ours, which we cannot send (a submission whose reply was lost)",
                    got);
            __atomic_store_n(&d->place_lost, 1, __ATOMIC_RELEASE);
            return DL_FAIL;
        }
        resent = 0;
        if (ga->once && (rc == DL_RETRY || rc == DL_NEED)) return DL_RETRY;
        if (ga->ask_ms && rc == DL_RETRY && now_ms() - t0 >= ga->ask_ms) return DL_RETRY; /* (ask_ms) */
        if (rc != DL_RETRY && rc != DL_NEED) return rc;
        if (owners_retry_pause(d, &attempt, deadline, shard, "get", err, errlen) != DL_OK) return DL_FAIL;
    }
}

int fanout_push(diloco *d, int first, int last, int64_t round, char *err, size_t errlen)
{
    push_arg pa = {round, NULL};
    return run_jobs(d, first, last, push_job, &pa, BATCH_PUSH, err, errlen);
}

int fanout_push_each(diloco *d, int first, int last, const int64_t *rounds, char *err, size_t errlen)
{
    push_arg pa = {0, rounds};
    return run_jobs(d, first, last, push_job, &pa, BATCH_NONE, err, errlen);
}

int fanout_get(diloco *d, int first, int last, const fanout_get_arg *ga, char *err, size_t errlen)
{
    memset(d->shard_corrupt + first, 0, (size_t)(last - first)); /* (this pass's marks: note_corrupt) */
    return run_jobs(d, first, last, get_job, (void *)ga, ga->after ? BATCH_NONE : BATCH_GET, err, errlen);
}

/* ---- a get sent early, read once the barrier says so (sync.c) ------------------------------------------ */

struct fanout_early {
    fanout_get_arg ga; /* a copy: the caller's may go */
    fanout_gate gate;
    owner_work *work; /* an owner whose thread did not start (thread 0) runs in fanout_get_finish */
    int ng;
};

fanout_early *fanout_get_start(diloco *d, int first, int last, const fanout_get_arg *ga)
{
    fanout_early *e = calloc(1, sizeof *e);
    owner_work *work = calloc((size_t)(last - first), sizeof *work);
    if (e == NULL || work == NULL) {
        free(e);
        free(work);
        return NULL;
    }
    e->ga = *ga;
    e->work = work;
    memset(d->shard_corrupt + first, 0, (size_t)(last - first)); /* (as fanout_get) */
    e->gate.state = GATE_SHUT;
    pthread_mutex_init(&e->gate.mu, NULL);
    pthread_cond_init(&e->gate.cv, NULL);
    e->ng = plan_owners(d, first, last, get_job, &e->ga, BATCH_GET, work);
    for (int g = 0; g < e->ng; g++) {
        work[g].gate = &e->gate;
        if (pthread_create(&work[g].thread, NULL, owner_main, &work[g]) != 0) work[g].thread = 0;
    }
    return e;
}

int fanout_get_finish(fanout_early *e, int take, char *err, size_t errlen)
{
    pthread_mutex_lock(&e->gate.mu);
    e->gate.state = take ? GATE_OPEN : GATE_DROP;
    pthread_cond_broadcast(&e->gate.cv);
    pthread_mutex_unlock(&e->gate.mu);
    for (int g = 0; g < e->ng; g++) {
        if (e->work[g].thread)
            pthread_join(e->work[g].thread, NULL);
        else if (take)
            owner_main(&e->work[g]); /* (no thread: sent and read now, as an ordinary pass) */
    }
    int worst = take ? worst_outcome(e->work, e->ng, err, errlen) : DL_OK;
    pthread_mutex_destroy(&e->gate.mu);
    pthread_cond_destroy(&e->gate.cv);
    free(e->work);
    free(e);
    return worst;
}
