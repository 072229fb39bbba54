/*
 * ss.h: the shard-server's internal types and the functions its files share.
 *
 * The shard-server is one single-threaded libevent loop. Everything it knows lives in one ss_ctx:
 * the options, the run layout, three Redis connections (control: FCALLs; bulk: blob GET/DEL; bulk-write:
 * blob SETs sent from our own buffers; so a big write never delays a lease renewal), the listener and
 * connections of the data plane, the per-shard cache (parameters, momentum, pending pseudo-gradients),
 * the queue of commits being computed and the metrics.
 *
 * Files (one concern each):
 *   main.c     command line, signals, the loop (the only file not in build/libshardserver.a)
 *   ctx.c      start-up: the run read from Redis (library check, config, tunables), then the listener,
 *              the Redis links, the lease loop and the timers on an event base; the unit tests
 *              (tests/test_ss_*.c) start a server with it and drive its loop themselves; and the
 *              teardown that frees it all (ss_ctx_free)
 *   link/      the link to Redis (link/rlink.h): reconnects with backoff, detects stalls, routes by
 *              hash slot in a Redis Cluster; carries commands (hiredis) or big blob SETs (writev)
 *   store.c    blob I/O (GET/DEL on the bulk connection, SET on bulk-write) of dl:{R:k}:snap|log:<v>:<e>
 *   lease.c    the lease loop (dl_server_beat), lease validity, owner map for redirects, tunables
 *   shard.c    per-shard cache: lease transitions (acquire, release, reload), teardown
 *   load.c     a shard's cache rebuilt from Redis (snapshot + log replay + digest check); CORRUPT
 *   park.c     requests waiting on a shard, judged again through ss->dispatch
 *   subscribe.c  the subscription to the run's barrier closes (dl:{R}:closes): a close heard starts the
 *              commits of its fragment and answers the gets parked on its barrier; the re-check of the
 *              barriers they wait on when no close was heard
 *   closes.c   what the server knows of each fragment's open barrier: closes heard, found open, missed
 *   delta.c    the pseudo-gradients a shard holds, as received
 *   commit.c   the commit chain of a round (barrier, drops, membership checks, dl_commit); commit.h
 *              holds what the commit files share
 *   commit_compute.c  the compute queue and kernels (mean, outer step), in slices so I/O goes on meanwhile
 *   commit_ahead.c    a sync commit's compute started before its barrier closes (taken over if the round
 *                     has the participants guessed)
 *   commit_log.c      tentative serving and the log entry, deferred while parameters stream out
 *   commit_obj.c      the commit object: made, freed, ended (its parked gets answered)
 *   snapshot.c the snapshots (deferred until no commit runs; a rebase run's, until K versions old)
 *   past.c     --async-rule rebase: θ of the last K versions, which a commit rebases submissions with
 *   ops.c      the data-plane operations push and get (validation), called through ss->dispatch
 *   reply.c    a get's answers: parameters (sent by reference), parameters with momentum, and the
 *              round's update (--download update)
 *   server.c   listener, connections, framing (big frames read straight into their buffer), replies,
 *              rejections
 *   metrics.c  counters kept in memory, logged every METRICS_PERIOD_S (metrics.c)
 *   fault.c    fault injection for the crash tests (--fault-* flags; off by default)
 */
#ifndef SHARD_SERVER_SS_H
#define SHARD_SERVER_SS_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <event2/listener.h>
#include <hiredis/async.h>

#include "base/util.h"
#include "format/blob.h"
#include "format/dp_error.h"
#include "format/runconf.h"
#include "link/rlink.h"
#include "net/auth.h"
#include "redis/cluster.h"
#include "redis/url.h"

/* The exit status of a shard-server whose id another process took over for good (lease.c, id_taken): a
 * supervisor should not start it again with the same id (deploy/systemd: RestartPreventExitStatus). */
#define SS_EXIT_ID_TAKEN 3

/* ---------------------------------------------------------------------------------------------- */
/* options (main.c) */

