/* internal.h: the state of a libdiloco session, shared by the library's files (not installed).
 *
 * The files, from the top down (each calls only files below it: docs/architecture.md "Layers",
 * checked by tests/it_layers.sh):
 *   session.c    diloco_open, diloco_close: a session's life
 *   after_step.c when a worker syncs (diloco_after_step, diloco_force_sync): dispatch by mode
 *   group.c      process groups: several processes as one worker (open, the group's round, exchange)
 *   streaming.c  Streaming DiLoCo: fragments in flight on threads while training goes on
 *   round.c      one fragment's round as the schedule sees it: Δ, the network part by mode (round_net),
 *                settling the outcome, the record of the sync
 *   sync.c       the network part of a sync-mode round: push, barrier, get, confirming it durable
 *   async.c      the network part of an async-mode round: submit, push, get (no barrier)
 *   fetch.c      the global parameters fetched with no Δ to offer (open, catching up, a joiner's wait)
 *   barrier.c    arriving at a sync barrier and waiting for its close (wake.c listens for it)
 *   fanout.c     a job per shard, one thread per owner; pushes and gets pipelined per owner first
 *   heartbeat.c  the heartbeat thread
 *   wake.c       the barrier's wake-up list, listened to while we arrive
 *   repair.c     waiting out a shard whose durable state is corrupt, until `coordinator repair`
 *   conn.c       data-plane connections to shard-servers and the push/get requests
 *   owners.c     which shard-server owns which shard (read from Redis), refreshed on redirects
 *   state.c      the session's options, run configuration and buffers, made and freed
 *   update.c     --download update: applying the round's update ourselves, with our copy of the momentum
 *   delta.c      the pseudo-gradient in the run's codec (bf16, fp32, int8, int4) and error feedback
 *   delta_topk.c --compress topk: the accumulator e = beta*e + Δ and its top-k chunks (delta.c calls it)
 *   params.c     base into the trainer's parameters (copy or mix, host or device), telling the trainer
 *   device.c     device-resident parameters (diloco_device_ops): the hooks that replace params
 *   part.c       a sharded group's rank: its shards of the run as its own view (rc), the shards digest
 *   control.c    the control connection (dl_command), registration and our incarnation
 *   info.c       the library's version and the facts about a session (accessors)
 *   peek.c       the run read without joining it (diloco_peek_run): calls only common/, no session
 *
 * Logging: every function that enters the library on the host's thread, and every thread the session
 * starts, first points the thread at the session's sink (log_use_sink(&d->log), log.h) and puts the
 * previous one back when done, so messages reach that session's log_callback.
 */
#ifndef DILOCO_INTERNAL_H
#define DILOCO_INTERNAL_H

#include <hiredis/hiredis.h>

#include "redis/rconn.h"
#include <pthread.h>
#include <stdint.h>

#include "base/log.h"
#include "base/util.h"
#include "diloco.h"
#include "format/blob.h"
#include "format/runconf.h"
#include "redis/url.h"

#define OWNER_ID_MAX 64
#define ADDR_MAX 128
#define MAX_CONNS 64

typedef struct shard_owner {
    char server[OWNER_ID_MAX]; /* "" while the shard has no live lease */
    char addr[ADDR_MAX];       /* host:port of that server */
    int64_t epoch;
} shard_owner;

/* What Redis has committed of a shard (dl:{R}:shards): k:version, k:epoch (the lease), k:replicated, k:digest
 * (-1, -1, 0, "" for a field that is not there); fetch.c reads it (fetch_committed). */
typedef struct committed_shard {
    int64_t version, epoch, replicated;
    char digest[17];
} committed_shard;

typedef struct dp_conn {
    char addr[ADDR_MAX];
    int fd; /* -1 when closed */
    int in_use;
} dp_conn;

/* Outcome of a data-plane exchange or a sync step. Each has its own value, and none is 1, which the
 * round functions (round.c) and diloco_after_step return for "parameters changed": an outcome passed
 * up where a round's result is expected cannot pass for one. */
enum {
    DL_OK = 0,
    DL_FAIL = -1,   /* unrecoverable here: err says why */
    DL_RETRY = 2,   /* transient: connection lost, moved, owner missing, wait */
    DL_STALE = 3,   /* our round is over: re-fetch parameters */
    DL_EVICTED = 4, /* we are no longer a member: register again */
    DL_NEED = 5,    /* server lacks our pseudo-gradient: push again */
    DL_CORRUPT = 6, /* a shard's durable state is corrupt: nothing syncs until coordinator repair */
};

/* What round_prepare_delta did with a fragment's Δ: only PREP_SEND goes on to the network round; the
 * others are settled by round_unsent, the same way in every schedule. */
typedef enum prep_outcome {
    PREP_SEND,    /* Δ computed: send it */
    PREP_RESET,   /* params changed instead (diverged: reset to the global ones; or the previous round
                     was committed without us): nothing to send this time */
    PREP_FAILED,  /* could not (err says why): a failed sync, counted toward --max-sync-retries */
    PREP_CORRUPT, /* a shard's durable state is corrupt (err says which): wait for coordinator repair */
} prep_outcome;

/* dl_stream_overlap: the thread of fragment f's latest round, which goes on after its round (the
 * confirm's look, round_confirm_early) while training does: joined before f is sent again, or before
 * anything fetches every fragment (streaming.c). */
typedef struct stream_tail {
    pthread_t thread;
    int running; /* started, not joined */
    int lane;    /* its control connection, d->lane_ctl[lane] */
    int done;    /* (atomic) the thread has ended: joining it does not wait */
    int stop;    /* (atomic) set before joining: its look at the commit (sync_confirm_watch) ends */
} stream_tail;

/* A process group's async submission of a fragment: the run's shards [first, first + n) from base versions
 * bases[0, n), the same on every rank (group.c builds it from the versions its ranks gave). */
typedef struct async_plan {
    int first, n;
    int64_t *bases;
} async_plan;

/* A fragment's round in flight on a background thread (streaming.c). Its threads count what the round
 * sends and receives in info (dl_round_info), not in the session's cur: rounds in flight at once would
 * mix their counters there. */
typedef struct stream_slot {
    int frag;
    int64_t round; /* the fragment's open round when it was sent */
    uint64_t t0;
    pthread_t thread;
    int threaded;
    int net_done; /* dl_stream_overlap: the network round is over (under stream_mu) */
    int rc;       /* round_net's outcome */
    int fresh;    /* sent right after every fragment was fetched: round_net */
    const async_plan *plan; /* a process group's async submission: async_place_deliver on the thread */
    const int *tail_stop;   /* on a fragment's tail thread: its stop flag (the look goes on until set) */
    char err[256];
    diloco_sync_info info;
    struct diloco *d;
} stream_slot;

struct diloco {
    diloco_options o; /* the caller's, with the strings pointing at our copies below */
    char run[65];     /* a run name is at most 64 characters (key_check_run_name) */
    char worker_id[64];
    log_sink log;           /* o.log_callback; every thread working for the session logs here */
    volatile int stop_flag; /* diloco_request_stop */
    int closing;            /* (atomic) diloco_close has begun (dl_closing) */
    int redis_unanswered;   /* (atomic) while stopping, Redis left a command or a reopen unanswered (control.c) */
    char host[64];
    redis_url url;
    runconf rc;
    char config_key[160];
    char made_at[24]; /* the run's created_ms as loaded: registrations and heartbeats name the run we joined,
                         and a run made again under its name since refuses them RECREATED */

