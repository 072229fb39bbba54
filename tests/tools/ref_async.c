/* ref_async.c: the in-process reference of an async DiLoCo run of the quadratic trainer, plain or Streaming.
 *
 * Async runs are not deterministic in their order (who submits first depends on timing), but every
 * version is a pure function of the previous one and of the submission Redis placed there. This tool
 * reads that order from dl:{R}:events (submit events: worker, shard, seq, base version), replays it
 * with the same trainer and the same outer math (full Nesterov per submission, or Delayed Nesterov),
 * and prints the digests the run's shards must have:
 *
 *   shard <k> <digest>
 *
 * usage: ref_async --redis URL --run R --sync-every H [--quad-lr 0.01] [--no-bf16] [--async-rule RULE]
 *                  [--async-lookahead G] [--failed W:N,...] [--late W:N,...] [--twice W:N,...] [--skip-refused]
 *                  [--skip-rejoins] [--skip-noops] [--apply-uncommitted] [--trace]
 * (--async-rule, --async-lookahead: replay with this setting instead of the run's, to show that it matters;
 * --skip-refused: as if no try had been refused as STALE, --skip-rejoins: as if no worker had registered
 * again, --skip-noops: each no-op place replayed as the submission it was, the replays before such events
 * were replayed, --apply-uncommitted: the places a shut-down run left uncommitted replayed as if committed on
 * every shard, --trace: every version of every shard as well, "trace <k> <version> <digest> <worker>", for
 * the shard-servers' log lines "shard K: committed version V (..., digest D)": where a run left the replay)
 *
 * Each fragment is an order of its own. A submission covers one fragment's shards (all of them, or none:
 * dl_submit), each shard counts its own seq, and a fragment's shards move together, so the replay runs one
 * line of versions per fragment (plain async DiLoCo: one fragment, the whole vector). The quadratic trainer
 * is elementwise (AdamW per element; only its step count is shared, and every fragment steps at every step),
 * so a fragment's elements depend on that fragment's history alone: the replay keeps one trainer per worker
 * and fragment, stepped as the worker's whole trainer was, and of which only the fragment's elements are read.
 *
 * The schedule: a worker's boundaries come every I = H/F inner steps (plain async: I = H, F = 1), and
 * boundary b (its b-th try) sends fragment (b-1) mod F (worker/diloco/streaming.c: the fragments in turn,
 * one submission in flight, settled at the next boundary; async.c). So fragment f goes at boundaries f+1,
 * f+1+F, ...: its first submission trained (f+1)I steps from the versions the worker started from (those
 * it names as base); each later one trained from the versions the one before got back (the base of the
 * next one, as recorded): plain, H steps from the boundary; Streaming, (F-1)I steps from the boundary after
 * it, the I steps trained while it was in flight being dropped when its result came (the AdamW moments keep
 * them). With --weight-by tokens its pseudo-gradient is scaled by its steps since the fragment's previous Δ
 * (H; a fragment's first: (f+1)I) / weight_ref_tokens, a quadratic step being a token (a process group's
 * tokens are its ranks' sum: R times its steps, R from its join events' `group`); with
 * --staleness-weight, per shard, by outer_stale_weight of its seq - base; with --async-rule rebase it enters
 * the outer step as g + theta_seq - theta_base; with --async-lookahead a worker's later submissions of a
 * fragment start ahead of their base (start_of), and a plain rule's Δ is measured from that start.
 *
 * Failures, W:N naming worker W's try at its boundary N (plain async: its N-th try):
 * (--failed W:N: the try failed without a trace in Redis (DL_FAIL, training went on): the fragment's next
 * submission, F boundaries later, trained on from the start of the one before, and Δ covers both windows
 * and weighs their steps)
 * (--late W:N: the try got its places, and so is recorded, but not its result (its get failed): the worker
 * completed it at the fragment's next boundary, which sent nothing, dropped the steps trained since it went
 * out and took the versions it got, from which the fragment's next submission trains H steps (not ahead:
 * --async-lookahead starts only an interval that follows a submission's own get). A completion that failed
 * too (Redis or an owner still out of reach: round.c, round_prepare_delta) is named by --failed at its
 * boundary, and the completion comes at the next one: --late w1:6 --failed w1:7, completed at 8.) --twice W:N (plain async
 * only): the same failure as the worker handled it before 29 November (without --async-lookahead): its next
 * submission continued from where that window ended and measured Δ from the same start, so the window was
 * applied twice, and its weight was H)
 * What the events do not say, and the replay assumes: every worker trained with the H given here and kept
 * its schedule (no --final-sync, no DyLU), and failed only as told.
 * A new registration (a join event after the worker's first), plain or Streaming: the worker was evicted (a
 * stop longer than the heartbeat timeout) or left a place no Δ will fill (a lost dl_submit reply: the owner's
 * `need`), or failed too many syncs (worker/diloco/round.c: round_rejoin, round_settle, on_failure), and
 * registered and took every fragment at once, on its training thread. It had trained `steps` inner steps in
 * all (recorded by dl_register); those since each fragment's settle were trained from the versions it `held`
 * (recorded too; ahead as after any taken submission), or on from where it was when that try took nothing,
 * and are dropped. It took the versions not ahead (fetch_all), its tokens count anew, its AdamW state is
 * kept; its boundaries count from there, nothing going at the registration's own step, the fragments on in
 * turn (W:N above counts from its latest registration): a fragment's next submission trains from its base,
 * the versions taken, until its boundary (replay_rejoin). A join event without `steps` and `held` (a run from
 * before those fields) is refused, unless it is the worker's first. A later join with `steps` 0 is a process
 * restarted under the same id (killed, and started again by its supervisor): a new trainer (its AdamW state
 * and its step count anew), which takes the versions its first submission names as base and trains from
 * them, its boundaries and fragments counting from its start (replay_restart).
 * A place committed as a no-op (`participants` 0 in its commit events: its worker's incarnation was gone)
 * leaves the version as it was (momentum and Delayed Nesterov state too). If its worker submitted again
 * before registering again, it never knew of the place (its dl_submit reply was lost) and its next Δ carries
 * that window, as after --failed; else the window was trained and dropped at the registration (apply_noop).
 * A submission can be a no-op on some of its shards only: its worker was evicted while it delivered it (a
 * stop longer than the heartbeat timeout), the owners its Δ had reached applied it and the others found its
 * incarnation gone. Its worker knew the places, so it registered again before its next submission; the Δ is
 * applied on the shards whose commit counted it, and those shards alone take an outer step (apply).
 * A run shut down can end with places no owner committed (its shard's version, dl:{R}:shards, is below them):
 * the shutdown came while a submission was being delivered, so that some owners applied it and another's
 * push was refused. Those shards stay at their committed versions (read_committed); a run not shut down
 * must have committed every place.
 * A try refused as STALE (dl_submit's reject event, with the base of each shard it trained from: `bases`)
 * trained its window from those bases and sent nothing; its worker fetched the current versions, which its
 * next submission names as base, and trained on from them, not ahead (replay_refusal). A run whose reject
 * events lack `bases` (older than that field) is refused: that window is not in its events. */