typedef struct ss_opts {
    char redis[512];
    char run[80];
    char listen_host[256];
    int listen_port;
    char advertise[300]; /* "" = listen host + bound port */
    char id[128];
    int lease_ttl_ms;
    int connect_timeout_ms; /* start-up wait for an unreachable Redis (--connect-timeout) */
    int max_pending_rounds;
    int log_level;
    double crash_before_commit; /* fault injection for crash tests: probability of _exit before dl_commit */
    char fault_tentative_to[64]; /* fault injection: serve tentatively to this worker alone, then _exit (fault.c) */
    char fault_late_need[64];    /* fault injection: answer this worker's gets of a committed version with a
                                    late `need` until its Δ comes again (fault.c) */
    char metrics_host[256];     /* --metrics HOST:PORT: Prometheus /metrics over HTTP ("" = off) */
    int metrics_port;
    int compute_ahead_off; /* --compute-ahead off: commits start computing at the barrier only */
    int peer_timeout_ms;   /* --peer-timeout: a connection silent mid-frame, or not reading, is closed (server.c) */
} ss_opts;

/* ---------------------------------------------------------------------------------------------- */
/* metrics (metrics.c): logged every METRICS_PERIOD_S and served as Prometheus text on --metrics HOST:PORT */

typedef struct ss_metrics {
    uint64_t rounds_committed;
    uint64_t noop_commits;
    uint64_t bytes_in;
    uint64_t bytes_out;
    double commit_seconds; /* sum over committed rounds: first barrier read to dl_commit reply */
    double commit_seconds_max;
    uint64_t conflicts;     /* FENCED / VERSION replies to dl_commit or dl_snapshot */
    uint64_t lease_changes; /* shards gained or lost */
    uint64_t rejections;
    uint64_t duplicates; /* pushes of a sync round that had committed already (not rejections) */
    uint64_t pushes;
    uint64_t gets;
    uint64_t tentative_gets; /* of which answered before the version was durable */
    uint64_t loads;
    uint64_t load_failures;
    uint64_t corrupt_loads; /* loads that found the durable state corrupt (counted in load_failures too) */
    uint64_t snapshots;
    uint64_t connections;
    uint64_t peers_timed_out; /* connections closed for their silence (server.c) */
    uint64_t ahead_used;      /* commits that took over the compute made ahead of their barrier */
    uint64_t ahead_discarded; /* computes ahead that were dropped (another set of Δ, a resend, a reload) */
    uint64_t closes_heard;    /* barrier closes announced on dl:{R}:closes (subscribe.c) */
    uint64_t closes_missed;   /* closes found by reading the barrier, never announced (closes.c) */
} ss_metrics;

/* ---------------------------------------------------------------------------------------------- */
/* data plane requests (server.c) */

struct ss_conn;

typedef struct ss_req {
    struct ss_conn *conn;
    blob_header h;
    uint8_t *frame; /* the whole received blob (owned) */
    size_t frame_len;
    const uint8_t *payload; /* into frame, FRAME_PAYLOAD_ALIGN-aligned (req_take_frame) */
    size_t payload_len;
    uint64_t parked_ms;  /* when it started waiting on a shard */
    int reloads;         /* shard reloads this request caused (at most one) */
    int waits_close;     /* a get parked until the barrier of the round before the version it asks for closes */
    struct ss_req *next; /* in a shard's list of parked requests */
    /* Called with the reply just before the request is freed (NULL: none). A request without a
     * connection (conn NULL) is answered only here: the unit tests feed requests to ops_dispatch so. */
    void (*on_reply)(struct ss_req *req, const blob_header *h, const void *payload, size_t len);
    void *reply_arg;
} ss_req;

/* ---------------------------------------------------------------------------------------------- */
/* shards (shard.c, commit*.c, snapshot.c) */

typedef struct ss_delta {
    struct ss_delta *next;
    char worker[64];
    int64_t inc;
    int64_t round;
    int dtype;      /* BLOB_F32 or BLOB_BF16: kept as received */
    int64_t tokens; /* --weight-by tokens: the tokens behind it (header aux) */
    uint8_t *frame; /* owns the bytes */
    const uint8_t *payload;
} ss_delta;