    rconn *ctl; /* commands from the training thread (and owner refreshes) */
    pthread_mutex_t ctl_mu;
    rconn *blk; /* BLPOP on our wake list */

    float *params; /* the trainer's buffer */
    size_t numel;
    float *base; /* global parameters this round started from */
    /* --async-lookahead (lookahead.c): la, the start of each fragment's interval (kept through a failed
     * submission); la_on[f]: params[f] started from it (cleared by params.c when base is taken) */
    float *la;
    float *la_base;           /* the base of the submission out, from its fragment's first element */
    int64_t *la_prev_version; /* per shard: la_base's version */
    int *la_on;
    int push_dtype;       /* our pushes' codec: the run's (fp32 in a bf16 run with o.bf16 = 0) */
    uint16_t *delta_bf16; /* pseudo-gradient of the round, kept until it is committed */
    float *delta_f32;     /* (block codecs: only with device hooks, the device's fp32 Δ) */
    uint8_t *delta_q;     /* block codecs and topk: the encoded Δ, shard after shard (delta.c) */
    size_t *delta_qoff;   /* block codecs and topk: nshards+1 offsets of each shard's part in delta_q */
    float *ef;            /* --error-feedback: what quantization dropped, added to the next Δ; topk: the
                             accumulator e (delta_topk.c) */
    /* --download update (update.c) */
    float *mom;           /* our copy of the outer momentum */
    int64_t *mom_version; /* per shard: the version base and mom hold together (-1: unknown) */
    uint8_t *upd_q;       /* received updates, shard after shard (upd_off) */
    size_t *upd_off;
    uint8_t **upd_sparse; /* topk: each shard's received update (its size follows the participants) */
    size_t *upd_sparse_cap;
    float *upd_both;        /* parameters with momentum as received (2 floats per parameter) */
    uint64_t *delta_xxh;    /* per shard: the checksum of its part of delta_* (computed with it) */
    int64_t *frag_version;  /* global version of each fragment's part of base (= its open round for us);
                               written through dl_set_frag_version */
    int64_t *frag_joined;   /* per fragment: the first round the barrier expects us at (dl_register) */
    int64_t *shard_version; /* version of each shard of base, while fetching */
    unsigned char *shard_corrupt; /* per shard: a get's pass found its durable state corrupt (sync.c get_round) */
    /* Tentative parameters (docs/PROTOCOL.md): a sync round ends when the new parameters arrive, which
     * the server sends before its log entry is durable. Until we have seen the commit in Redis, shard k
     * of base holds version tent_version[k] (0: nothing pending) with checksum tent_xxh[k], and our Δ
     * of the round before stays in delta_*; sync_confirm_durable settles it before Δ is overwritten. */
    int64_t *tent_version; /* per shard; -1: a receive into base broke off, the slice is garbage */
    uint64_t *tent_xxh;
    int64_t *tent_epoch;      /* lease epoch of the server that sent them: while it holds, wait */
    int64_t *tent_round;      /* per fragment: the round whose Δ delta_* holds */
    int64_t *counted_round;   /* per fragment (sync): the round whose barrier we passed with the Δ delta_* holds
                                 now, so that the round counts it (-1: none; a Δ computed since was not yet) */
    int *frag_incomplete;     /* per fragment: that round's get phase (async: that submission, which has its
                                 places) did not finish for us */
    int64_t *seq;             /* async: each shard's place in its order for our current submission */
    int64_t submission;       /* async: number of our current submission (dl_submit knows a resend by it) */
    int64_t *sub_base;        /* async, a worker alone: each shard's base version in that submission (placed
                                 again from them when a failover lost its places: async.c) */
    uint64_t *push_tokens;    /* per fragment: tokens trained since its previous send (--weight-by tokens) */
    uint64_t *tokens_at_send; /* per fragment: our token count when it was last sent */
    uint64_t *tokens_before;  /* per fragment: tokens_at_send before the Δ out (back if it is not taken) */
    int tokens_checked;       /* warn_token_weight looked at the first send (delta.c) */

    /* Streaming DiLoCo: up to o.fragments_in_flight fragments sync on background threads while training
     * goes on (streaming.c): a FIFO of slots, the oldest at inflight_head */
    int frag_next;         /* the fragment the next boundary sends (async) */
    stream_slot *inflight; /* inflight_max slots (D, allocated at open): the FIFO, oldest at inflight_head */
    int inflight_max, inflight_head, inflight_count;
    struct wake_hub *hub;      /* dl_stream_overlap: the session's one listener on our wake list (wake.c) */
    rconn **lane_ctl;          /* dl_stream_overlap: each lane's control connection (F of them, made on first use) */
    stream_tail *tails;        /* dl_stream_overlap: per fragment (F) */
    pthread_mutex_t stream_mu; /* with stream_cv: a round's thread says its round is over (net_done) */
    pthread_cond_t stream_cv;
    int fetched_all; /* fetch_all calls so far (training thread): streaming.c sees a full refetch by it */
    int base_busy;   /* rounds in flight write base (theirs) right now: round_record leaves the digests 0 */
    int refetch_all; /* a background sync found us evicted: fetch everything at the boundary */
    int base_taken;  /* (atomic) a fetch put the global parameters into base (0 at open): later fetches leave out
                        what it holds (fetch.c) */
    uint64_t stream_wait_told_ms; /* when we last said a round outlasts an interval (streaming.c) */

    shard_owner *owners;
    pthread_mutex_t owners_mu;
    uint64_t wait_logged_ms; /* when a long wait for a shard was last logged (owners_retry_pause) */
    uint64_t wait_warned_since_ms; /* (atomic) when the wait that a logged line named began; 0: none since the
                                      next push or get went through (owners_wait_over) */
    dp_conn conns[MAX_CONNS];
    pthread_mutex_t conns_mu;
    size_t recv_cap; /* largest frame we accept */

    int steps; /* inner steps since the last sync */
    int sync_every;
    /* failed syncs in a row (round.c); a success ends it, so does a completion (async_complete,
     * sync_confirm_durable: the failed sync succeeded after all) */
    int fail_streak;
    /* async: an owner waits for a place of ours that we can never fill (an earlier submission's dl_submit
     * ran but its reply was lost): set by a data-plane job (fanout.c, get_job; atomic), taken by on_failure
     * (round.c), which registers again at once, so that the place becomes a no-op; any registration
     * clears it (control.c) */
    int place_lost;
    diloco_sync_info cur; /* the sync in progress: bytes and phase stamps, counted by conn.c as
                                    they happen (round_begin clears it, round_record copies it to last);
                                    a round on a background thread counts in its slot's info instead
                                    (dl_round_info), which streaming.c copies here before it settles */
    diloco_sync_info last;
    int have_last;