#include <float.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/opts.h"
#include "base/util.h"
#include "format/keys.h"
#include "format/runconf.h"
#include "math/bf16.h"
#include "math/outer.h"
#include "math/outer_dn.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"
#include "trainers/quadratic.h"

#define MAX_WORKERS 64

typedef struct submission {
    char worker[64];
    int64_t *base; /* per shard (its fragment's) */
    int seen;      /* shards recorded */
    int noops;     /* shards on which it was committed as a no-op (its incarnation was gone) */
    char *noop;    /* per shard (its fragment's): committed as a no-op */
    int nended;    /* shards on which the run ended before its commit (shut down with the place pending) */
    char *ended;   /* per shard (its fragment's): never committed */
} submission;

/* What happened to a worker between two of its submissions of a fragment, in the events' order: after
 * `before` of them (counted in the events' order). A try refused as STALE (its reject event): the window its
 * worker trained from base, before fetching the current versions. A new registration (a join event, plain
 * async only): the worker had trained `steps` inner steps in all, those since it last took versions from
 * base (the versions it held), and took the versions its next submission names as base. */
enum { BETWEEN_REFUSED, BETWEEN_REJOINED, BETWEEN_RESTARTED };
typedef struct between {
    int kind, worker, frag;
    int64_t before;
    int64_t *base;   /* per shard (its fragment's; a registration: every shard it held) */
    long long steps; /* a registration's */
} between;

/* One fragment's order: its shards move together, version by version. */
typedef struct line {
    int first, last;  /* its shards [first, last) */
    size_t lo, hi;    /* its elements [lo, hi) */
    submission *subs; /* by seq */
    int64_t nsubs;
    float **theta; /* theta[v]: the vector at version v of this fragment (only [lo, hi) is the fragment's) */
} line;

/* A worker as replayed so far. */
typedef struct replayed {
    char *id;
    trainer **t;          /* per fragment: its trainer (the header says why one per fragment) */
    int64_t *last;        /* per fragment: its latest submission replayed so far (-1: none) */
    long long *boundary;  /* per fragment: the boundary (try) at which that submission went (0: none) */
    int *after;           /* per fragment: what that submission's try left: AFTER_* */
    int64_t *read, *done; /* per fragment: its submissions read from the events so far, and replayed so far */
    int *untaken;         /* per fragment: its no-op places since its last submission that the worker never knew of */
    long long *origin;    /* per fragment: the inner step its boundaries count from: 0, or its latest registration */
    int *turn; /* per fragment: the fragment its first boundary after origin sends (streaming.c, frag_next) */
    int joins; /* its registrations read (the first one, at its start, drops nothing) */
    int ranks; /* its process group's ranks (1: a single process), from its join events */
} replayed;

typedef struct ref {
    runconf rc;
    size_t n;
    long long H;
    double qlr;
    int bf16;
    float lr, mu;
    int nesterov;
    line *lines; /* per fragment */
    replayed w[MAX_WORKERS];
    int nworkers;
    between *betweens; /* refusals and registrations, in the events' order */
    int nbetweens, nrefusals, nrejoins, nnoops, nended;
    int shut_down;        /* the run's status is shutdown (the operator's dl_shutdown) */
    float *mom, *buf, *g; /* the servers' outer state and one submission's mean (each shard its own range) */
    char *has_mom;        /* per shard: a Δ was applied (a no-op leaves the momentum: its first step is to come) */
    const char *failed, *late, *twice; /* --failed, --late, --twice: "W:N,..." */
    int skip_refused;                  /* --skip-refused */
    int skip_rejoins, skip_noops;      /* --skip-rejoins, --skip-noops */
    int apply_uncommitted;             /* --apply-uncommitted */
    int trace;                         /* --trace */
} ref;

enum { AFTER_OK, AFTER_LATE, AFTER_TWICE, AFTER_NOOP };

static const char *field(redisReply *e, const char *name)
{
    for (size_t i = 0; i + 1 < e->elements; i += 2)
        if (strcmp(e->element[i]->str, name) == 0) return e->element[i + 1]->str;
    return NULL;
}

static int read_tunables(rconn *c, const char *run, ref *r)
{
    char key[KEY_MAX];
    redisReply *s =
        rconn_command(c, "HMGET %s outer_lr outer_momentum nesterov status", key_run(key, sizeof key, run, "tunables"));
    if (!s || s->type != REDIS_REPLY_ARRAY || s->elements != 4 || !s->element[0]->str) return -1;
    r->lr = (float)atof(s->element[0]->str);
    r->mu = (float)atof(s->element[1]->str);
    r->nesterov = atoi(s->element[2]->str);
    r->shut_down = s->element[3]->str && !strcmp(s->element[3]->str, "shutdown");
    freeReplyObject(s);
    return 0;
}

static int is_submit(redisReply *e)
{
    const char *type = field(e, "type");
    return type && !strcmp(type, "submit") && field(e, "seq") && field(e, "shard") && field(e, "worker") &&
           field(e, "base");
}