/* --download update: the update that produced a version (the averaged pseudo-gradient in the run's
 * codec, as logged), sent to the gets that hold the version before. buf is sent by reference
 * (server_buf_release). */
typedef struct ss_update {
    uint8_t *buf; /* NULL: none */
    size_t len;
    uint64_t xxh;    /* of buf */
    int64_t version; /* the version it produces */
    float lr, mu;
    int64_t flags;   /* BLOB_UPDATE_* and the step's (bit 0 nesterov, bit 1 first step) */
    int64_t aux;     /* participants; 0: no-op */
    char digest[17]; /* θ of that version */
} ss_update;

/* SH_CORRUPT: ours, but its durable state cannot be loaded (a blob fails its checksum or is missing, or
 * the replay does not give k:digest); requests get `err CORRUPT` until `coordinator repair` revokes the
 * lease. */
enum ss_shard_state { SH_FREE = 0, SH_LOADING = 1, SH_READY = 2, SH_CORRUPT = 3 };

#define SNAP_UNSURE_MAX 4

typedef struct ss_shard {
    int k;
    int frag;
    size_t n;
    int state;
    int64_t epoch; /* lease epoch this cache was loaded under */
    uint64_t gen;  /* bumped on every drop/reload: async callbacks compare it */
    int64_t version;
    float *theta;
    float *mom;
    int has_mom;
    float *dnbuf; /* async Delayed Nesterov: the buffer of submissions (NULL when DN is off) */
    /* --async-rule rebase (past.c): θ of the last past_cap versions before `version`, slot version mod
     * past_cap (past_v: the version a slot holds, -1 none), and the snapshot prepared at a multiple of
     * snapshot_every, written once it is rebase_window versions old (snapshot.c) */
    float **past;
    int64_t *past_v;
    int past_cap;
    struct ss_snap *snap_pend;
    char digest[17];
    uint64_t theta_xxh; /* XXH3_64bits of theta: the digest as a number, the checksum of `params` */
    /* Version tent_version, computed by the running commit but not durable yet: served to the gets that
     * accept tentative parameters (the log entry and dl_commit then run while it streams out). */
    float *tent_theta; /* the commit's buffer (NULL when there is none) */
    uint64_t tent_xxh;
    int64_t tent_version;
    ss_update upd;      /* --download update: the update of version `version` (upd.version) */
    ss_update tent_upd; /* and the running commit's, of tent_version (buf is the commit's) */
    int committing;
    int busy_beats; /* beats in a row that named it busy: its commit was under way (lease.c, is_busy) */
    int snapshotting;
    /* refs ("version.epoch") of snapshots written but whose dl_snapshot had no answer (connection lost,
     * refused): recorded or not, they are obsolete once a later snapshot of ours is recorded */
    char snap_unsure[SNAP_UNSURE_MAX][48];
    int64_t snap_wanted;   /* version to snapshot once commits are idle (0 = none) */
    int reload_wanted;     /* reload once the current operation finishes */
    char corrupt_key[256]; /* SH_CORRUPT: the blob (or shards hash field) at fault, and why */
    char corrupt_reason[512];
    int corrupt_recorded; /* dl_mark_corrupt has answered (else the next beat sends it again) */
    ss_delta *deltas;
    /* The commit of round `version` computed ahead of its barrier (commit_ahead.c), and the participants
     * of the last commit ("id:inc,..." in barrier order): the guess it is computed for. */
    struct ss_commit *ahead;
    char *last_parts;
    ss_req *parked, *parked_tail;
    int nparked, nparked_gets; /* all parked requests, and the gets among them (park.c) */
    struct ss_load *load; /* in-progress load */
} ss_shard;

/* A blob header of shard s under its current lease (shard, epoch, fragment) for op at version, with a
 * payload of count elements in dtype: a reply's (reply.c) or a snapshot's (snapshot.c). */
