/*
 * commit.h: what the files of a shard's commit share (commit.c, commit_log.c, commit_ahead.c,
 * commit_compute.c, commit_topk.c, commit_obj.c: from the top down, each calling only the ones below).
 *
 * A commit (ss_commit, made and ended by commit_obj.c) goes through: the barrier and membership checks
 * (commit.c), the compute of the mean and the outer step in slices from a queue (commit_compute.c),
 * tentative serving and the log entry, deferred while parameters stream out (commit_log.c), then
 * dl_commit (commit.c). In sync runs the compute may have started before the barrier closed
 * (commit_ahead.c). A file below reaches the step that follows its own through the commit's steps
 * (commit_steps, below). Snapshots (snapshot.c) are written once no commit is running. The surface the
 * other files of the shard-server use is in ss.h.
 */
#ifndef SHARD_SERVER_COMMIT_H
#define SHARD_SERVER_COMMIT_H

#include <xxhash.h>

#include "ss.h"

#define MAX_PARTICIPANTS 4096

/* How a commit ended, for the gets parked on it (commit_finish): done (judged again), the barrier not
 * closed (`wait`), open but a close is on its way (kept parked until it is heard: closes.c), a close heard
 * while dl_barrier was in flight (judged again: the barrier is read anew), Δ missing (`need`), an error. */
enum commit_outcome { OUT_DONE, OUT_WAIT, OUT_OPEN, OUT_AGAIN, OUT_NEED, OUT_ERR };

struct ss_commit;

/* What follows the steps of a commit that the files below commit.c take, which they cannot call
 * themselves (it is above them): chosen by the file that makes the commit (commit.c for a round's
 * commit, commit_ahead.c for a compute ahead of the barrier) and reached through c->steps, as libevent
 * reaches its backends through a table. */
typedef struct commit_steps {
    /* commit_compute.c: θ' is computed. A round's commit serves it and writes the log entry
     * (commit_log_write); a compute ahead waits for its barrier. */
    void (*computed)(struct ss_commit *c, ss_shard *s);
    /* commit_log.c: the log entry is written, or r says why not (store_set's callback): dl_commit. */
    rlink_cb *logged;
    /* commit_obj.c: the commit ended and its parked gets are answered: the next round's compute ahead
     * may start (ahead_consider). NULL: nothing (a compute ahead has nobody waiting on it). */
    void (*ended)(ss_ctx *ss, ss_shard *s);
} commit_steps;

typedef struct ss_commit {
    ss_ctx *ss;
    const commit_steps *steps;
    int k;
    uint64_t gen;
    int64_t round; /* commits version round+1 */
    int64_t base;  /* async: the version the submission was computed from (its staleness: round - base) */
    /* --async-rule rebase: θ of version base (the shard's, past.c; NULL otherwise) */
    const float *base_theta;
    int64_t epoch;
    uint64_t t0;
    uint64_t closes_seen; /* sync: the closes heard when its dl_barrier was sent (closes.c) */
    int np; /* participants not dropped at barrier time */
    char *ids[MAX_PARTICIPANTS];
    int64_t incs[MAX_PARTICIPANTS];
    int dropped[MAX_PARTICIPANTS];
    float scale[MAX_PARTICIPANTS]; /* runconf_weighted: each participant's weight (else unused) */
    int outstanding;               /* dl_member / dl_drop calls in flight */
    int failed;
    char need[512];
    char errmsg[256];
    /* the compute (queued, sliced) */
    struct ss_commit *qnext;
    size_t pos; /* elements done */
    int first;
    ss_tunables t;
    XXH3_state_t *xs; /* digest of the new θ, streamed */
    /* after the step */
    float *g;    /* the averaged pseudo-gradient: the log entry's payload, sent from here */
    uint8_t *gq; /* --download update: g in the run's codec (g holds its decoded values): the log
                            entry's payload and the update sent to workers (then the shard's upd.buf) */
    size_t gq_len;
    uint64_t gq_xxh;
    int g_bad; /* g is not finite: the commit fails */
    uint8_t head[BLOB_HEADER_MAX];
    float *theta;
    float *mom;
    int has_mom;
    float *dnbuf;   /* async Delayed Nesterov buffer after the step (NULL when DN is off) */
    int used;       /* participants averaged */
    int g_deferred; /* g not computed yet: the fast path computes it for the log entry (cq_fill_g) */
    char digest[17];
    uint64_t theta_xxh;  /* the digest as a number */
    uint64_t t_computed; /* now_ms() when θ' was ready (its log entry waits at most LOG_DEFER_MAX_MS) */
    int ahead;           /* computed ahead of the barrier (commit_ahead.c): never served, logged or committed */
    int ahead_done;      /* and its compute is finished (no longer queued) */
} ss_commit;