/* Each fragment's line, its submissions counted (the largest seq of its shards, plus one) and allocated. */
static void make_lines(ref *r, redisReply *x)
{
    r->lines = calloc((size_t)r->rc.nfragments, sizeof *r->lines);
    for (int f = 0; f < r->rc.nfragments; f++) {
        line *l = &r->lines[f];
        l->first = r->rc.frag_bounds[f];
        l->last = r->rc.frag_bounds[f + 1];
        l->lo = (size_t)r->rc.shard_bounds[l->first];
        l->hi = (size_t)r->rc.shard_bounds[l->last];
    }
    for (size_t i = 0; i < x->elements; i++) {
        redisReply *e = x->element[i]->element[1];
        if (!is_submit(e)) continue;
        line *l = &r->lines[runconf_fragment_of_shard(&r->rc, atoi(field(e, "shard")))];
        if (atoll(field(e, "seq")) + 1 > l->nsubs) l->nsubs = atoll(field(e, "seq")) + 1;
    }
    for (int f = 0; f < r->rc.nfragments; f++) {
        line *l = &r->lines[f];
        l->subs = calloc((size_t)l->nsubs + 1, sizeof *l->subs);
        for (int64_t s = 0; s < l->nsubs; s++) {
            l->subs[s].base = calloc((size_t)r->rc.nshards, sizeof(int64_t));
            l->subs[s].noop = calloc((size_t)r->rc.nshards, 1);
            l->subs[s].ended = calloc((size_t)r->rc.nshards, 1);
        }
        l->theta = calloc((size_t)l->nsubs + 1, sizeof(float *));
    }
}

/* Every submission of the fragment's line complete: recorded for each of its shards, by one worker. */
static int check_line(const ref *r, int f)
{
    const line *l = &r->lines[f];
    for (int64_t s = 0; s < l->nsubs; s++)
        if (l->subs[s].seen != l->last - l->first) {
            fprintf(stderr, "ref_async: submission %" PRId64 " of fragment %d is not recorded for each of its shards\n",
                    s, f);
            return -1;
        }
    return 0;
}

/* The index of worker id in r->w, made at its first use. */
static int worker_index(ref *r, const char *id)
{
    for (int w = 0; w < r->nworkers; w++)
        if (!strcmp(r->w[w].id, id)) return w;
    if (r->nworkers == MAX_WORKERS) {
        fprintf(stderr, "ref_async: the run has more than %d workers, more than this replay holds\n", MAX_WORKERS);
        exit(1);
    }
    replayed *rw = &r->w[r->nworkers];
    size_t nf = (size_t)r->rc.nfragments;
    rw->id = strdup(id);
    rw->t = calloc(nf, sizeof *rw->t);
    rw->last = malloc(nf * sizeof *rw->last);
    rw->boundary = calloc(nf, sizeof *rw->boundary);
    rw->after = calloc(nf, sizeof *rw->after);
    rw->read = calloc(nf, sizeof *rw->read);
    rw->done = calloc(nf, sizeof *rw->done);
    rw->untaken = calloc(nf, sizeof *rw->untaken);
    rw->origin = calloc(nf, sizeof *rw->origin);
    rw->turn = calloc(nf, sizeof *rw->turn);
    for (size_t f = 0; f < nf; f++) rw->last[f] = -1;
    rw->ranks = 1;
    return r->nworkers++;
}

/* A reject event of dl_submit's staleness bound (lua/40_barriers.lua, reject_stale). */
static int is_stale_reject(redisReply *e)
{
    const char *type = field(e, "type"), *by = field(e, "by"), *code = field(e, "code");
    return type && by && code && field(e, "worker") && !strcmp(type, "reject") && !strcmp(by, "dl_submit") &&
           !strcmp(code, "STALE");
}

/* "shard:version,..." (a STALE reject event's bases, a join event's held versions) -> a new array by shard
 * (-1: not named), each shard of the run named once at most, with a version the replay holds; NULL if not. */
static int64_t *parse_versions(const ref *r, const char *text)
{
    int64_t *v = malloc((size_t)r->rc.nshards * sizeof *v);
    for (int k = 0; k < r->rc.nshards; k++) v[k] = -1;
    for (const char *p = text; *p;) {
        char *end;
        long k = strtol(p, &end, 10);
        int ok = end != p && *end == ':' && k >= 0 && k < r->rc.nshards && v[k] < 0;
        const char *at = end + 1;
        long long b = ok ? strtoll(at, &end, 10) : -1;
        if (!ok || end == at || (*end != ',' && *end != '\0') || b < 0 ||
            b > r->lines[runconf_fragment_of_shard(&r->rc, (int)k)].nsubs) {
            free(v);
            return NULL;
        }
        v[k] = b;
        p = *end ? end + 1 : end;
    }
    return v;
}

/* The fragment whose shards, every one and no other, v names (a refused submission's bases); -1 if none. */
static int fragment_named(const ref *r, const int64_t *v)
{
    int f = -1;
    for (int k = 0; k < r->rc.nshards; k++) {
        int fk = runconf_fragment_of_shard(&r->rc, k);
        if (v[k] >= 0 && f >= 0 && fk != f) return -1;
        if (v[k] >= 0) f = fk;
    }
    for (int k = f < 0 ? 0 : r->lines[f].first; f >= 0 && k < r->lines[f].last; k++)
        if (v[k] < 0) return -1;
    return f;
}

/* Does v name every shard of the run (a registration's held versions)? */
static int names_all(const ref *r, const int64_t *v)
{
    for (int k = 0; k < r->rc.nshards; k++)
        if (v[k] < 0) return 0;
    return 1;
}

static void add_between(ref *r, between b)
{
    r->betweens = realloc(r->betweens, (size_t)(r->nbetweens + 1) * sizeof *r->betweens);
    r->betweens[r->nbetweens++] = b;
}

/* A try refused as STALE (event e, whose id is id), placed after its worker's submissions read so far. */
static int read_refusal(ref *r, const char *id, redisReply *e)
{
    const char *bases = field(e, "bases"), *worker = field(e, "worker");
    if (!bases) {
        fprintf(stderr,
                "ref_async: event %s: a submission of worker %s was refused as STALE, and the event does not "
                "record the base of each shard (`bases`: a run from before that field), so the window it trained "
                "cannot be replayed\n",
                id, worker);
        return -1;
    }
    int64_t *base = parse_versions(r, bases);
    int f = base ? fragment_named(r, base) : -1;
    if (f < 0) {
        fprintf(stderr, "ref_async: event %s: bases '%s' do not name one fragment's shards with versions of the run\n",
                id, bases);
        free(base);
        return -1;
    }
    int w = worker_index(r, worker);
    add_between(r, (between){.kind = BETWEEN_REFUSED, .worker = w, .frag = f, .before = r->w[w].read[f], .base = base});
    r->nrefusals++;
    return 0;
}