static inline void ss_blob_header(const ss_shard *s, const char *op, int64_t version, int dtype, uint64_t count,
                                  blob_header *h)
{
    blob_header_init(h, op);
    h->shard = s->k;
    h->version = version;
    h->epoch = s->epoch;
    h->frag = s->frag;
    h->dtype = dtype;
    h->count = count;
}

/* ---------------------------------------------------------------------------------------------- */
/* the process */

typedef struct ss_tunables {
    float lr;
    float mu;
    int nesterov;
} ss_tunables;

/* fault.c's state (--fault-* flags) */
typedef struct ss_fault {
    uint64_t rng; /* --fault-crash-before-commit's draws */
    /* --fault-tentative-to: the worker has had a tentative version (which), a commit reached dl_commit
     * (held), and the exit waits for the reply to leave */
    int served, held, shard;
    int64_t version;
    struct event *exit_ev;
    /* --fault-late-need: 0 armed, 1 answering its worker's gets of shard need_shard with `need` of round
     * need_round, 2 done (the Δ came again) */
    int late_need;
    int need_shard;
    int64_t need_round;
} ss_fault;

/* What the server knows of the open barrier of each fragment (closes.c), for the gets of round r+1 that
 * a worker sends while it arrives at barrier r: they wait parked for the close instead of being answered
 * `wait` (docs/PROTOCOL.md, "A sync round"). The closes are announced on the channel by the Lua function
 * that closes a barrier; this server hears them on its own subscribed link (subscribe.c). */
typedef struct ss_closes {
    rlink link;           /* subscribed to channel; in the route group, so it follows a failover */
    char channel[200];    /* dl:{R}:closes */
    int subscribed;       /* the current connection's SUBSCRIBE is confirmed */
    int nfrag;
    int64_t *heard;       /* per fragment: the highest round whose close was announced (-1: none) */
    uint64_t *heard_no;   /* and which close heard it was (ss->m.closes_heard then) */
    int64_t *open_round;  /* per fragment: the round dl_barrier last found open (-1: none) */
    uint64_t *open_ms;    /* when it did */
} ss_closes;

typedef struct ss_ctx {
    ss_opts opts;
    redis_url url;
    runconf rc;
    ss_tunables tun;
    char config_key[160];
    char id[128];
    char addr[300]; /* advertised host:port */
    struct event_base *base;
    rlink ctl;         /* FCALLs */
    rlink bulk;        /* blobs: GET, DEL */
    rlink bulkw;       /* blobs: SET (log entries, snapshots) without copies (RLINK_SET) */
    rlink_route route; /* Redis Cluster slot map of those three (and of closes.link) */
    ss_closes closes;  /* sync runs: the barrier closes heard (closes.c, subscribe.c) */
    struct evconnlistener *listener;
    struct accept_guard *listen_guard; /* pauses the listener when accept() fails (EMFILE) */
    struct ss_conn *conns; /* every data-plane connection (server.c) */
    size_t max_frame;      /* largest acceptable frame */
    ss_shard *shards;
    int nshards;
    /* leases */
    uint64_t lease_valid_until; /* now_ms() bound: beyond it no held lease may be trusted */
    int beat_in_flight;
    int beat_again; /* a beat was asked for while one was on its way (lease.c): sent once it is answered */
    uint64_t beat_sent_ms;
    uint64_t gone_logged_ms; /* when lease.c last said the run is gone from Redis (0: not since it was back) */
    uint64_t renew_warned_ms; /* when lease.c last said a renewal failed (0: one succeeded since) ... */
    char renew_warned[64];    /* ... and the start of what it said: another failure is news at once */
    int shutdown_told;       /* lease.c said that the run was shut down (dl:{R}:tunables status) */
    struct event *beat_timer;
    char **owner_addr; /* per shard: address of its owner as last read (for `moved`) */
    /* shutdown */
    int stopping;
    int refused;   /* Redis refused one of our logins for good (ctx.c): exit status 1 */
    int recreated; /* the run was made again under its name (lease.c): main.c starts this process again */
    int replaced;  /* another process holds our id for good (lease.c): exit status SS_EXIT_ID_TAKEN */
    /* who holds our id (lua/50_servers.lua, check_server_process): this process's random token; whether a
     * beat of ours was answered (until then each beat may take the id over); since when our beats have been
     * refused REPLACED (0: they are not) */
    char token[AUTH_NONCE_LEN + 1];
    int beat_accepted;
    uint64_t taken_since_ms;
    struct event *exit_timer;
    ss_metrics m;
    struct ss_commit *cq_head, *cq_tail; /* commits being computed, in order (commit_compute.c) */
    struct event *cq_ev;
    struct ss_commit *lq_head, *lq_tail; /* computed and served, log entry not started yet (commit_log.c) */
    struct event *lq_ev;
    struct event *metrics_timer;
    struct evhttp *metrics_http;
    struct accept_guard *metrics_guard;
    struct http_deadlines *metrics_deadlines; /* each --metrics connection's deadline for its request */
    struct event *park_timer;
    ss_fault fault;
    /* The calls that go up, set by ctx.c (as libevent calls its backends through a table): the files
     * below the dispatcher and the shard cache reach them only through these (docs/architecture.md,
     * "Layers"). dispatch (ops.c): the transport hands it each request, and parked requests are judged
     * again through it. reload, release (shard.c): a commit whose outcome is unknown rebuilds the cache;
     * a load that finds the lease moved drops the shard. */
    void (*dispatch)(struct ss_ctx *ss, ss_req *req);
    void (*reload)(struct ss_ctx *ss, ss_shard *s, const char *why);
    void (*release)(struct ss_ctx *ss, ss_shard *s, const char *why);
} ss_ctx;

