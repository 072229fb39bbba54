/*
 * fault.c: fault injection for the crash tests, off unless a --fault-* flag asks for it.
 *
 * --fault-crash-before-commit P: in each commit, with probability P, exit (137) after the log entry is
 *   written and before dl_commit: the pseudo-gradients received, the version maybe served tentatively,
 *   nothing durable. The storms of it_sync_crash and it_codec_crash use it.
 * --fault-tentative-to WORKER: the same death made exact. Commits serve their version tentatively to
 *   WORKER's gets alone (every other get waits for dl_commit, as if it did not accept tentative
 *   parameters), no dl_commit is ever run, and once WORKER's tentative reply has left (it is on the
 *   socket) and a commit has reached its dl_commit, the process exits (137). Two servers each killed
 *   this way with another worker named make the crossing of docs/PROTOCOL.md "Tentative parameters"
 *   (each worker holds the shard whose new owner needs the other's Δ): it_tentative_crossing.
 * --fault-late-need WORKER: WORKER's gets that the committed parameters would answer are answered with a
 *   `need` naming WORKER for the round that made them, until WORKER sends that Δ again (one shard, one
 *   round): the reply of a commit that asked for the Δ while it was on its way, delivered after the commit
 *   that took it (commit.c answers the gets a round parks with the `need` its membership checks found, and
 *   a Δ may arrive meanwhile). The Δ sent again is told STALE (committed already): it_stale_need.
 *
 * Called by the commit files (commit.c at dl_commit, commit_log.c when serving tentatively) and ops.c (a
 * get answered); calls the transport (whether replies are still going out) and reply.c (the late `need`).
 */
#include "ss.h"

#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

#define EXIT_CHECK_MS 2 /* how often the armed exit looks whether the tentative reply has left */

/* whether req is the worker --fault-late-need names, while the fault is not done */
static int late_need_target(const ss_ctx *ss, const ss_req *req)
{
    return ss->opts.fault_late_need[0] != '\0' && ss->fault.late_need < 2 &&
           strcmp(req->h.worker, ss->opts.fault_late_need) == 0;
}

/* (--fault-late-need: its worker's get waits for the commit, which answers it once done, through
 * fault_late_need) */
int fault_may_serve_tentative(const ss_ctx *ss, const ss_req *req)
{
    if (late_need_target(ss, req)) return 0;
    return ss->opts.fault_tentative_to[0] == '\0' || strcmp(req->h.worker, ss->opts.fault_tentative_to) == 0;
}

static void check_later(ss_ctx *ss)
{
    struct timeval tv = {0, EXIT_CHECK_MS * 1000};
    evtimer_add(ss->fault.exit_ev, &tv);
}

static void exit_on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ss_ctx *ss = arg;
    if (server_bufs_in_flight() > 0) {
        check_later(ss);
        return;
    }
    log_warn("fault injection: exiting before dl_commit (version %lld of shard %d went to %s alone, tentatively)",
             (long long)ss->fault.version, ss->fault.shard, ss->opts.fault_tentative_to);
    _exit(137);
}

/* Both conditions of --fault-tentative-to hold: exit once the reply has left. Looked at from the loop,
 * never at once: the worker's reply may not be queued yet (the caller sends it after this). */
static void arm_exit(ss_ctx *ss)
{
    if (!ss->fault.served || !ss->fault.held || ss->fault.exit_ev != NULL) return;
    ss->fault.exit_ev = evtimer_new(ss->base, exit_on_timer, ss);
    if (ss->fault.exit_ev == NULL) {
        log_error("fault injection: out of memory arming the exit; exiting now");
        _exit(137);
    }
    check_later(ss);
}

void fault_tentative_served(ss_ctx *ss, int k, int64_t version)
{
    if (ss->opts.fault_tentative_to[0] == '\0') return;
    /* each one said: the exit comes once the first has left, and other shards' commits may or may not have
     * served theirs by then (a test counts what the worker holds tentatively from these lines) */
    log_info("fault injection: version %lld of shard %d served tentatively to %s", (long long)version, k,
             ss->opts.fault_tentative_to);
    if (ss->fault.served) return;
    ss->fault.served = 1;
    ss->fault.shard = k;
    ss->fault.version = version;
    arm_exit(ss);
}

int fault_before_commit(ss_ctx *ss, int k, int64_t round)
{
    if (ss->opts.fault_tentative_to[0] != '\0') {
        log_warn("shard %d round %lld: fault injection: dl_commit held (the server exits once %s has the "
                 "version tentatively)",
                 k, (long long)round, ss->opts.fault_tentative_to);
        ss->fault.held = 1;
        arm_exit(ss);
        return 1;
    }
    if (ss->opts.crash_before_commit <= 0) return 0;
    if (ss->fault.rng == 0) ss->fault.rng = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
    if (rng_uniform(&ss->fault.rng) < ss->opts.crash_before_commit) {
        log_warn("shard %d round %lld: fault injection: exiting before dl_commit", k, (long long)round);
        _exit(137);
    }
    return 0;
}

int fault_late_need(ss_ctx *ss, ss_req *req, int k, int64_t version)
{
    if (!late_need_target(ss, req) || version < 1) return 0;
    if (ss->fault.late_need == 1 && (k != ss->fault.need_shard || version - 1 != ss->fault.need_round)) return 0;
    if (ss->fault.late_need == 0)
        log_warn("shard %d: fault injection: %s's gets of version %lld answered with a late `need` of round %lld "
                 "until its Δ comes again",
                 k, req->h.worker, (long long)version, (long long)(version - 1));
    ss->fault.late_need = 1;
    ss->fault.need_shard = k;
    ss->fault.need_round = version - 1;
    reply_need(req, version - 1, req->h.worker);
    return 1;
}

void fault_late_need_resent(ss_ctx *ss, const ss_req *req, int k)
{
    if (!late_need_target(ss, req) || ss->fault.late_need != 1 || k != ss->fault.need_shard ||
        req->h.round != ss->fault.need_round)
        return;
    ss->fault.late_need = 2;
    log_warn("shard %d: fault injection: %s sent its Δ of round %lld again; the late `need` is over", k, req->h.worker,
             (long long)req->h.round);
}

void fault_free(ss_ctx *ss)
{
    if (ss->fault.exit_ev != NULL) event_free(ss->fault.exit_ev);
    ss->fault.exit_ev = NULL;
}