/* A join event: a worker's registration. Its first one (at its start) drops nothing; a later one needs the
 * steps it had trained and the versions it held, which dl_register records (held: every shard
 * "shard:version,...", lua/30_workers.lua). */
static int read_join(ref *r, const char *id, redisReply *e)
{
    const char *worker = field(e, "worker"), *steps = field(e, "steps"), *held = field(e, "held");
    int w = worker_index(r, worker);
    if (r->w[w].joins++ == 0 && (!steps || atoll(steps) == 0)) return 0;
    /* a new process under the same id: it held nothing (a worker evicted before its first step registers with
     * steps 0 too: a fresh trainer is the one it has, untrained, and its boundaries count from 0 either way) */
    if (steps && atoll(steps) == 0) {
        for (int f = 0; f < r->rc.nfragments; f++)
            add_between(r, (between){.kind = BETWEEN_RESTARTED, .worker = w, .frag = f, .before = r->w[w].read[f]});
        r->nrejoins++;
        return 0;
    }
    if (!steps || !held) {
        fprintf(stderr,
                "ref_async: event %s: worker %s registered again and the event does not record the steps "
                "it had trained and the versions it held (`steps`, `held`: a run from before those fields)\n",
                id, worker);
        return -1;
    }
    int64_t *base = parse_versions(r, held);
    if (!base || !names_all(r, base)) {
        fprintf(stderr,
                "ref_async: event %s: held versions '%s' do not name each shard once with a version of the run\n", id,
                held);
        free(base);
        return -1;
    }
    for (int f = 0; f < r->rc.nfragments; f++) /* (every fragment replays it in its own line; base is shared) */
        add_between(r, (between){.kind = BETWEEN_REJOINED,
                                 .worker = w,
                                 .frag = f,
                                 .before = r->w[w].read[f],
                                 .base = base,
                                 .steps = atoll(steps)});
    r->nrejoins++;
    return 0;
}

static int is_join(redisReply *e)
{
    const char *type = field(e, "type");
    return type && !strcmp(type, "join") && field(e, "worker");
}

/* A join event's `group`: the ranks of the worker's process group. Each rank trains the same copy on data of
 * its own, and the group's tokens are its ranks' sum (worker/diloco/group.c, prepare), which --weight-by
 * tokens weighs. */
static void read_ranks(ref *r, redisReply *e)
{
    const char *group = field(e, "group");
    if (group && atoi(group) > 0) r->w[worker_index(r, field(e, "worker"))].ranks = atoi(group);
}

/* A commit event of a version that applied nothing (participants 0: the submitter's incarnation was gone,
 * shard-server/commit.c, commit_on_member): marks that place of its shard's line. */
static void read_noop(ref *r, redisReply *e)
{
    const char *type = field(e, "type"), *parts = field(e, "participants"), *k = field(e, "shard"),
               *v = field(e, "version");
    if (!type || strcmp(type, "commit") || !parts || strcmp(parts, "0") || !k || !v) return;
    int shard = atoi(k);
    if (shard < 0 || shard >= r->rc.nshards) return;
    line *l = &r->lines[runconf_fragment_of_shard(&r->rc, shard)];
    int64_t s = atoll(v) - 1;
    if (s >= 0 && s < l->nsubs && !l->subs[s].noop[shard]) {
        l->subs[s].noop[shard] = 1;
        l->subs[s].noops++;
    }
}

/* Every submit event, into its fragment's line, indexed by seq; every STALE refusal, in order. */
static int read_submissions(rconn *c, const char *run, ref *r)
{
    char key[KEY_MAX];
    redisReply *x = rconn_command(c, "XRANGE %s - +", key_run(key, sizeof key, run, "events"));
    if (!x || x->type != REDIS_REPLY_ARRAY) return -1;
    make_lines(r, x);
    int rc = 0;
    for (size_t i = 0; i < x->elements && rc == 0; i++) {
        redisReply *e = x->element[i]->element[1];
        if (!r->skip_refused && is_stale_reject(e)) rc = read_refusal(r, x->element[i]->element[0]->str, e);
        if (is_join(e)) read_ranks(r, e);
        if (!r->skip_rejoins && is_join(e) && rc == 0) rc = read_join(r, x->element[i]->element[0]->str, e);
        if (!r->skip_noops) read_noop(r, e);
        if (!is_submit(e)) continue;
        int k = atoi(field(e, "shard")), f = runconf_fragment_of_shard(&r->rc, k);
        submission *s = &r->lines[f].subs[atoll(field(e, "seq"))];
        if (s->seen > 0 && strcmp(s->worker, field(e, "worker")) != 0) {
            fprintf(stderr, "ref_async: seq %s of fragment %d is %s's on one shard, %s's on shard %d\n",
                    field(e, "seq"), f, s->worker, field(e, "worker"), k);
            rc = -1;
        }
        snprintf(s->worker, sizeof s->worker, "%s", field(e, "worker"));
        s->base[k] = atoll(field(e, "base"));
        s->seen++;
        if (k == r->lines[f].first) r->w[worker_index(r, s->worker)].read[f]++;
    }
    freeReplyObject(x);
    for (int f = 0; f < r->rc.nfragments && rc == 0; f++) rc = check_line(r, f);
    return rc;
}

/* Each shard's committed version (`k:version` of dl:{R}:shards): its places from that seq on were never
 * committed there. A run at rest has committed every place, a no-op included; a run shut down can end with
 * places pending: the shutdown came between the deliveries of a submission to its owners (one applied it,
 * another's push or its retry was refused SHUTDOWN: a process group's ranks deliver their parts each,
 * worker/diloco/group.c, async_settle; seen in it_chaos_async_storm), or before any, and the places after
 * it wait on it. Such a place is marked `ended` on that shard, which keeps its committed version: nothing
 * follows it there, as a shard commits its places in order. A run not shut down with a place pending is
 * refused: replay it at rest. --apply-uncommitted: replayed as if committed everywhere. */