/* Whether no held lease has outlived its ttl (lease.c renews lease_valid_until). */
static inline int ss_lease_valid(const ss_ctx *ss)
{
    return now_ms() < ss->lease_valid_until;
}

/* ctx.c */
/* Read the run from Redis (opts.redis, opts.run): library version, layout, tunables. Retries an
 * unreachable Redis for opts.connect_timeout_ms or until *stop is set. 0 ok, -1 (logged) fatal. */
int ss_ctx_load_run(ss_ctx *ss, volatile int *stop);
/* Start the server on base: shards, listener, commit events, the three Redis links, metrics, the lease
 * loop, the park timer. The caller runs the loop. */
int ss_ctx_start(ss_ctx *ss, struct event_base *base, char *err, size_t errlen);
/* Free everything the context owns (connections, shards, commits, Redis links, events); the loop must
 * not run it again. The struct itself and the event base are the caller's. */
void ss_ctx_free(ss_ctx *ss);

/* server.c */
/* A payload is read in place as floats or bf16 codes (the push checks, the commit), but it starts where
 * the sender's msgpack header ends, at any address: a frame is allocated with FRAME_SLACK spare bytes at
 * its end, and req_take_frame moves a misaligned payload up to the next FRAME_PAYLOAD_ALIGN boundary. */
#define FRAME_PAYLOAD_ALIGN 8
#define FRAME_SLACK (FRAME_PAYLOAD_ALIGN - 1)
/* req takes the frame (len bytes in a buffer of len + FRAME_SLACK): decodes its header into req->h and
 * sets req->payload, aligned. -1 with err on a malformed header (req owns the frame all the same). */
int req_take_frame(ss_req *req, uint8_t *frame, size_t len, char *err, size_t errlen);
int server_listen(ss_ctx *ss, char *err, size_t errlen);
void server_stop_accepting(ss_ctx *ss);
/* Teardown: stop accepting and close every connection (one whose request is still out is freed with
 * that request). */