    /* shared with the heartbeat thread (under hb_mu) */
    pthread_t hb_thread;
    int hb_running;
    pthread_mutex_t hb_mu;
    pthread_cond_t hb_cond;
    int hb_stop;              /* written atomically: a connect's handshake also reads it (heartbeat.c) */
    rconn *hb_conn;           /* the heartbeat thread's connection (heartbeat_stop interrupts it) */
    uint64_t hb_gone_told_ms; /* heartbeat thread only: when it last said the run is gone from Redis */
    int64_t inc;              /* our incarnation (0 = not registered) */
    int evicted;
    /* when (now_ms, 0: not) a heartbeat or a Function said the run was shut down (dl_shutdown_told_locked);
     * the time is for owners_retry_pause's grace */
    uint64_t shutdown_seen_ms;
    int run_end;          /* 0, or DILOCO_STOP_RECREATED / _REPLACED: what the shutdown seen is (dl_end_told_locked) */
    char evicted_why[96]; /* why the heartbeat found us no member: the eviction's or the operator's kick */
    int registering;      /* dl_register_now is under way: a refusal naming our incarnation as replaced may be
                             of our own new registration, whose reply has not set inc yet (dl_replaced) */
    int stop_requested; /* DILOCO_STOP_* (0: none): shutdown_seen_ms, or a group's agreement (group.c agree_stop) */
    int dylu_h;
    double loss, speed; /* -1 until diloco_report gives a loss / a heartbeat times a step */
    uint64_t tokens, total_steps;
    uint64_t compute_us, compute_steps; /* inner-step time and steps since the last heartbeat */
    double speed_us, speed_steps;       /* the same, decayed over past heartbeats (heartbeat.c) */
    uint64_t step_end_us;               /* when diloco_after_step last returned (now_us; 0: never) */

    /* device hooks (device.c); used on the training thread, except dev_snap_ok[f], which the threads
     * receiving fragment f's parameters clear (atomically: one per owner) */
    int dev;          /* o.device is set: params is never touched, the hooks are called */
    int *dev_snap_ok; /* per fragment: the device snapshot holds f's origin (base[f], or la[f]) as it is now */
    int dev_failed;   /* a load in params_adopt failed: params_changed reports dev_err */
    char dev_err[256];

    uint64_t corrupt_told_ms; /* repair.c, under hb_mu: when we last said a shard is corrupt (REPAIR_TELL_MS) */

    /* process groups (group.c). A session pushes and fetches the shards of each fragment that
     * dl_first_shard .. dl_last_shard name: all of them for a worker of one process and a sharded group's
     * rank (rc is its own shards then), its part of them for a rank of an unsharded group */
    int grp;      /* o.group.size > 1 */
    int grp_rank; /* o.group.rank (0 without a group) */
    /* an unsharded group: in fragment f rank r moves shards [grp_bounds[f*(size+1)+r], [..+r+1]) (a part of
     * every fragment); grp_parts[2f], [2f+1]: this rank's of fragment f (dl_first_shard). NULL otherwise */
    int *grp_bounds, *grp_parts;
    uint32_t grp_calls;    /* collectives so far: the ranks of a group in step have made the same number */
    int grp_check_every;   /* inner steps from one CHECK (group.c: was the group evicted?) to the next, rank 0's */
    int grp_since_check;   /* inner steps since the ranks last agreed (open, a sync, a CHECK) */
    uint64_t grp_check_ms; /* when they did (rank 0 paces the CHECKs by it) */
    int grp_dirty;         /* the ranks' parts may disagree: the next sync fetches instead of sending */
    int grp_stop;          /* a rank's host asked to stop, agreed at a collective: the same on every rank */
    int grp_stop_rank;     /* the first rank that asked (grp_stop) */
    /* a sharded group's rank (part.c: group.slices): rc is this rank's view of the run, its shards only,
     * renumbered 0 .. rc.nshards-1 with bounds into its own buffers; shard_ids[k] is shard k's number in
     * the run (what goes on the wire and into Redis field names). NULL otherwise: the numbers are the run's */
    int *shard_ids;
    int run_nshards;      /* the run's shards (= rc.nshards unless sharded) */
    uint64_t run_numel;   /* the run's parameters (= rc.numel unless sharded) */
    uint64_t *run_bounds; /* sharded: the run's run_nshards+1 shard bounds (rc.shard_bounds otherwise) */
    int *run_frag_bounds; /* sharded: the run's fragment bounds, run shard numbers (rc.frag_bounds otherwise) */
    uint64_t grp_digest;  /* sharded: the run's shards digest, summed over the ranks at the last agreement */
    async_plan grp_plan;  /* async Streaming: the submission of the round in flight (one at a time in async) */
    /* async Streaming: the places the group's last placed submission got, per run shard (-1: none yet), set
     * by the rank's thread that placed it; a rank's close waits until they are applied (group.c
     * gmember_wait_committed), as the other ranks' parts may still be on their way */
    int64_t *grp_placed;
};

/* The run was shut down (a heartbeat's reply said so, or a Function refused with SHUTDOWN); hb_mu held. A
 * worker of one process stops on it; a group's ranks stop where they agree (group.c agree_stop). */
static inline void dl_shutdown_told_locked(diloco *d)
{
    if (!d->shutdown_seen_ms) d->shutdown_seen_ms = now_ms() | 1; /* (never 0, which means "not told") */
    if (!d->grp && !d->stop_requested) d->stop_requested = DILOCO_STOP_SHUTDOWN;
}

/* The run ended for this session otherwise than by a shutdown (kind: DILOCO_STOP_*). RECREATED: it was made
 * again under its name (coordinator init --force), and the parameters, secret and layout this session holds
 * may not be the new run's. REPLACED: another process registered under our worker id; registering again
 * would take the id back from it, and the two would fight over it for ever. Either ends the session as a
 * shutdown does (its machinery stops a worker, or a group's ranks together, and registers no more);
 * diloco_stop_requested says which. hb_mu held. */
static inline void dl_end_told_locked(diloco *d, int kind)
{
    if (!d->run_end) d->run_end = kind;
    dl_shutdown_told_locked(d);
}

/* Shard k of this session (an index into its buffers and per-shard arrays) as the run numbers it. */
static inline int dl_shard_id(const diloco *d, int k)
{
    return d->shard_ids ? d->shard_ids[k] : k;
}

/* Fragment f's version is written only through this: a Streaming fragment's round writes it on its own
 * thread, and diloco_version reads fragment 0's on the host's while that round may be in flight (an
 * atomic store and load; the library's other reads are on the thread that wrote it, or after it was joined). */
static inline void dl_set_frag_version(diloco *d, int f, int64_t version)
{
    __atomic_store_n(&d->frag_version[f], version, __ATOMIC_RELAXED);
}

/* The shards of fragment f this session moves, [dl_first_shard, dl_last_shard): the fragment's, or this
 * rank's part of them in an unsharded group. */
static inline int dl_first_shard(const diloco *d, int f)
{
    return d->grp_parts ? d->grp_parts[2 * f] : d->rc.frag_bounds[f];
}
static inline int dl_last_shard(const diloco *d, int f)
{
    return d->grp_parts ? d->grp_parts[2 * f + 1] : d->rc.frag_bounds[f + 1];
}

/* The first parameter of fragment f in this session's buffers (f = nfragments: their end). */
static inline size_t dl_frag_start(const diloco *d, int f)
{
    return (size_t)d->rc.shard_bounds[d->rc.frag_bounds[f]];
}

/* ---- the files' functions, in their layers from the bottom up (docs/architecture.md "Layers": a file
 * calls only files below it; wake.c's are in wake.h) ---------------------------------------------------- */

/* control.c: the control connection and our membership (the bottom of the library) */
#define REDIS_TIMEOUT_MS 10000 /* the control connection's command timeout */
/* ... of a command begun after a stop (SIGINT, SIGTERM; one in flight at the stop ends at once): the confirm
 * of the last round and the deregistration are best effort, and a Redis that does not answer (frozen,
 * packets dropped) must not hold the exit for 10 s each (control.c's top comment) */