static int read_committed(rconn *c, const char *run, ref *r)
{
    char key[KEY_MAX];
    key_run(key, sizeof key, run, "shards");
    for (int k = 0; k < r->rc.nshards; k++) {
        redisReply *v = rconn_command(c, "HGET %s %d:version", key, k);
        int64_t committed = v && v->type == REDIS_REPLY_STRING ? atoll(v->str) : -1;
        freeReplyObject(v);
        line *l = &r->lines[runconf_fragment_of_shard(&r->rc, k)];
        if (committed < 0 || committed > l->nsubs) {
            fprintf(stderr, "ref_async: shard %d's committed version (%" PRId64 ") is not one of the %" PRId64
                    " its fragment's places made\n", k, committed, l->nsubs);
            return -1;
        }
        if (committed < l->nsubs && !r->shut_down) {
            fprintf(stderr, "ref_async: shard %d committed version %" PRId64 " of %" PRId64 " places, and run '%s' "
                    "is not shut down: replay a run at rest, every place committed\n", k, committed, l->nsubs, run);
            return -1;
        }
        for (int64_t s = committed; !r->apply_uncommitted && s < l->nsubs; s++) {
            if (l->subs[s].nended++ == 0) r->nended++;
            l->subs[s].ended[k] = 1;
        }
    }
    return 0;
}

/* Worker w's trainer of fragment f, made at its first use (its problem from the run's seed and its id). */
static trainer *trainer_of(ref *r, int w, int f)
{
    replayed *rw = &r->w[w];
    if (rw->t[f]) return rw->t[f];
    char err[128];
    quadratic_options q;
    quadratic_options_default(&q);
    q.numel = r->n;
    q.seed = r->rc.seed;
    q.worker_id = rw->id;
    q.lr = (float)r->qlr;
    rw->t[f] = quadratic_trainer_create(&q, err, sizeof err);
    if (!rw->t[f]) {
        fprintf(stderr, "ref_async: %s\n", err);
        exit(1);
    }
    return rw->t[f];
}

/* Does list ("W:N,...": --failed, --late, --twice) name worker id's try n? */
static int listed(const char *list, const char *id, int n)
{
    char want[96];
    snprintf(want, sizeof want, "%s:%d", id, n);
    size_t len = strlen(want);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : "")
        if (strncmp(p, want, len) == 0 && (p[len] == ',' || p[len] == '\0')) return 1;
    return 0;
}

/* Where a try of line l from base started: those versions, or with --async-lookahead G (and a
 * submission of the same worker and fragment before it, p) each shard ahead by c (base - p's base), c from
 * p's place and the versions in between: the worker's own computation (worker/diloco/lookahead.c), replayed. */
static void start_of(const ref *r, const line *l, const int64_t *base, int64_t p, float *start)
{
    for (int k = l->first; k < l->last; k++) {
        size_t lo = (size_t)r->rc.shard_bounds[k], len = (size_t)runconf_shard_numel(&r->rc, k);
        const float *got = l->theta[base[k]] + lo;
        if (r->rc.async_lookahead > 0 && p >= 0) {
            int64_t prev = l->subs[p].base[k];
            float c = outer_lookahead_coef(r->rc.async_lookahead, p - prev, base[k] - prev);
            outer_lookahead(start + lo, got, l->theta[prev] + lo, c, len);
        } else {
            memcpy(start + lo, got, len * sizeof(float));
        }
    }
}

static void steps(trainer *t, long long n)
{
    char err[128];
    trainer_stats st;
    for (long long i = 0; i < n; i++) t->step(t, &st, err, sizeof err);
}

/* The worker's inner steps between two boundaries: H/F (at least 1; H with one fragment). */
static long long interval(const ref *r)
{
    return r->H / r->rc.nfragments < 1 ? 1 : r->H / r->rc.nfragments;
}

/* Worker w's submission s of fragment f, on the schedule of the header: the boundary it went at (past the
 * fragment's boundaries that sent nothing: a late one's completion, failed tries), its outcome into after[f],
 * and the trainer taken there from the previous one: the steps before its params took the start (none
 * after a plain submission; the interval in flight in Streaming; until the completion of a late one), then
 * to the boundary. Returns the steps its Δ weighs: those since the fragment's previous Δ that was taken (a
 * failed try's was not; a late one's completion restarted the count). */
static long long train(ref *r, const line *l, const int64_t *base, int w, int f, trainer *t, float *start)
{
    replayed *rw = &r->w[w];
    long long F = r->rc.nfragments, I = interval(r), prev = rw->boundary[f], b, reset;
    int before = rw->after[f]; /* what the fragment's previous submission left */
    if (prev == 0) {           /* its first since origin: the fragments go in turn from rw->turn[f] */
        b = ((f - rw->turn[f]) % F + F) % F + 1, reset = 0;
    } else if (before == AFTER_LATE) { /* completed at the first of its boundaries whose try did not fail */
        long long done = prev + F;
        while (listed(r->failed, rw->id, (int)done)) done += F;
        b = done + F, reset = done * I;
    } else if (before == AFTER_TWICE) { /* the worker went on from where the late window ended */
        b = prev + F, reset = -1;
    } else {
        b = prev + F, reset = prev * I + (F > 1 ? I : 0);
    }
    b += F * rw->untaken[f]; /* (its no-op places it never knew of: tries that failed, as far as it knew) */
    rw->untaken[f] = 0;
    while (listed(r->failed, rw->id, (int)b)) b += F;
    rw->after[f] = listed(r->late, rw->id, (int)b)    ? AFTER_LATE
                   : listed(r->twice, rw->id, (int)b) ? AFTER_TWICE
                                                      : AFTER_OK;
    rw->boundary[f] = b;
    start_of(r, l, base, before == AFTER_LATE ? -1 : rw->last[f], start); /* (a late one's completion took base) */
    if (reset >= 0) {
        steps(t, reset - prev * I);
        memcpy(t->params + l->lo, start + l->lo, (l->hi - l->lo) * sizeof(float));
        steps(t, b * I - reset);
    } else {
        steps(t, (b - prev) * I);
    }
    long long counted = before == AFTER_LATE ? reset : prev * I;
    return before == AFTER_TWICE ? F * I : b * I - counted;
}