/* commit_obj.c: the commit object */
/* A commit of shard s's next version (round = its version), under its current generation and epoch;
 * steps (static, not copied) says what follows its compute, its log entry and its end. */
ss_commit *commit_new(ss_ctx *ss, ss_shard *s, const commit_steps *steps);
void commit_free(ss_commit *c);
/* The shard if this commit is still its current operation, else NULL. */
ss_shard *commit_shard(ss_commit *c);
/* Answer the gets waiting for this round with the outcome (enum commit_outcome); frees c. */
void commit_finish(ss_commit *c, int outcome);
/* Give up: reload the shard from Redis (reload) or answer the waiting gets with an error. */
void commit_fail(ss_commit *c, const char *why, int reload);
/* Parse "id:inc,id:inc" into c's participants, marking those listed in dropped ("id,id"). -1 if malformed. */
int commit_parse_participants(ss_commit *c, const char *parts, const char *dropped);

/* commit_ahead.c */
enum ahead_outcome { AHEAD_NONE, AHEAD_COMPUTED, AHEAD_QUEUED };
/* The commit c (participants known, every Δ here) takes over the shard's compute ahead if it was made
 * for the same Δ, version and tunables: AHEAD_COMPUTED (θ' is ready: write the log), AHEAD_QUEUED (c
 * took its place in the compute queue), either with its own weights; else AHEAD_NONE (dropped if there
 * was one: compute as usual). */
int ahead_take(ss_commit *c, ss_shard *s);
/* A commit succeeded: its participants (not dropped) are the guess for the shard's next round. */
void ahead_note_participants(const ss_commit *c, ss_shard *s);

/* commit_compute.c */
/* Every Δ is here: the participants' weights, then queue the compute of version round+1. */
void commit_compute(ss_commit *c, ss_shard *s);
/* --weight-by tokens, --staleness-weight: c->scale of each participant (nothing without them). */
void commit_compute_weights(ss_commit *c, ss_shard *s);
/* old's place in the compute queue goes to by. */
void cq_replace(ss_ctx *ss, ss_commit *old, ss_commit *by);
/* The loop turn that computes one slice of the queue's head commit (ss->cq_ev). */
void cq_on_turn(evutil_socket_t fd, short what, void *arg);
/* The log entry's g of a fast commit, computed once the parameters are out. 0, or -1 if a Δ went
 * missing meanwhile. */
int cq_fill_g(ss_commit *c, ss_shard *s);

/* commit_topk.c (--compress topk) */
/* Bytes of the round's update (--download update): every participant not dropped. */
size_t commit_topk_update_bytes(const ss_commit *c, const ss_shard *s);
/* Elements [lo, lo+len) (whole top-k chunks, or to the shard's end) of a topk commit: g (len floats:
 * c->g + lo, or a scratch) = the weighted mean of the sparse Δ ds[0..used), then the outer step into
 * c->theta and c->mom; with c->gq, the update written with the first block. c->g_bad on failure. */
void commit_topk_block(ss_commit *c, ss_shard *s, ss_delta **ds, int used, float *g, size_t lo, size_t len);

/* commit_log.c */
/* Version round+1 is computed: serve it tentatively, then write its log entry (now, or deferred). */
void commit_log_write(ss_commit *c, ss_shard *s);
/* The timer that starts deferred log entries (ss->lq_ev). */
void lq_on_timer(evutil_socket_t fd, short what, void *arg);
/* --download update: the update this computed commit makes (u->buf = c->gq, not a copy). */
void commit_log_update_of(const ss_commit *c, ss_update *u);

#endif