#define CLOSING_REDIS_TIMEOUT_MS 1000
/* Let the stop end c's commands (a connection the host's stop may find blocked: ctl, a lane, blk). */
void dl_watch_stop(diloco *d, rconn *c);
/* diloco_close begins: while stopping, only its commands may open a broken control connection again. */
void dl_closing(diloco *d);
/* A command on ctl, reconnecting as needed; the caller frees the reply. NULL or an error reply (see
 * dl_reply_failed): err (may be NULL) says why, written while ctl_mu is held, since any thread's
 * reconnect may free ctl as soon as it is released: never pass d->ctl to rconn_reply_error. */
redisReply *dl_command(diloco *d, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The same, argv form (lens may be NULL: strlen of each) */
redisReply *dl_command_argv(diloco *d, int argc, const char **argv, const size_t *lens, char *err, size_t errlen);
/* The same without reconnecting: NULL at once (err says why) while the connection is broken. */
redisReply *dl_command_argv_once(diloco *d, int argc, const char **argv, const size_t *lens, char *err, size_t errlen);
int dl_reply_failed(const redisReply *r); /* NULL or an error reply */
/* With the run's min_replicas > 0: wait until that many Redis replicas have our writes on ctl so far
 * (WAIT, again while fewer do); 0 at once when min_replicas is 0, -1 + err when ctl broke or we stop. */
int dl_wait_replicas(diloco *d, char *err, size_t errlen);
int dl_stopping(const diloco *d); /* the embedding program asked us to stop (o.stop, diloco_request_stop) */
int dl_stop_seen(void *d);        /* dl_stopping as the watch of a connection or of frame I/O takes it */
/* Sleep ms, in 100 ms slices that look at the stop: a stopped worker goes on within a slice. */
void dl_sleep_unless_stopped(const diloco *d, unsigned ms);
int dl_shutdown_seen(diloco *d);  /* this session was told the run was shut down (a group: maybe not agreed) */
/* What ended the run for this session, for messages: "the run was shut down", or that it was made again. */
const char *dl_run_end(diloco *d);
/* Whether the run ended for this session otherwise than by a shutdown (run_end: RECREATED, REPLACED). */
int dl_run_ended(diloco *d);
/* Whether a Function's error (r->str) ends the run for this session: DILOCO_STOP_RECREATED (the run was made
 * again), DILOCO_STOP_REPLACED (our current incarnation was replaced by another process's registration), or
 * 0. Not under hb_mu. */
int dl_reply_end(diloco *d, const char *error);
/* Whether a refusal's text ("worker <id> (incarnation <inc>) was replaced: ...") says our current
 * incarnation was replaced by another registration of our id (a worker of one process only). Not under hb_mu. */
int dl_replaced(diloco *d, const char *why);
uint64_t dl_shutdown_seen_ms(diloco *d); /* when it was told (now_ms), 0 if not */
int64_t dl_inc(diloco *d);
/* Register (again). A group's rank does not: the group registers together (group.c), so this only
 * returns 0 and the round that found us evicted reports DL_EVICTED. */
int dl_register(diloco *d, char *err, size_t errlen);
/* dl_register; rank 0 registers its group. held: the versions held, by the run's shard ids (run_nshards, -1:
 * none): dl_held_by_run's, or a sharded group's, gathered from its ranks. */
int dl_register_now(diloco *d, const int64_t *held, char *err, size_t errlen);
/* This session's versions by the run's shard ids into held (run_nshards; -1 where it holds none). */
void dl_held_by_run(const diloco *d, int64_t *held);
/* Is our incarnation still a live member? (The heartbeat thread also notices, but maybe later.) */
int dl_still_member(diloco *d);
/* The heartbeat thread found us evicted (its flag, read under hb_mu; cleared when we register again). */
int dl_evicted(diloco *d);
/* Why the heartbeat found us no member, into out: the operator's kick or missed heartbeats. */
void dl_evicted_why(diloco *d, char *out, size_t cap);
/* Where the round this thread works for counts its bytes and phase stamps: the info the thread was
 * pointed at (dl_round_info_use: a Streaming round's thread, and the owner threads fanout.c starts for it),
 * else the session's cur (the training thread). */
diloco_sync_info *dl_round_info(diloco *d);
/* Point this thread at info (NULL: the session's cur); returns what it pointed at before. */
diloco_sync_info *dl_round_info_use(diloco_sync_info *info);
diloco_sync_info *dl_round_info_current(void); /* what this thread points at (NULL: the session's cur) */
/* Point this thread's commands (dl_command, dl_command_argv, dl_wait_replicas) at *c, a connection only it
 * uses (NULL: ctl, shared under ctl_mu); made on the first command. Returns what it pointed at before. */
rconn **dl_round_ctl_use(rconn **c);
/* Whether a Streaming sync run's rounds (fragments_in_flight > 1) or their tails (the look at the commit after
 * the boundary settled the round, any D) overlap: then streaming.c's lanes, tails and the wake hub are used,
 * and registering again is left to the training thread (a round that finds us evicted only says DL_EVICTED:
 * round.c). */
int dl_stream_overlap(const diloco *d);
/* A process group's rank ends the group's membership (dl_deregister with its rank; any rank may): the other
 * ranks see the eviction instead of waiting at a barrier for the group's arrival. Best effort. */
void dl_group_leave(diloco *d);

/* part.c: a sharded group's rank's view of the run (its slices' shards only), and the shards digest */
/* Make rc this rank's view of the run from o.group.slices (numel: the params buffer's length): every
 * slice must be whole shards of the run. -1 + err (the slice at fault and the nearest shard bounds). */
int part_view(diloco *d, size_t numel, char *err, size_t errlen);
void part_free(diloco *d);
/* Σ over the shards this session holds of XXH3_64bits_withSeed(&XXH3(shard), 8, run's shard number)
 * (diloco_sync_info.shards_digest: a sharded group sums its ranks'). */
uint64_t part_shards_digest(const diloco *d);

/* device.c: device-resident parameters (the hooks of diloco_device_ops) */
int dl_dev_init(diloco *d, const float *params, char *err, size_t errlen); /* checks o.device, sets dev */
void dl_dev_free(diloco *d);
void *dl_host_alloc(diloco *d, size_t bytes); /* o.device.host_alloc, or malloc */
void dl_host_free(diloco *d, void *p);
/* o.device.load of src[off, off+n) (base, or la: what Δ of those fragments is measured from) with mode
 * DILOCO_LOAD_*. */
int dl_dev_load(diloco *d, const float *src, size_t off, size_t n, int mode, double alpha, char *err, size_t errlen);
/* o.device.delta of fragment f (a process group rank: its part of f) into delta_bf16 / delta_f32 (int8/int4:
 * fp32, quantized by delta.c), against origin[f] (base or la), reloading the snapshot of the whole fragment
 * from it first if it changed since it was loaded. 0; 1: not finite, *bad = offset in the part; -1: device
 * error (err). */
int dl_dev_delta(diloco *d, int f, const float *origin, size_t *bad, char *err, size_t errlen);
/* base[shard] is being written (a params reply): its fragment's device snapshot is out of date. */
void dl_dev_base_written(diloco *d, int shard);
/* la[f] was written while Δ of f is measured from it: the snapshot is out of date. */
void dl_dev_origin_written(diloco *d, int f);

/* lookahead.c: --async-lookahead, the next interval's start ahead of the version we got */
int lookahead_alloc(diloco *d, char *err, size_t errlen); /* nothing when the run has none */
void lookahead_free(diloco *d);
void lookahead_keep(diloco *d, int f);                           /* before fragment f's submission: its base */
void lookahead_aim(diloco *d, int f);                            /* after its get: the start, per shard */
int lookahead_enter(diloco *d, int f, char *err, size_t errlen); /* params[f] = the start; tell the trainer */

/* params.c: base into the trainer's parameters */
/* params[shards] = base[shards] (with device hooks: a DILOCO_LOAD_COPY load, whose error, if any, the
 * params_changed that always follows returns) */
void params_adopt(diloco *d, int first_shard, int last_shard);
/* Put base[f] into params[f]: copy, or params = alpha*params + (1-alpha)*base; tell the trainer. */
int params_apply(diloco *d, int f, double alpha, char *err, size_t errlen);
/* params[lo, hi) = alpha*own + (1-alpha)*base in host memory, own[0] the value of element lo (params + lo
 * itself, or a copy a process group's exchange kept aside): Streaming's mix, one arithmetic for both */
void params_mix(diloco *d, size_t lo, size_t hi, const float *own, double alpha);
int params_changed(diloco *d, size_t off, size_t n, char *err, size_t errlen); /* trainer callback */
/* params_adopt then params_changed over shards [first_shard, last_shard): the trainer takes what base holds
 * there. 0, or -1 + err (a failed device load or trainer callback). */
int params_take(diloco *d, int first_shard, int last_shard, char *err, size_t errlen);
/* Device hooks: the whole of fragment f (a process group rank: every rank's part, which the group's exchange
 * put in base) into the device, a copy of base or with alpha above 0 the mix (DILOCO_LOAD_MIX). 0, -1 + err. */
int params_load_fragment(diloco *d, int f, double alpha, char *err, size_t errlen);

/* delta.c: the pseudo-gradient in the codec of our pushes, and error feedback */
/* The codec of our pushes (push_dtype): the run's, except fp32 in a bf16 run when o.bf16 is 0. */
int dl_delta_dtype(const diloco *d);
/* The Δ buffers of push_dtype (and the error feedback's). */
int dl_delta_alloc(diloco *d, char *err, size_t errlen);
void dl_delta_free(diloco *d);
/* Δ of fragment f from params (on the thread that owns params). -1 if params are not finite. */
int dl_delta_compute(diloco *d, int f, char *err, size_t errlen);
/* --weight-by tokens: a Δ weighs the tokens of every step it covers. dl_delta_compute counts them from
 * the previous Δ of f. A Δ that nothing took (its round or submission failed before any server had it:
 * training goes on, and the next Δ covers its steps too) gives its tokens back to the next one; steps that
 * are dropped (params reset to the global ones) count for no Δ: their fragment's count starts again. */
void dl_delta_untaken(diloco *d, int f);
void dl_delta_restart_tokens(diloco *d, int f);
void dl_delta_forget_tokens(diloco *d); /* every fragment's (a new registration: round_rejoin, on_failure) */
/* Shard k's part of delta_* (as pushed, in push_dtype) and its size in *bytes. */
const void *dl_delta_shard(const diloco *d, int k, size_t *bytes);

/* delta_topk.c (--compress topk): the accumulator and its top-k chunks; delta.c calls these */
/* delta_q and its offsets for top-k payloads, and the accumulator (ef). */
int dl_delta_topk_alloc(diloco *d, char *err, size_t errlen);
/* Elements [c, c+len) of shard k (c - lo a multiple of TOPK_CHUNK): the accumulator e = beta*e + Δ (from
 * base - params, or the device's fp32 Δ), its top k per chunk encoded into delta_q; the encoded bytes
 * and *qlen, or NULL with *bad (relative to c) when Δ is not finite. */
const uint8_t *dl_delta_topk_encode(diloco *d, int k, size_t c, size_t len, int from_device, size_t *bad, size_t *qlen);

/* update.c: --download update, the round's update applied with our copy of the momentum */
int dl_update_alloc(diloco *d, char *err, size_t errlen);
void dl_update_free(diloco *d);
/* The flags of a get of shard at min_version: BLOB_GET_UPDATE_OK when we hold min_version-1 with its
 * momentum, else BLOB_GET_MOMENTUM (in runs with --download update). */
int dl_update_get_flags(const diloco *d, int shard, int64_t min_version, int flags);
/* Whether a received update reply of a shard of n elements has the run's codec and size (topk: and
 * its structure, sparse_update_check). */
int dl_update_fits(const diloco *d, size_t n, const blob_header *h, const uint8_t *payload, size_t plen);
/* Where an update, or parameters with momentum, of shard are received; NULL for any other reply. */
void *dl_update_place(diloco *d, int shard, const blob_header *h, size_t plen);
/* Parameters then momentum (2n floats) of version into base and mom. */
void dl_update_take_momentum(diloco *d, int shard, int64_t version, const uint8_t *payload);
/* Apply a checked update reply to base and mom; *digest = XXH3 of the result. DL_OK when it is the
 * committed digest (h->text), DL_RETRY otherwise (the next get asks for the momentum). */
int dl_update_apply(diloco *d, int shard, const blob_header *h, const uint8_t *payload, uint64_t *digest, char *err,
                    size_t errlen);

/* state.c: what a session holds */
/* What diloco_open does before registering: options, Redis, the run's configuration, buffers. */
int state_init(diloco *d, const diloco_options *o, float *params, size_t numel, char *err, size_t errlen);
void state_free(diloco *d); /* after the connections to shard-servers are closed (conn_close_all) */

/* owners.c: which shard-server owns which shard */
int owners_refresh(diloco *d, char *err, size_t errlen);
void owners_get(diloco *d, int shard, shard_owner *out);
/* c[0 .. last-first): shards [first, last) as just read from Redis. If a lease's epoch there is not the one our
 * map holds (it moved since we read the owners), read the owners again now: a request about to go to that shard
 * would go to its old owner. 1 when they were read again, 0 when nothing moved, -1 + err when the read failed. */
int owners_follow(diloco *d, int first, int last, const committed_shard *c, char *err, size_t errlen);
/* After a transient failure of shard's `what`: re-read the owners, back off; DL_FAIL past deadline, or
 * SHUTDOWN_GRACE_MS after this session was told the run was shut down. */
int owners_retry_pause(diloco *d, unsigned *attempt, uint64_t deadline, int shard, const char *what, char *err,
                       size_t errlen);
/* A push or get of shard (what) went through: when a "still trying" line was logged since the last one did, one
 * INFO line says the waiting is over (else the log ends on that WARN while the rounds go on). */
void owners_wait_over(diloco *d, int shard, const char *what);

/* conn.c: the data plane: connections to shard-servers, push and get */
/* A connection to addr, the owner of shard (-1: none), for this thread: its connect and handshake end when d
 * stops or that shard's lease moves (conn.c, watch_lease); its I/O after, when d stops. */
dp_conn *conn_acquire(diloco *d, const char *addr, int shard, char *err, size_t errlen);
void conn_release(diloco *d, dp_conn *c, int broken);
void conn_close_all(diloco *d);
/* push our pseudo-gradient of shard k for round r; DL_OK on ack. */
int conn_push(diloco *d, int shard, int64_t round, char *err, size_t errlen);
/* Pipelined pushes of shards with one owner: every frame is sent before the first reply is read, so the
 * server checks shard i while shard i+1 is on the wire. rcs[i] = each shard's outcome (DL_RETRY for
 * those not acknowledged when the connection broke); the caller retries the ones not DL_OK. */
int conn_push_batch(diloco *d, const int *shards, int count, int64_t round, int *rcs, char *err, size_t errlen);
/* Pipelined gets of shards with one owner (all requests sent, then the replies read in order, each
 * parameter payload straight into base): rcs[i] and got[i] per shard, as conn_get. */
int conn_get_batch(diloco *d, const int *shards, int count, int64_t min_version, int flags, int *rcs, int64_t *got,
                   char *err, size_t errlen);
/* conn_get_batch in two halves, for gets sent before their replies may be taken (fanout_get_start):
 * send every request (DL_OK: *out holds the connection; else DL_RETRY and nothing is held), then read
 * the replies, which releases the connection. Dropping them instead: conn_release(d, *out, 1) (the
 * connection is closed unread: nothing of the replies reaches our state). */
int conn_get_batch_send(diloco *d, const int *shards, int count, int64_t min_version, int flags, dp_conn **out,
                        char *err, size_t errlen);
int conn_get_batch_recv(diloco *d, dp_conn *c, const int *shards, int count, int64_t min_version, int *rcs,
                        int64_t *got, char *err, size_t errlen);
/* get shard k at version >= min_version into base and params; sets *got_version. DL_NEED when the
 * server lists us as missing (*got_version: the round, async: the place, whose Δ it lacks; -1 when the
 * server does not say), DL_RETRY for wait/moved/broken. */
int conn_get(diloco *d, int shard, int64_t min_version, int flags, int64_t *got_version, char *err, size_t errlen);

/* repair.c: waiting out a shard whose durable state is corrupt */
/* A shard-server answered CORRUPT (why = its message). Block until no shard of the run is
 * marked corrupt any more (`coordinator repair` ran), heartbeats going on meanwhile. 0, or -1 when we
 * are stopping or the run was shut down (err says which). The repaired parameters are a version above
 * any we hold: fetching at our versions gets them. */
int repair_wait(diloco *d, const char *why, char *err, size_t errlen);
/* Shards marked corrupt in dl:{R}:shards (fields "k:corrupt"); -1 if Redis could not say. */
int repair_marked(diloco *d);
/* repair_wait's two halves, for a wait paced elsewhere (a process group's ranks wait together: group.c):
 * says that we wait for why (at most every minute; the caller looks every every_ms) and looks at the marks:
 * 1 when no shard is marked corrupt any more; repair_over then prepares the fetch of the repaired
 * parameters (the owners again). */
int repair_look(diloco *d, const char *why, int every_ms);
/* The pause between two looks: ms, or less when we are asked to stop or the run was shut down (then 1). */
int repair_pause(diloco *d, int ms);
void repair_over(diloco *d);

/* heartbeat.c: the heartbeat thread */
int heartbeat_start(diloco *d, char *err, size_t errlen);
void heartbeat_stop(diloco *d);

/* fanout.c: a job per shard, one thread per owner; each returns the worst outcome of its shards */
/* Push our Δ of every shard for round (pipelined per owner first, then each with its retries). */
int fanout_push(diloco *d, int first, int last, int64_t round, char *err, size_t errlen);
/* Push our Δ of every shard k for its own place rounds[k] (async: each with its retries). */
int fanout_push_each(diloco *d, int first, int last, const int64_t *rounds, char *err, size_t errlen);
typedef struct fanout_get_arg {
    int64_t want;         /* minimum version */
    int may_push;         /* we are a participant of round want-1 and still hold our Δ */
    int flags;            /* BLOB_GET_TENTATIVE_OK: a version not yet durable will do */
    int once;             /* one attempt per shard (resending Δ if asked), no waiting in place: the
                     caller loops over the whole fragment (sync.c's get_round) */
    const int64_t *after; /* when set (async), shard k's minimum version is after[k] + 1 (our
                             submission's place, resent there on `need`) and want is unused */
    unsigned ask_ms;      /* with after: a shard told to wait this long for earlier places ends DL_RETRY, so
                             the caller can ask whether our place was lost in a failover (async.c) */
    const char *have;     /* when set, per shard k of the session: nonzero = base holds it at a version >= want
                             already (fetch.c), not asked */
} fanout_get_arg;
/* Get every shard at version >= ga->want into base (pipelined per owner first, then each with its
 * retries, or once); shard_version[k] = the version got. A shard whose owner says its durable state is
 * corrupt makes the outcome DL_CORRUPT (shard_corrupt[k] = 1); in a pass (once) the owner's other shards
 * are still asked (and sent our Δ where asked), in a blocking get its other shards are not. */
int fanout_get(diloco *d, int first, int last, const fanout_get_arg *ga, char *err, size_t errlen);
/* A pass of fanout_get (ga->once, no `after`) whose requests go out now, one thread per owner, and whose
 * replies are read only once fanout_get_finish says take (sync.c sends the gets of round r+1 while it
 * arrives at barrier r: the owners hold them until the close). NULL out of memory (nothing sent). */
typedef struct fanout_early fanout_early;
fanout_early *fanout_get_start(diloco *d, int first, int last, const fanout_get_arg *ga);
/* take: the replies are read and the pass ends as fanout_get's (its outcome); else the gets are dropped,
 * their connections closed unread, and nothing of our state changed (DL_OK). Frees e. */
int fanout_get_finish(fanout_early *e, int take, char *err, size_t errlen);

/* barrier.c: arriving at a sync round's barrier and waiting for its close */
/* Arrive at barrier (f, round) and wait until it closes: DL_OK; DL_STALE (it closed without us),
 * DL_EVICTED, DL_FAIL (err). d->cur.wait_seconds: how long we waited for the others. */
int barrier_pass(diloco *d, int f, int64_t round, char *err, size_t errlen);
/* A joiner of the round after `round`: block until round `round` of fragment f is no longer open (woken
 * by its close): DL_OK closed, DL_STALE gone already, DL_NEED it waits for nobody but a new arrival
 * (ours), DL_EVICTED, DL_FAIL. */
int barrier_wait_closed(diloco *d, int f, int64_t round, char *err, size_t errlen);

/* fetch.c: the global parameters, with no pseudo-gradient to offer */
/* What Redis has committed of every shard of [first, last) (committed_shard) into out[0 .. last-first): one HMGET,
 * not waiting for a broken connection to Redis; where a lease's epoch is not our map's, the owners are read again
 * (owners_follow). 0, or -1 + err. */
int fetch_committed(diloco *d, int first, int last, committed_shard *out, char *err, size_t errlen);
/* Every shard of fragment f at one version >= min_version into base (and params when adopt); a corrupt
 * shard is waited out (repair_wait). 0, or -1 + err. */
int fetch_fragment(diloco *d, int f, int64_t min_version, int adopt, char *err, size_t errlen);
/* The same, but a corrupt shard ends it for the caller to wait out: DL_OK, DL_CORRUPT or DL_FAIL (+ err). */
int fetch_fragment_once(diloco *d, int f, int64_t min_version, int adopt, char *err, size_t errlen);
/* A joiner of the round after the open one waits for it to close (sync mode, one fragment). */
int fetch_wait_joined(diloco *d, int f, char *err, size_t errlen);
int fetch_all(diloco *d, char *err, size_t errlen); /* every fragment, into base and params (fetched_all++) */
/* Our round of fragment f is gone: base[f] takes the current global version (params untouched). */
int fetch_current(diloco *d, int f, char *err, size_t errlen);
/* Its one try: DL_OK, DL_FAIL, or DL_CORRUPT (fetch_current waits for the repair alone; a process group's
 * ranks together). */
int fetch_current_once(diloco *d, int f, char *err, size_t errlen);

/* async.c: the network part of an async-mode round */
/* Submit, push, get for fragment f; base[f] holds the versions we got. Once dl_submit gave the places,
 * a failure leaves the submission pending (frag_incomplete[f]) for async_complete. */
int async_submit_net(diloco *d, int f, char *err, size_t errlen);
/* The first half of it: dl_submit of a new submission (d->submission + 1; with again the current one, whose
 * places a failover lost: async_deliver's lost) of fragment f for n shards, the run's ids[0..n-1] or,
 * without ids, the run's shards first .. first + n - 1, from the base versions bases[], retried while Redis
 * does not answer; seqs[] takes the places. DL_OK; DL_STALE (older than --max-staleness), DL_EVICTED,
 * DL_FAIL: no place was given. A process group's rank 0 places the group's submission for every shard its
 * ranks move (group.c). */
int async_place_shards(diloco *d, int f, int again, int first, const int *ids, int n, const int64_t *bases,
                       int64_t *seqs, char *err, size_t errlen);
/* A group rank's async round of fragment f, on its thread: every rank places the same submission p (the
 * session's next number, or with again its current one: a second try), dl_submit answering the ranks after
 * the first with the places the first got, and delivers its part (async_deliver). The places of f's shards
 * go into seq and, once placed, frag_incomplete[f] is set. The outcome as async_submit_net's. */
int async_place_deliver(diloco *d, int f, const async_plan *p, int again, char *err, size_t errlen);
/* The second half: the Δ of each shard this session moves of fragment f (dl_first_shard..) to its place,
 * then each such shard once the submission is applied (resent to an owner that lacks it); base takes the
 * versions got, frag_incomplete[f] is cleared and frag_version[f] is the lowest of them (a group's rank: left
 * to the ranks' agreement, group.c). Places a failover lost are placed again and delivered there; a rank
 * of a group's blocking round cannot (rank 0 places for the group): DL_FAIL, and *lost (may be NULL) 1. */
int async_deliver(diloco *d, int f, int *lost, char *err, size_t errlen);
/* Before fragment f computes its next Δ: complete its pending submission, if any (DL_OK: none; DL_STALE:
 * completed, params[f] took the versions got and the steps trained meanwhile are dropped; DL_FAIL,
 * DL_CORRUPT: still pending). */
int async_complete(diloco *d, int f, char *err, size_t errlen);
/* At diloco_close: fragment f's pending submission completed best effort (bounded by the sync timeout, or
 * promptly after a stop), nothing adopted. DL_OK: none pending, or applied; else still pending (err). */
int async_complete_closing(diloco *d, int f, char *err, size_t errlen);

/* sync.c: the network part of a sync-mode round */
/* Make sure the tentative parameters fragment f continued from were committed as they are, resending
 * our kept Δ to a new owner if they were not: DL_OK, DL_STALE (the round was committed differently,
 * e.g. without a participant that died: base is now the committed version and our local progress on
 * f must be dropped), DL_CORRUPT (a shard's durable state is corrupt: repair_wait) or DL_FAIL (err
 * says why; Δ is still kept, a later call tries again). */
int sync_confirm_durable(diloco *d, int f, char *err, size_t errlen);
/* Whether fragment f's tentative shards are durable now, clearing those that are; on the thread that ran
 * f's round. stop NULL: one look, without waiting. Otherwise it looks again every few seconds while some
 * are pending, sending our kept Δ to the new owner of a shard whose server died before committing it
 * (another worker's get may wait for it), until none is pending or *stop is set. A conflict, and whatever
 * is pending, are left to sync_confirm_durable. */
void sync_confirm_watch(diloco *d, int f, const int *stop);
/* Push, arrive, wait, get, for the shards of fragment f (round: its open round). */
int sync_run_round(diloco *d, int f, int64_t round, char *err, size_t errlen);
/* Wait, without a Δ or an arrival, for fragment f's round to close, then get its result durably: as
 * sync_run_round (DL_OK: base[f] at round+1), or barrier_wait_closed's DL_NEED (only an arrival closes it). */
int sync_join_round(diloco *d, int f, int64_t round, char *err, size_t errlen);

/* round.c: one fragment's round as the schedule sees it (after_step.c: when; streaming.c: in flight).
 * Each returns 1 when params changed, 0 when not, -1 when unrecoverable (err says why). */
/* A sync starts: its counters (cur) start from zero, so it reports only what it sent and received. */
void round_begin(diloco *d);
/* What the sync of fragment f (round, started at t0) sent and received, for diloco_last_sync. */
void round_record(diloco *d, int f, int64_t round, uint64_t t0, int stale);
/* Fragment f's round (async: its submission, based on version `round`) lost as stale, why: said once. */
void round_warn_stale(const diloco *d, int f, int64_t round, const char *why);
/* The network part of fragment f's round, safe on a background thread (touches base[f] only):
 * DL_OK: base[f] is version round+1; DL_STALE: base[f] is the current global version; DL_EVICTED:
 * registered again, everything must be fetched (refetch_all); DL_CORRUPT (repair_wait); DL_FAIL. */
/* fresh: sent right after every fragment was fetched (registered again at this boundary's settling): our Δ is
 * zero, and a sync round that does not expect us is taken without it (round.c, sync_round). */
int round_net(diloco *d, int f, int fresh, char *err, size_t errlen);
/* After round_net of fragment f returned DL_OK, on the same thread: in sync mode, a look at whether
 * the parameters it took are durable yet, so that f's next Δ usually finds nothing to confirm and costs
 * the training thread no round trip to Redis; with stop, looking on until they are, or *stop is set
 * (sync_confirm_watch). */
void round_confirm_early(diloco *d, int f, const int *stop);
/* Fragment f, blocking: Δ, the network round (sync.c or async.c), then round_settle. */
int round_blocking(diloco *d, int f, double alpha, char *err, size_t errlen);
/* Whether settling outcome rc may register again or fetch every fragment (evicted, corrupt, a failure past
 * --max-sync-retries): every other round in flight must have ended before (streaming.c). */
int round_settle_refetches(const diloco *d, int rc);
/* Fragment f's Δ from params; if our own parameters diverged, take the global ones instead. */
prep_outcome round_prepare_delta(diloco *d, int f, char *err, size_t errlen);
/* Settle fragment f's round (opened at `round`, started at t0) whose Δ was not sent (p != PREP_SEND); after
 * a reset, a worker that is no longer a member (dropped from its last round) registers again and fetches
 * everything. 1 params changed (reset, registered again, or repaired), 0 a failure counted, -1
 * unrecoverable (err). */
int round_unsent(diloco *d, int f, int64_t round, prep_outcome p, uint64_t t0, char *err, size_t errlen);
/* Apply the outcome rc of fragment f's network round (why: its error): the new global parameters
 * (mixed with ours by alpha), or the failure streak, or a repair wait. */
int round_settle(diloco *d, int f, int64_t round, int rc, const char *why, uint64_t t0, double alpha, char *err,
                 size_t errlen);
/* The heartbeat found us evicted during inner step `step` of an interval of `interval` steps (one process; a
 * Streaming worker's fragment in flight already settled): register again and fetch everything as a joiner
 * now, dropping the interval. 1 params changed, 0 a failure counted (on_failure), -1 unrecoverable (err). */
int round_rejoin(diloco *d, int step, int interval, char *err, size_t errlen);

/* streaming.c: Streaming DiLoCo's fragments in flight. */
/* Steps between two fragment boundaries (H/F, at least 1). */
int stream_interval(const diloco *d);
/* The fragment the next boundary sends: the first whose round is the lowest in a sync run, the next in
 * turn in an async one (taken: the turn moves on). */
int stream_next_fragment(diloco *d);
/* The order in which a force sync takes every fragment once (order[F]): by round, then index, in a sync
 * run (the order the others' boundaries take them in); 0..F-1 in an async one. */
void stream_force_order(const diloco *d, int *order);
/* A fragment boundary: settle the oldest fragment in flight once fragments_in_flight are, start the next. */
int stream_step(diloco *d, char *err, size_t errlen);
/* Wait for every fragment in flight, oldest first, and settle each. */
int stream_finish_fragment(diloco *d, char *err, size_t errlen);
/* The same at close, its outcome dropped. */
void stream_finish_inflight(diloco *d);
/* Before fragment f's Δ is prepared (its round about to be sent): f's previous round's thread joined, as it
 * may still write f's tentative state, and the ended threads of the others (their lanes free again). */
void stream_ready(diloco *d, int f);
/* A process group's Streaming (group.c), whose ranks settle each round together: fragment f's network round
 * (stream_ready, its Δ prepared, agreed; plan: an async submission, placed and delivered by
 * async_place_deliver; NULL: round_net) goes in flight on a thread as a worker of one process's does
 * (stream_launch); the
 * oldest is waited for and taken out of flight, its outcome, message and counters copied to *out, nothing
 * settled (stream_take_oldest); every round in flight waited for and dropped, before anything fetches every
 * fragment (stream_drop_inflight); whether a round's thread may be writing base now (stream_base_busy). */
void stream_launch(diloco *d, int f, const async_plan *plan);
void stream_take_oldest(diloco *d, stream_slot *out);
void stream_drop_inflight(diloco *d);
int stream_base_busy(diloco *d);

/* group_part.c: a group's parts (each rank a contiguous range of every fragment's shards) */
/* The ranks' parts of every fragment into d->grp_bounds, this rank's into d->grp_parts; -1 + err when a
 * fragment has fewer shards than the group has ranks, or out of memory. */
int gpart_bounds(diloco *d, char *err, size_t errlen);
/* Rank r's shards of fragment f: [*first, *last). */
void gpart_rank_shards(const diloco *d, int r, int f, int *first, int *last);
/* The shards this rank moves, over every fragment (every shard of the run before the parts are set). */
int gpart_count(const diloco *d);
/* The run's fragment bounds (shard numbers of the run; a sharded rank's rc has its own view of them). */
const int *gpart_run_frag_bounds(const diloco *d);

/* group_msg.c: the group's collectives, one group_msg from each rank */
enum {
    GRP_HELLO = 1,
    GRP_REGISTER,
    GRP_JOIN,
    GRP_FETCH,
    GRP_PREPARE,
    GRP_NET,
    GRP_RECOVER,
    GRP_CHECK,
    GRP_PLACES,
    GRP_COMPLETE,
    GRP_READY,
    GRP_REPAIR,
    GRP_HELD
};

/* What one rank tells the others at one collective. */
typedef struct group_msg {
    uint64_t magic;
    uint32_t call; /* the rank's count of collectives: the same on every rank in step */
    int32_t what;  /* GRP_* */
    int32_t rank, size;
    int32_t status;   /* DL_* (or 0 / -1) */
    int32_t shutdown; /* every message: this rank's heartbeat was told the run was shut down (agree_stop) */
    int32_t stop;     /* every message: this rank's host asked it to stop (dl_stopping: agree_stop) */
    int32_t reserved; /* (zero: the v[] that follow are 8-aligned, and no byte sent is left unwritten) */
    int64_t v[8];     /* what-specific numbers */
    char run[72];
    char worker[64];
    char err[384];
    /* every message: the group this rank is in (0: none yet, e.g. a rank opening), for out-of-step errors */
    int64_t ginc, gversion;
    char gworker[64];
    uint64_t held[RUNCONF_MAX_SHARDS / 64]; /* HELLO of a sharded group: the run's shards this rank holds */
} group_msg;
/* One allgather of msg (what: GRP_*), followed by n numbers (mine), from every rank: all[size] the messages,
 * vals[r * n + i] rank r's i-th number (vals may be NULL when n is 0); every slot checked (the rank it
 * should, at the same collective), and a stop any rank reports agreed (diloco_stop_requested). -1 + err when
 * the transport failed or the ranks are out of step. gmsg_gather: with no numbers. */
int gmsg_gather_with(diloco *d, int what, group_msg *msg, const int64_t *mine, int n, group_msg *all, int64_t *vals,
                     char *err, size_t errlen);
int gmsg_gather(diloco *d, int what, group_msg *msg, group_msg *all, char *err, size_t errlen);
/* One slot per rank for an allgather's messages (zeroed); NULL with err when out of memory. */
group_msg *gmsg_alloc(const diloco *d, char *err, size_t errlen);
/* The first rank whose status is not DL_OK: its status, with "rank r: its message" in err. */
int gmsg_first_failure(const group_msg *all, int size, char *err, size_t errlen);
/* The worst status of all ranks (corrupt > fail > evicted > stale), DL_OK when none failed. */
int gmsg_worst_status(const group_msg *all, int size);
/* gmsg_worst_status, with "rank r: its message" of the first rank that has it in err. */
int gmsg_worst_failure(const group_msg *all, int size, char *err, size_t errlen);

/* group.c: process groups, several processes as one worker */
/* The group's sync round of fragment f, applied at once (plain DiLoCo, diloco_force_sync): each rank its part,
 * then the exchange. As round_blocking. */
int group_round(diloco *d, int f, char *err, size_t errlen);
/* A Streaming group's fragment boundary: the fragment of the last boundary applied, the next one's round made
 * (blocking: the ranks' collectives are the host's, made on this thread) and applied at the next boundary, as
 * a worker of one process applies a fragment in flight. As round_blocking. */
int group_stream_step(diloco *d, char *err, size_t errlen);
/* Every round of the group's in flight or waiting to be applied, settled by the ranks together (a force
 * sync's first step, before it reads the fragments' order). 1 params changed, 0 not, -1. */
int group_settle_all(diloco *d, char *err, size_t errlen);
/* A group's inner step that is not a sync: every grp_check_every steps the ranks agree whether the group
 * was evicted, and if so all stop the interval there and register again. As group_round. */
int group_step(diloco *d, char *err, size_t errlen);
/* Every fragment at one version on every rank, then the exchange of them all (open, a recovery). -1 (the same on
 * every rank) when a rank could not fetch. */
int group_fetch(diloco *d, char *err, size_t errlen);
/* The ranks agreed (open, a sync, a CHECK): the steps to the next CHECK count from here. */
void group_check_restart(diloco *d);

/* group_open.c: a group's rank opens its session (HELLO, the registration, READY, the first fetch) */
/* diloco_open of a group's rank: what session_open does, with the group's collectives. */
int group_open(diloco *d, const diloco_options *o, float *params, size_t numel, char *err, size_t errlen);

/* group_member.c: a group's membership */
/* Rank 0 registers the group, hands its registration (with the round of each fragment) to the others, and
 * they join it (REGISTER, JOIN). 0, or -1 + err on every rank. */
int gmember_register(diloco *d, char *err, size_t errlen);
/* This rank's incarnation (0: none; the group left the run), not evicted. */
void gmember_set_incarnation(diloco *d, int64_t inc);
void gmember_wait_committed(diloco *d); /* before a group rank's normal close ends the group */

#endif