/* The servers' mean of submission s of line l (one pseudo-gradient, or its scaling: --weight-by tokens by
 * weighed / weight_ref_tokens, --staleness-weight by its weight of s - base) into r->g, from Δ in d (and
 * bf16 in d16 unless --no-bf16); with --async-rule rebase plus a (theta_s - theta_base), written out here
 * (fp32, each rounded once). */
static void outer_mean(ref *r, const line *l, int64_t s, long long weighed, const float *d, const uint16_t *d16)
{
    const submission *sub = &l->subs[s];
    float *g = r->g;
    outer_sum_zero(g + l->lo, l->hi - l->lo);
    for (int k = l->first; k < l->last; k++) {
        size_t lo = (size_t)r->rc.shard_bounds[k], len = (size_t)runconf_shard_numel(&r->rc, k);
        double w = r->rc.weight_tokens
                       ? (double)weighed / (double)(r->rc.weight_ref_tokens ? r->rc.weight_ref_tokens : 1)
                       : 1.0;
        float scale = (float)(w * outer_stale_weight(r->rc.stale_weight, s - sub->base[k], r->rc.stale_ref));
        if (runconf_weighted(&r->rc) && r->bf16)
            outer_sum_add_scaled_bf16(g + lo, d16 + lo, scale, len);
        else if (runconf_weighted(&r->rc))
            outer_sum_add_scaled_f32(g + lo, d + lo, scale, len);
        else if (r->bf16)
            outer_sum_add_bf16(g + lo, d16 + lo, len);
        else
            outer_sum_add_f32(g + lo, d + lo, len);
    }
    if (!runconf_weighted(&r->rc)) outer_mean_finish(g + l->lo, l->hi - l->lo, 1);
    for (int k = l->first; runconf_rebase(&r->rc) && k < l->last; k++) {
        size_t lo = (size_t)r->rc.shard_bounds[k], len = (size_t)runconf_shard_numel(&r->rc, k);
        const float *now = l->theta[s], *base = l->theta[sub->base[k]];
        for (size_t i = lo; i < lo + len; i++) {
            float diff = now[i] - base[i];
            float part = r->rc.rebase_fraction * diff;
            g[i] = g[i] + part;
        }
    }
}

/* A try refused as STALE: it trained its window from the bases it named, on the schedule (train), and sent
 * nothing; the worker then fetched the current versions (round.c, round_net: fetch_current) and took them at
 * the settle (params_apply with alpha 0), which clears the lookahead (params.c): its next submission starts
 * from its own base, not ahead. The tokens of the refused window are not given back, so the next Δ weighs the
 * steps since the refused try, as after a taken one. */
static void replay_refusal(ref *r, const between *x, trainer *t, float *start)
{
    train(r, &r->lines[x->frag], x->base, x->worker, x->frag, t, start);
    r->w[x->worker].last[x->frag] = -1;
}

/* A new registration (evicted, or a place of ours left without a Δ: round.c, round_rejoin, round_settle,
 * on_failure), as fragment f's line sees it: the worker had trained x->steps inner steps in all, registered
 * and took every fragment from the run at once, on its training thread. Since f's last boundary it trained on
 * (Streaming: the interval its submission was in flight), then, from f's settle on, from the versions it
 * held (ahead of them as after any taken submission), or on from where it was when that try took nothing
 * (a no-op place it never knew of: it holds that try's base still); all of it is dropped. It took the
 * versions not ahead, its tokens count anew, its AdamW state is kept, and its boundaries count from there,
 * the fragments going on in turn from the one the first boundary after the registration sends (at the
 * registration's own step nothing goes: streaming.c, stream_step): f's next submission, whose base names
 * the versions taken, trains from them until its boundary (train: a first one). */
static void replay_rejoin(ref *r, const between *x, trainer *t, float *start)
{
    replayed *rw = &r->w[x->worker];
    int f = x->frag, F = r->rc.nfragments;
    line *l = &r->lines[f];
    long long I = interval(r), at = rw->origin[f] + rw->boundary[f] * I;
    long long settle = rw->boundary[f] > 0 && F > 1 ? at + I : at; /* (plain: settled at its boundary) */
    if (x->steps < at) {
        fprintf(stderr,
                "ref_async: worker %s registered after %lld inner steps in all, fewer than the %lld it had "
                "trained: a restarted process, which this replay does not follow\n",
                rw->id, x->steps, at);
        exit(1);
    }
    int kept = rw->after[f] == AFTER_NOOP;
    for (int k = l->first; kept && k < l->last; k++) kept = x->base[k] == l->subs[rw->last[f]].base[k];
    if (x->steps > settle && !kept) {
        steps(t, settle - at);
        int ok = rw->boundary[f] > 0 && (rw->after[f] == AFTER_OK || rw->after[f] == AFTER_NOOP);
        start_of(r, l, x->base, ok ? rw->last[f] : -1, start);
        memcpy(t->params + l->lo, start + l->lo, (l->hi - l->lo) * sizeof(float));
        steps(t, x->steps - settle);
    } else {
        steps(t, x->steps - at);
    }
    long long sent = x->steps > rw->origin[f] ? (x->steps - rw->origin[f] - 1) / I : 0; /* boundaries before */
    rw->turn[f] = (int)((rw->turn[f] + sent) % F);
    rw->origin[f] = x->steps;
    rw->boundary[f] = 0;
    rw->after[f] = AFTER_OK;
    rw->last[f] = -1;
    rw->untaken[f] = 0;
}

/* A process restarted under the same id (a join with `steps` 0 after the worker's first), as fragment f's line
 * sees it: whatever the killed one trained is gone with it; the new one starts a trainer of its own (AdamW
 * state, step count), its boundaries counting from its start and its fragments from the first (streaming.c),
 * and takes the versions its first submission names as base (train: a first one). */
static void replay_restart(ref *r, const between *x)
{
    replayed *rw = &r->w[x->worker];
    int f = x->frag;
    if (rw->t[f]) rw->t[f]->destroy(rw->t[f]);
    rw->t[f] = NULL; /* (trainer_of makes the new one) */
    rw->origin[f] = 0;
    rw->boundary[f] = 0;
    rw->after[f] = AFTER_OK;
    rw->last[f] = -1;
    rw->untaken[f] = 0;
    rw->turn[f] = 0;
}

/* What worker w did between its submissions of fragment f, up to its next one (the done[f]-th): its refused
 * tries, its registrations and restarts, in the events' order. */