void server_close(ss_ctx *ss);
/* Reply to req and free it; the connection reads its next request. */
void req_reply(ss_req *req, blob_header *h, const void *payload, size_t len);
/* Same, sending buf by reference (no copy): buf must be a malloc'd buffer that is never changed and is
 * freed with server_buf_release, which defers the free until every queued reply has been sent. h->xxh must
 * hold the buffer's XXH3_64bits (kept with the buffer, so it is hashed once, not once per reply). */
void req_reply_buf(ss_req *req, blob_header *h, void *buf, size_t len);
void server_buf_release(void *buf);
/* Buffers sent by reference that some connection has not finished sending (parameters on the wire). */
int server_bufs_in_flight(void);
void req_reply_simple(ss_req *req, const char *op, const char *text);
void req_reply_err(ss_req *req, dp_err code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void req_free(ss_req *req);
int req_conn_alive(const ss_req *req);
/* Refuse req: count it, log it, record it with dl_reject (fire and forget) and answer `err code`. */
void req_reject(ss_ctx *ss, ss_req *req, dp_err code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ops.c: the dispatcher (ss->dispatch) */
void ops_dispatch(ss_ctx *ss, ss_req *req);

/* reply.c: a get's answers */
/* Answer a get with a shard's parameters (its current θ, or a running commit's tentative one), sent by
 * reference with the checksum computed when they were. */
void reply_params(ss_ctx *ss, ss_shard *s, ss_req *req, float *theta, int64_t version, uint64_t xxh, int tentative);
/* --download update: answer a get that holds version u->version - 1 with the update u (sent by reference). */
void reply_update(ss_ctx *ss, ss_shard *s, ss_req *req, const ss_update *u, int tentative);
/* Whether a get takes the update u instead of parameters. */
int reply_wants_update(const ss_ctx *ss, const ss_req *req, const ss_update *u);
/* Answer a get of a --download update run that asked for the momentum with the parameters. */
void reply_params_momentum(ss_ctx *ss, ss_shard *s, ss_req *req);
/* Release an update's buffer (replies may still be sending it) and empty it. */
void reply_update_clear(ss_update *u);
/* `need`: the ids whose Δ of round (async: the place) a commit lacks. The round tells a worker whether the Δ
 * asked for is the one it is getting for (then it sends it again) or an earlier one, which it cannot send
 * (worker/diloco/fanout.c, get_job). commit_obj.c's answer to a round's parked gets; fault.c's late one. */
void reply_need(ss_req *req, int64_t round, const char *ids);

/* lease.c */
int lease_start(ss_ctx *ss, char *err, size_t errlen);
void lease_check_expiry(ss_ctx *ss);
const char *lease_owner_addr(ss_ctx *ss, int k);
void lease_leave(ss_ctx *ss, void (*done)(void *), void *arg);
void lease_beat_now(ss_ctx *ss);

/* shard.c */
int shards_init(ss_ctx *ss, char *err, size_t errlen);
/* Teardown, before the Redis links close: every shard's cache dropped (so the callbacks the closing
 * links run find their shard gone), its parked requests freed unanswered. */
void shards_stop(ss_ctx *ss);
/* Teardown, last: the shard table and the owner map. */
void shards_free(ss_ctx *ss);
void shard_acquire(ss_ctx *ss, ss_shard *s, int64_t epoch);
void shard_release(ss_ctx *ss, ss_shard *s, const char *why);
void shard_reload(ss_ctx *ss, ss_shard *s, const char *why);

/* park.c: requests waiting on a shard */
/* Park req on s (BUSY when too many wait already). */
void park_add(ss_ctx *ss, ss_shard *s, ss_req *req);
/* The shard's parked requests, in order, as a list (req->next) the shard no longer holds. */
ss_req *park_take(ss_shard *s);
/* Judge every parked request of s again (ss->dispatch), against the shard's new state. */
void park_redispatch(ss_ctx *ss, ss_shard *s);
/* Answer the requests that waited longer than max_age_ms: the worker will retry. */
void park_expire(ss_ctx *ss, uint64_t max_age_ms);

/* closes.c: what the server knows of each fragment's open barrier (ss_closes) */
/* The per-fragment state (all unknown); -1 out of memory. Freed by closes_free. */
int closes_init(ss_ctx *ss);
void closes_free(ss_ctx *ss);
/* The close of round r of fragment f was announced. */
void closes_heard(ss_ctx *ss, int f, int64_t r);
/* Whether the close of round r of fragment f (or a later one) was announced after the `seen`-th close
 * heard (ss->m.closes_heard when a dl_barrier was sent): that read, which found the barrier open, is out
 * of date and the barrier is read again. (A read sent after the announcement that still finds it open is
 * believed: a failover lost the close.) */
int closes_heard_since(const ss_ctx *ss, int f, int64_t r, uint64_t seen);
/* Whether a get may wait parked for a close: the subscription is confirmed, and closes have not been
 * found missing with none ever heard (a Lua library without the PUBLISH, an ACL without the channel). */
int closes_parking(const ss_ctx *ss);
/* dl_barrier found barrier r of f open, or closed (a close not announced by then counts as missed). */
void closes_found_open(ss_ctx *ss, int f, int64_t r);
void closes_found_closed(ss_ctx *ss, int f, int64_t r);
/* Whether barrier r of f is known open: found so less than CLOSES_RECHECK_MS ago, its close not heard,
 * and parking allowed. A get then waits parked without asking Redis. */
int closes_known_open(const ss_ctx *ss, int f, int64_t r);
/* Forget what was found open (the next get asks Redis again). */
void closes_forget_open(ss_ctx *ss);

/* subscribe.c: the subscription to the barrier closes (sync runs) */
/* Set up the link's subscription (each time it connects) and the state; the link itself is made by
 * ctx.c with the other links. 0, or -1 out of memory. */
int subscribe_start(ss_ctx *ss);
/* The park timer's tick: the gets parked on a barrier that is no longer known open are judged again
 * (dl_barrier read again), so a close whose message was lost costs at most a tick or two. */
void subscribe_tick(ss_ctx *ss);

/* delta.c: the pseudo-gradients a shard holds */
/* Free the deltas of rounds < below_round (or all of them). */
void delta_free(ss_shard *s, int64_t below_round, int all);
ss_delta *delta_find(ss_shard *s, int64_t round, const char *worker, int64_t inc);
/* Whether any pseudo-gradient of round is held. */
int delta_has_round(const ss_shard *s, int64_t round);
/* Keep the request's payload (the frame moves into the delta); replaces an earlier push of the same key. */
void delta_store(ss_shard *s, ss_req *req);

/* past.c: the versions an async rebase needs (θ of the last rebase_window versions). */
/* Keep theta (a buffer released with server_buf_release, now the ring's) as version `version`, in a ring of
 * `window` versions: the one it replaces is released. -1 (theta released) out of memory. */
int past_keep(ss_shard *s, int64_t window, float *theta, int64_t version);
/* θ of the shard's version `version`: its current one or one the ring holds; NULL if not held. */
const float *past_theta(const ss_shard *s, int64_t version);
void past_clear(ss_shard *s);

/* load.c: (re)building the cache of a shard we hold from Redis; the load frees itself when abandoned. */
void load_start(ss_ctx *ss, ss_shard *s);
void load_abandon(ss_shard *s);
/* dl_mark_corrupt with a CORRUPT shard's version, key and reason (fenced by our lease epoch); a load that
 * finds the durable state unusable makes the shard CORRUPT (answered `err CORRUPT` until a repair). */
void load_mark_corrupt(ss_ctx *ss, ss_shard *s);

/* commit.c, commit_log.c, snapshot.c */
int commit_init(ss_ctx *ss);
/* Teardown, after the Redis links closed: the commits still queued (compute, log) and the queues' events. */
void commit_free_all(ss_ctx *ss);
void commit_start(ss_ctx *ss, ss_shard *s);
/* Answer a get with the running commit's tentative parameters if it accepts them and they are the
 * version it wants; 1 when answered. */
int commit_log_reply_tentative(ss_ctx *ss, ss_shard *s, ss_req *req);
/* snapshot.c: the deferred snapshots, started once no commit runs; called when commits finish and
 * periodically. */
void snapshot_idle_work(ss_ctx *ss);
/* snapshot.c: a rebase run's snapshot of the version just committed, prepared now (a copy) and written
 * once it is rebase_window versions old; and dropping one prepared (with the cache). */
void snapshot_prepare_lagged(ss_ctx *ss, ss_shard *s);
void snapshot_drop_pending(ss_shard *s);
/* commit_ahead.c: a sync round's compute started before its barrier closes, when every pseudo-gradient
 * of the last round's participants is here (called when one is stored and when a commit ends). */
void ahead_consider(ss_ctx *ss, ss_shard *s);
/* Drop the shard's compute ahead, if any (why: for the debug log). */
void ahead_discard(ss_shard *s, const char *why);

/* fault.c: fault injection for the crash tests (docs/shard-server.md, "Fault injection") */
/* --fault-tentative-to, --fault-late-need: whether a running commit may serve req tentatively (always,
 * without the flags). */
int fault_may_serve_tentative(const ss_ctx *ss, const ss_req *req);
/* A commit served version `version` of shard k tentatively to the worker --fault-tentative-to names. */
void fault_tentative_served(ss_ctx *ss, int k, int64_t version);
/* A commit of shard k's round is about to run dl_commit: 1 when it must not (the process exits soon);
 * --fault-crash-before-commit may exit here at once. */
int fault_before_commit(ss_ctx *ss, int k, int64_t round);
/* Teardown: the armed exit's event. */
void fault_free(ss_ctx *ss);
/* --fault-late-need: answers req (a get that version `version` of shard k, committed, would answer) with a
 * `need` of its worker for the round before, until that Δ comes again: returns 1 when it did. */
int fault_late_need(ss_ctx *ss, ss_req *req, int k, int64_t version);
/* --fault-late-need: a push of a committed round came (a duplicate, answered STALE): if it is the Δ the
 * late `need` asked for, the fault is done. */
void fault_late_need_resent(ss_ctx *ss, const ss_req *req, int k);

/* store.c */
void store_blob_key(ss_ctx *ss, char *dst, size_t cap, int k, const char *kind, int64_t v, int64_t e);
int store_get(ss_ctx *ss, const char *key, rlink_cb *cb, void *priv);
/* SET key to the blob head||payload on the write connection; payload must live until cb runs. */
int store_set(ss_ctx *ss, const char *key, const uint8_t *head, size_t hlen, const void *payload, size_t plen,
              rlink_cb *cb, void *priv);
int store_del_ref(ss_ctx *ss, int k, const char *kind, const char *ref);
int store_del_refs(ss_ctx *ss, int k, const char *kind, redisReply **refs, size_t nrefs);
int store_fcall(ss_ctx *ss, rlink_cb *cb, void *priv, const char *fn, int nargs, const char **args);
/* HGET dl:{R}:shards k:version on the control connection: the version of shard k that Redis holds. */
int store_shard_version(ss_ctx *ss, int k, rlink_cb *cb, void *priv);
/* store_fcall whose reply comes only once the run's min_replicas replicas have the call (a commit: see
 * docs/PROTOCOL.md, "Durable means replicated"); the same as store_fcall when min_replicas is 0. */
int store_fcall_durable(ss_ctx *ss, rlink_cb *cb, void *priv, const char *fn, int nargs, const char **args);
/* With min_replicas > 0: record with dl_replicated that version of shard k is on enough replicas (after
 * store_fcall_durable's dl_commit), so workers can confirm tentative parameters; best effort. */
void store_mark_replicated(ss_ctx *ss, int k, int64_t epoch, int64_t version);

/* metrics.c */
int metrics_start(ss_ctx *ss, char *err, size_t errlen); /* the log timer, and the HTTP endpoint if asked */
void metrics_log(ss_ctx *ss);
void metrics_stop(ss_ctx *ss); /* teardown: the timer and the HTTP endpoint */

#endif