static void replay_between(ref *r, int f, int w, float *start)
{
    for (int i = 0; i < r->nbetweens; i++) {
        const between *x = &r->betweens[i];
        if (x->worker != w || x->frag != f || x->before != r->w[w].done[f]) continue;
        if (x->kind == BETWEEN_REFUSED)
            replay_refusal(r, x, trainer_of(r, w, f), start);
        else if (x->kind == BETWEEN_REJOINED)
            replay_rejoin(r, x, trainer_of(r, w, f), start);
        else
            replay_restart(r, x);
    }
}

/* Does worker w register again (or restart) after its n-th submission of fragment f and before its next one? */
static int rejoins_after(const ref *r, int w, int f, int64_t n)
{
    for (int i = 0; i < r->nbetweens; i++) {
        const between *x = &r->betweens[i];
        if (x->kind != BETWEEN_REFUSED && x->worker == w && x->frag == f && x->before == n) return 1;
    }
    return 0;
}

/* Does the worker of place s of line l have a later place there? (Without one, what it did after s changes
 * no version of the line.) */
static int submits_after(const line *l, int64_t s)
{
    for (int64_t n = s + 1; n < l->nsubs; n++)
        if (!strcmp(l->subs[n].worker, l->subs[s].worker)) return 1;
    return 0;
}

/* Place s of fragment f, committed as a no-op: its worker's incarnation was gone when the owner came to it,
 * so version s+1 is version s (momentum and Delayed Nesterov state as they were). (Or never committed: the
 * run was shut down first, and the line ends here, read_committed.) Its worker either never
 * knew of the place (dl_submit's reply was lost: the try failed as far as it knew, and its next submission
 * of this incarnation carries the window, async.c, round.c), or registered again before its next submission
 * (evicted with the place in hand: the window was trained and is dropped, replay_rejoin). */
static void apply_noop(ref *r, int f, int64_t s, float *start)
{
    line *l = &r->lines[f];
    const submission *sub = &l->subs[s];
    int w = worker_index(r, sub->worker);
    replay_between(r, f, w, start);
    trainer *t = trainer_of(r, w, f); /* (after: a restart makes a new one) */
    replayed *rw = &r->w[w];
    if (rejoins_after(r, w, f, rw->done[f] + 1)) {
        train(r, l, sub->base, w, f, t, start);
        rw->after[f] = AFTER_NOOP;
        rw->last[f] = s;
    } else {
        rw->untaken[f]++;
    }
    rw->done[f]++;
    l->theta[s + 1] = malloc(r->n * sizeof(float));
    memcpy(l->theta[s + 1], l->theta[s], r->n * sizeof(float));
    if (sub->noops) r->nnoops++; /* (else the run ended before any of its shards committed it) */
}

/* Submission s of fragment f: its worker trains from the versions it started from; the shard-servers apply
 * its Δ (bf16 unless told otherwise) as version s+1 of the fragment's shards (but those where it was a no-op:
 * its worker, evicted while it delivered it, registered again before its next submission and dropped the
 * window, as after a no-op of every shard). */
static void apply(ref *r, int f, int64_t s)
{
    line *l = &r->lines[f];
    const submission *sub = &l->subs[s];
    int w = worker_index(r, sub->worker);
    float *start = malloc(r->n * sizeof(float));
    if (sub->noops + sub->nended == l->last - l->first) {
        apply_noop(r, f, s, start);
        free(start);
        return;
    }
    replay_between(r, f, w, start);
    trainer *t = trainer_of(r, w, f); /* (after: a restart makes a new one) */
    if (sub->noops && !rejoins_after(r, w, f, r->w[w].done[f] + 1) && submits_after(l, s)) {
        fprintf(stderr,
                "ref_async: submission %" PRId64 " of fragment %d (%s) is a no-op on some of its shards only, "
                "and its worker did not register again before its next submission\n",
                s, f, sub->worker);
        exit(1);
    }
    long long weighed = train(r, l, sub->base, w, f, t, start) * r->w[w].ranks;
    r->w[w].last[f] = s;
    r->w[w].done[f]++;
    if (sub->noops) {
        r->w[w].after[f] = AFTER_NOOP;
        r->nnoops++;
    }
    float *d = malloc(r->n * sizeof(float));
    uint16_t *d16 = malloc(r->n * sizeof(uint16_t));
    /* Δ from where it started; a rebase run's worker measures it from its base (lookahead.c) */
    for (int k = l->first; k < l->last; k++) {
        size_t lo = (size_t)r->rc.shard_bounds[k], hi = lo + (size_t)runconf_shard_numel(&r->rc, k);
        const float *from = runconf_rebase(&r->rc) ? l->theta[sub->base[k]] : start;
        for (size_t i = lo; i < hi; i++) d[i] = from[i] - t->params[i];
    }
    if (r->bf16) bf16_encode(d + l->lo, d16 + l->lo, l->hi - l->lo);
    outer_mean(r, l, s, weighed, d, d16);
    free(d);
    free(d16);
    float *next = malloc(r->n * sizeof(float));
    memcpy(next, l->theta[s], r->n * sizeof(float));
    for (int k = l->first; k < l->last; k++) {
        size_t lo = (size_t)r->rc.shard_bounds[k], len = (size_t)runconf_shard_numel(&r->rc, k);
        if (sub->noop[k] || sub->ended[k]) continue;
        if (r->rc.dn_buffer > 0)
            outer_dn_step(r->rc.dn_variant, next + lo, r->mom + lo, r->buf + lo, r->g + lo, len,
                          runconf_dn_t0(&r->rc, k) + (uint64_t)s + 1, (uint32_t)r->rc.dn_buffer, r->lr, r->mu,
                          r->nesterov);
        else
            outer_sgd_step(next + lo, r->mom + lo, !r->has_mom[k], r->g + lo, len, r->lr, r->mu, r->nesterov);
        r->has_mom[k] = 1;
    }
    l->theta[s + 1] = next;
    free(start);
}

/* Every fragment's line, from the run's initial parameters (fragments are independent: see the header). */
static void replay(ref *r)
{
    r->mom = calloc(r->n, sizeof(float));
    r->buf = calloc(r->n, sizeof(float));
    r->g = malloc(r->n * sizeof(float));
    r->has_mom = calloc((size_t)r->rc.nshards, 1);
    for (int f = 0; f < r->rc.nfragments; f++) {
        line *l = &r->lines[f];
        l->theta[0] = malloc(r->n * sizeof(float));
        quadratic_init_params(r->rc.seed, l->theta[0], r->n);
        for (int64_t s = 0; s < l->nsubs; s++) apply(r, f, s);
    }
}

/* --trace: every version of every shard, and the worker whose submission made it. */
static void print_trace(const ref *r)
{
    for (int k = 0; k < r->rc.nshards; k++) {
        const line *l = &r->lines[runconf_fragment_of_shard(&r->rc, k)];
        for (int64_t v = 1; v <= l->nsubs; v++)
            printf("trace %d %" PRId64 " %016" PRIx64 " %s\n", k, v,
                   digest_f32(l->theta[v] + r->rc.shard_bounds[k], (size_t)runconf_shard_numel(&r->rc, k)),
                   l->subs[v - 1].worker);
    }
}

/* "replayed N submissions of W workers" (in F fragments: n0+n1+... per fragment), on stderr. */
static void say_replayed(const ref *r)
{
    int64_t total = 0;
    for (int f = 0; f < r->rc.nfragments; f++) total += r->lines[f].nsubs;
    fprintf(stderr, "ref_async: replayed %" PRId64 " submissions of %d workers", total, r->nworkers);
    for (int f = 0; r->rc.nfragments > 1 && f < r->rc.nfragments; f++)
        fprintf(stderr, "%s%" PRId64, f == 0 ? " (fragments: " : "+", r->lines[f].nsubs);
    fprintf(stderr, "%s", r->rc.nfragments > 1 ? ")" : "");
    fprintf(stderr, " and %d tries refused as STALE, %d new registrations, %d no-op places", r->nrefusals,
            r->nrejoins, r->nnoops);
    if (r->nended) fprintf(stderr, ", %d places the shutdown left uncommitted on some shards", r->nended);
    fprintf(stderr, "\n");
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ref_async --redis URL --run R --sync-every H [--quad-lr LR] [--no-bf16] [--async-rule RULE]\n"
               "                 [--async-lookahead G] [--failed W:N,...] [--late W:N,...] [--twice W:N,...]\n"
               "                 [--skip-refused] [--skip-rejoins] [--skip-noops] [--apply-uncommitted] [--trace]\n"
               "(--twice is for runs of one fragment)\n");
}

int main(int argc, char **argv)
{
    const char *url = NULL, *run = NULL, *rule = NULL;
    double ahead = -1;
    ref r = {.qlr = 0.01, .bf16 = 1};
    const opt_spec specs[] = {
        {.name = "no-bf16", .kind = OPT_CLEAR, .dest = &r.bf16},
        {.name = "redis", .kind = OPT_STRING, .dest = &url},
        {.name = "run", .kind = OPT_STRING, .dest = &run},
        {.name = "sync-every", .kind = OPT_LLONG, .dest = &r.H, .lo = 1, .hi = INT64_MAX},
        {.name = "quad-lr", .kind = OPT_DOUBLE, .dest = &r.qlr, .min = -DBL_MAX, .max = DBL_MAX},
        {.name = "async-rule", .kind = OPT_STRING, .dest = &rule},
        {.name = "async-lookahead", .kind = OPT_DOUBLE, .dest = &ahead, .min = 0, .max = ASYNC_LOOKAHEAD_MAX},
        {.name = "failed", .kind = OPT_STRING, .dest = &r.failed},
        {.name = "late", .kind = OPT_STRING, .dest = &r.late},
        {.name = "twice", .kind = OPT_STRING, .dest = &r.twice},
        {.name = "skip-refused", .kind = OPT_FLAG, .dest = &r.skip_refused},
        {.name = "skip-rejoins", .kind = OPT_FLAG, .dest = &r.skip_rejoins},
        {.name = "skip-noops", .kind = OPT_FLAG, .dest = &r.skip_noops},
        {.name = "apply-uncommitted", .kind = OPT_FLAG, .dest = &r.apply_uncommitted},
        {.name = "trace", .kind = OPT_FLAG, .dest = &r.trace},
        {0},
    };
    int prc = opts_parse_cmd("ref_async", usage, specs, argc, argv, 1, NULL, NULL);
    if (prc != 0) return opts_exit_status(prc);
    if (!url || !run || r.H <= 0) {
        usage(stderr);
        return OPTS_EXIT_USAGE;
    }
    char err[512];
    redis_url u;
    rconn *c;
    if (redis_url_parse(url, &u, err, sizeof err) < 0 || !(c = rconn_connect(&u, 5000, err, sizeof err)) ||
        runconf_load(c, run, &r.rc, err, sizeof err) < 0) {
        fprintf(stderr, "ref_async: %s\n", err);
        return 1;
    }
    if (rule != NULL && (r.rc.async_rule = outer_async_rule_parse(rule)) < 0) {
        fprintf(stderr, "ref_async: --async-rule wants plain or rebase, got '%s'\n", rule);
        return OPTS_EXIT_USAGE;
    }
    if (r.rc.nfragments > 1 && r.twice) {
        fprintf(stderr,
                "ref_async: run '%s' has %d fragments: --twice replays the old handling of a late "
                "submission, in plain async runs only\n",
                run, r.rc.nfragments);
        return OPTS_EXIT_USAGE;
    }
    if (ahead >= 0) r.rc.async_lookahead = (float)ahead;
    if (read_tunables(c, run, &r) < 0 || read_submissions(c, run, &r) < 0) {
        fprintf(stderr, "ref_async: cannot read the run's state or events\n");
        return 1;
    }
    if (read_committed(c, run, &r) < 0) return 1;
    r.n = (size_t)r.rc.numel;
    replay(&r);
    if (r.trace) print_trace(&r);
    for (int k = 0; k < r.rc.nshards; k++) {
        const line *l = &r.lines[runconf_fragment_of_shard(&r.rc, k)];
        printf("shard %d %016" PRIx64 "\n", k,
               digest_f32(l->theta[l->nsubs] + r.rc.shard_bounds[k], (size_t)runconf_shard_numel(&r.rc, k)));
    }
    say_replayed(&r);
    return 0;
}
