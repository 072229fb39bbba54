/* conn.c: the worker's side of the data plane: connections to shard-servers and the two requests,
 * push (our pseudo-gradient of one shard) and get (one shard's parameters at a version).
 *
 * One connection per server address and thread at a time (requests and replies are strictly in
 * order on a connection). A broken connection is closed and the caller retries, usually after
 * re-reading the owners from Redis: the server may have died and its lease moved. */
#include <errno.h>
#include <poll.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "format/dp_error.h"
#include "internal.h"
#include "math/codec.h"
#include "net/auth.h"
#include "net/frame.h"

#define SMALL_REPLY_CAP (BLOB_HEADER_MAX + 64)

/* *slot = t if *slot is 0 or later than t (threads of one round race here). */
static void stamp_min(uint64_t *slot, uint64_t t)
{
    uint64_t cur = __atomic_load_n(slot, __ATOMIC_RELAXED);
    while ((cur == 0 || cur > t) &&
           !__atomic_compare_exchange_n(slot, &cur, t, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}

static void stamp_max(uint64_t *slot, uint64_t t)
{
    uint64_t cur = __atomic_load_n(slot, __ATOMIC_RELAXED);
    while (cur < t && !__atomic_compare_exchange_n(slot, &cur, t, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}

/* Connecting and the handshake wait at most this long (or net_timeout_ms if shorter): a frozen server
 * accepts connections (the kernel does) but never answers; once the shard we connect for moved, less
 * (watch_lease). */
#define HANDSHAKE_MS 5000

/* How long a silent owner is waited for before its lease is looked at (await_reply, and a connect's handshake:
 * watch_lease), and how often after that; see await_reply for why not sooner. */
#define AWAIT_LEASE_FIRST_MS 1000
#define AWAIT_LEASE_POLL_MS 250

/* Whether shard's lease has another owner or epoch now than before (the owners are read again first): err says
 * so, naming what we were doing. */
static int lease_moved(diloco *d, int shard, const shard_owner *before, const char *doing, char *err, size_t errlen)
{
    shard_owner now;
    char ignore[128];
    owners_refresh(d, ignore, sizeof ignore);
    owners_get(d, shard, &now);
    if (strcmp(now.server, before->server) == 0 && now.epoch == before->epoch) return 0;
    err_set(err, errlen, "shard %d moved from %s to %s while we %s", dl_shard_id(d, shard), before->server,
            now.server[0] ? now.server : "(nobody yet)", doing);
    return 1;
}

/* What this thread's connects and frame I/O watch (frame_watch_stop): the stop, and while a connection to a
 * shard's owner is made (conn_acquire), that shard's lease (-1: none). A frozen owner (stopped; its machine hung
 * or cut off) completes a connect in its kernel and answers nothing: the handshake waited HANDSHAKE_MS, each
 * time, though its lease had moved: a worker whose confirm resent to 4 such shards waited 20 s, and another,
 * whose get had just gone to the old owner, 5 s (bench/confirm_moved --old frozen). So, as await_reply does for
 * a reply, a connect or handshake silent past AWAIT_LEASE_FIRST_MS looks at the lease every AWAIT_LEASE_POLL_MS,
 * and ends once it moved. (The transfers after it watch the stop alone: a send that waits on a slow link must
 * not take the control connection for lease looks; a reply's wait is await_reply's.) */
typedef struct lease_watch {
    diloco *d;
    int shard;
    shard_owner before;
    uint64_t look; /* the next look at the lease */
    char why[160]; /* set when the lease moved */
} lease_watch;

static _Thread_local lease_watch t_watch;

static int watch_seen(void *arg)
{
    lease_watch *w = arg;
    if (dl_stopping(w->d)) return 1;
    if (w->shard < 0 || now_ms() < w->look) return 0;
    w->look = now_ms() + AWAIT_LEASE_POLL_MS;
    return lease_moved(w->d, w->shard, &w->before, "talked to its old owner", w->why, sizeof w->why);
}

/* From here on, this thread's frame I/O (and connects) for d end when d stops, or when shard's lease moves (-1:
 * the stop alone), after 100 ms without progress: a push or get to a frozen or unreachable shard-server does not
 * hold a stopping worker for net_timeout_ms, and a connect to one (conn_acquire: with its shard) holds no worker
 * once another server took the shard. watch_stop is called at each entry below that does I/O, with its own d. */
static void watch_lease(diloco *d, int shard)
{
    t_watch = (lease_watch){.d = d, .shard = shard, .look = now_ms() + AWAIT_LEASE_FIRST_MS};
    if (shard >= 0) owners_get(d, shard, &t_watch.before);
    frame_watch_stop(watch_seen, &t_watch);
}

static void watch_stop(diloco *d)
{
    watch_lease(d, -1);
}

/* After a connect or handshake that failed: if it ended because the lease moved, err says that instead of
 * "stopped while ...". */
static void say_if_moved(char *err, size_t errlen)
{
    if (t_watch.why[0]) err_set(err, errlen, "%s", t_watch.why);
}

/* Say who we are and prove we know the run's secret (auth.h). A failure names the server and the step: "timeout
 * while receiving a frame" alone did not say that a server out of descriptors (its kernel completes the connect,
 * it cannot accept) had never answered a hello. */
static int hello(diloco *d, int fd, const char *addr, char *err, size_t errlen)
{
    int timeout = d->o.net_timeout_ms < HANDSHAKE_MS ? d->o.net_timeout_ms : HANDSHAKE_MS;
    char why[400];
    if (auth_client_hello(fd, d->rc.secret, d->worker_id, d->o.run, timeout, NULL, 0, why, sizeof why) == 0) return 0;
    err_set(err, errlen, "handshake with shard-server %s: %s%s", addr, why,
            strncmp(why, "timeout", 7) == 0 ? " (no answer to our hello: the server overloaded, frozen or out of "
                                              "descriptors? its log says)"
                                            : "");
    return -1;
}

dp_conn *conn_acquire(diloco *d, const char *addr, int shard, char *err, size_t errlen)
{
    watch_stop(d);
    dp_conn *c = NULL;
    pthread_mutex_lock(&d->conns_mu);
    for (int i = 0; i < MAX_CONNS && !c; i++)
        if (!d->conns[i].in_use && d->conns[i].fd >= 0 && strcmp(d->conns[i].addr, addr) == 0) c = &d->conns[i];
    for (int i = 0; i < MAX_CONNS && !c; i++)
        if (!d->conns[i].in_use && d->conns[i].fd < 0) c = &d->conns[i];
    if (c) c->in_use = 1;
    pthread_mutex_unlock(&d->conns_mu);
    if (!c) {
        err_set(err, errlen, "too many data-plane connections");
        return NULL;
    }
    if (c->fd >= 0) return c;
    watch_lease(d, shard); /* (a frozen owner: ends once the shard moved) */
    int fd = tcp_connect(addr, d->o.net_timeout_ms < HANDSHAKE_MS ? d->o.net_timeout_ms : HANDSHAKE_MS, err, errlen);
    if (fd >= 0 && hello(d, fd, addr, err, errlen) < 0) {
        close(fd);
        fd = -1;
    }
    if (fd < 0) say_if_moved(err, errlen);
    watch_stop(d);
    if (fd < 0) {
        conn_release(d, c, 1);
        return NULL;
    }
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    c->fd = fd;
    return c;
}

void conn_release(diloco *d, dp_conn *c, int broken)
{
    pthread_mutex_lock(&d->conns_mu);
    if (broken && c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    c->in_use = 0;
    pthread_mutex_unlock(&d->conns_mu);
}

void conn_close_all(diloco *d)
{
    for (int i = 0; i < MAX_CONNS; i++)
        if (d->conns[i].fd >= 0) {
            close(d->conns[i].fd);
            d->conns[i].fd = -1;
        }
}

/* An `err` reply: what the worker does follows the data-plane error table (common/format/dp_error.h). A code
 * the table does not know (a newer server) fails the sync with the server's message. A refusal that says
 * another process took our id (our current incarnation was replaced) ends the session instead of registering
 * again, which would take the id back from it (dl_replaced). */
static int reply_err_status(diloco *d, const blob_header *h, char *err, size_t errlen)
{
    err_set(err, errlen, "shard-server: %s %s", h->code, h->text);
    const dp_err_info *row = dp_err_lookup(h->code);
    if (row && row->action == DP_ACT_REREGISTER && dl_replaced(d, h->text)) {
        pthread_mutex_lock(&d->hb_mu);
        dl_end_told_locked(d, DILOCO_STOP_REPLACED);
        pthread_mutex_unlock(&d->hb_mu);
        return DL_FAIL;
    }
    switch (row ? row->action : DP_ACT_FAIL) {
    case DP_ACT_RETRY: return DL_RETRY;
    case DP_ACT_REFETCH: return DL_STALE;
    case DP_ACT_REREGISTER: return DL_EVICTED;
    case DP_ACT_REPAIR: /* the message names the shard and key: it is what we say */
        err_set(err, errlen, "%s", h->text);
        return DL_CORRUPT;
    case DP_ACT_FAIL: break;
    }
    return DL_FAIL;
}

/* Whether a reply says the shard has another owner now. */
static int is_moved(const blob_header *h)
{
    return strcmp(h->op, "moved") == 0;
}

/* After a pipelined batch in which some shard was answered `moved`: the owners are read again at once, so that
 * the shard's next try (fanout.c's job) goes to its new owner. Before, it went to the same one again, was told
 * `moved` again (a push: its pseudo-gradient sent twice for nothing), and only the pause after that read the
 * owners (bench/server_join --when between: 6.5 MB up instead of 4.0 in the round after the move). */
static void follow_moved(diloco *d, int moved)
{
    char ignore[128];
    if (moved) owners_refresh(d, ignore, sizeof ignore);
}

/* Map an err/moved/need/wait reply to an outcome. */
static int reply_outcome(diloco *d, const blob_header *h, char *err, size_t errlen)
{
    if (strcmp(h->op, "moved") == 0 || strcmp(h->op, "wait") == 0) {
        err_set(err, errlen, "%s: %s", h->op, h->text);
        return DL_RETRY;
    }
    if (strcmp(h->op, "need") == 0) {
        if (csv_has(h->text, d->worker_id)) return DL_NEED; /* a comma list of ids */
        err_set(err, errlen, "waiting for the pseudo-gradients of %s", h->text);
        return DL_RETRY;
    }
    if (strcmp(h->op, "err") == 0) {
        return reply_err_status(d, h, err, errlen);
    }
    err_set(err, errlen, "unexpected reply '%s' from shard-server", h->op);
    return DL_FAIL;
}

/* Wait until a reply starts arriving on fd. While the server is silent, look at the lease every
 * AWAIT_LEASE_POLL_MS: if the shard has another owner or epoch now (a frozen or partitioned server lost
 * it), give up at once instead of waiting out the whole net timeout. Every worker waits on the same
 * frozen owner, so each poll interval added to the lease ttl is a stall of the whole run. The first look
 * comes only after AWAIT_LEASE_FIRST_MS: a healthy server answers at once (it answers `wait` rather than
 * holding a request), but the answer takes a round trip and a shard's transfer to come, 300 ms and more
 * over a WAN, and a look is two Redis reads, a round trip each, under the control connection's lock that
 * the other owners' threads wait for: with the first look at 250 ms, an RTT of 300 ms made a push or get
 * phase cost 5 RTT instead of 1 (bench/shaped_round --rtts). A lease moves only once its ttl expired
 * (seconds), so a look before 1 s would find nothing anyway. 0: readable; -1 + err: give up (the caller
 * retries). */
#define AWAIT_STOP_MS 100 /* a stop (dl_stopping) is seen within this long */
static int await_reply(diloco *d, int fd, int shard, char *err, size_t errlen)
{
    shard_owner before;
    owners_get(d, shard, &before);
    uint64_t deadline = now_ms() + (uint64_t)d->o.net_timeout_ms, look = now_ms() + AWAIT_LEASE_FIRST_MS;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, AWAIT_STOP_MS);
        if (r > 0) return 0; /* data, or EOF/error: the receive says which */
        if (r < 0 && errno != EINTR) {
            err_set(err, errlen, "poll: %s", strerror(errno));
            return -1;
        }
        if (dl_stopping(d) || now_ms() > deadline) {
            err_set(err, errlen, "no reply from the owner of shard %d (%s)", dl_shard_id(d, shard),
                    dl_stopping(d) ? "stopping" : "timed out");
            return -1;
        }
        if (now_ms() < look) continue;
        look = now_ms() + AWAIT_LEASE_POLL_MS;
        if (lease_moved(d, shard, &before, "waited for a reply", err, errlen)) return -1;
    }
}

/* Connect to the shard's owner. DL_RETRY when it has none or cannot be reached. */
static int owner_conn(diloco *d, int shard, dp_conn **out, char *err, size_t errlen)
{
    shard_owner o;
    owners_get(d, shard, &o);
    if (o.addr[0] == '\0') {
        err_set(err, errlen, "shard %d has no live owner yet: is a shard-server of this run up?",
                dl_shard_id(d, shard));
        return DL_RETRY;
    }
    *out = conn_acquire(d, o.addr, shard, err, errlen);
    return *out ? DL_OK : DL_RETRY;
}

/* The push request of one shard: header and where its payload (our Δ) lives. */
static void push_request(diloco *d, int shard, int64_t round, blob_header *h, const void **payload, size_t *plen)
{
    size_t n = (size_t)runconf_shard_numel(&d->rc, shard);
    blob_header_init(h, "push");
    h->shard = dl_shard_id(d, shard); /* the run's number (a sharded rank's own differs) */
    h->round = round;
    h->frag = runconf_fragment_of_shard(&d->rc, shard);
    h->inc = dl_inc(d);
    snprintf(h->worker, sizeof h->worker, "%s", d->worker_id);
    h->count = n;
    if (d->rc.weight_tokens) /* --weight-by tokens: the tokens behind this pseudo-gradient */
        h->aux = (int64_t)d->push_tokens[h->frag];
    h->xxh = d->delta_xxh[shard]; /* computed with Δ (dl_delta_compute) */
    h->dtype = d->push_dtype;
    *payload = dl_delta_shard(d, shard, plen);
    if (h->dtype == BLOB_TOPK) h->count = *plen; /* a sparse payload is counted in bytes */
}

int conn_push_batch(diloco *d, const int *shards, int count, int64_t round, int *rcs, char *err, size_t errlen)
{
    watch_stop(d);
    for (int i = 0; i < count; i++) rcs[i] = DL_RETRY;
    dp_conn *c;
    int rc = owner_conn(d, shards[0], &c, err, errlen);
    if (rc != DL_OK) return rc;
    int sent = 0, broken = 0;
    size_t bytes[RUNCONF_MAX_SHARDS];
    stamp_min(&dl_round_info(d)->t_first_send_us, wall_us());
    for (; sent < count; sent++) {
        blob_header h;
        const void *payload;
        push_request(d, shards[sent], round, &h, &payload, &bytes[sent]);
        if (frame_send_hashed(c->fd, &h, payload, bytes[sent], d->o.net_timeout_ms, err, errlen) < 0) {
            broken = 1;
            break;
        }
        __atomic_add_fetch(&dl_round_info(d)->bytes_up, bytes[sent], __ATOMIC_RELAXED);
    }
    int worst = DL_OK, moved = 0;
    for (int i = 0; i < sent && !broken; i++) {
        blob_header h;
        uint8_t buf[SMALL_REPLY_CAP];
        const uint8_t *rp;
        size_t rlen;
        if (await_reply(d, c->fd, shards[i], err, errlen) < 0 ||
            frame_recv(c->fd, buf, sizeof buf, &h, &rp, &rlen, d->o.net_timeout_ms, err, errlen) < 0) {
            broken = 1;
            break;
        }
        if (strcmp(h.op, "ack") == 0) {
            rcs[i] = DL_OK;
        } else {
            char why[256] = "";
            moved |= is_moved(&h);
            rcs[i] = reply_outcome(d, &h, why, sizeof why);
            if (worst == DL_OK || rcs[i] == DL_CORRUPT)
                err_set(err, errlen, "%s", why); /* corrupt: an operator's job */
            worst = DL_RETRY;
        }
    }
    conn_release(d, c, broken);
    follow_moved(d, moved);
    return broken ? DL_RETRY : worst;
}

int conn_push(diloco *d, int shard, int64_t round, char *err, size_t errlen)
{
    watch_stop(d);
    dp_conn *c;
    int rc = owner_conn(d, shard, &c, err, errlen);
    if (rc != DL_OK) return rc;
    blob_header h;
    const void *payload;
    size_t plen;
    push_request(d, shard, round, &h, &payload, &plen);
    uint8_t buf[SMALL_REPLY_CAP];
    const uint8_t *rp;
    size_t rlen;
    stamp_min(&dl_round_info(d)->t_first_send_us, wall_us());
    if (frame_send_hashed(c->fd, &h, payload, plen, d->o.net_timeout_ms, err, errlen) < 0) {
        conn_release(d, c, 1);
        return DL_RETRY;
    }
    __atomic_add_fetch(&dl_round_info(d)->bytes_up, plen, __ATOMIC_RELAXED); /* sent, whatever the reply says */
    if (await_reply(d, c->fd, shard, err, errlen) < 0 ||
        frame_recv(c->fd, buf, sizeof buf, &h, &rp, &rlen, d->o.net_timeout_ms, err, errlen) < 0) {
        conn_release(d, c, 1);
        return DL_RETRY;
    }
    conn_release(d, c, 0);
    if (strcmp(h.op, "ack") == 0) return DL_OK;
    return reply_outcome(d, &h, err, errlen);
}

typedef struct place_arg {
    diloco *d;
    int shard;
    int64_t min_version;
} place_arg;

/* A params reply of the shard we asked for is received straight into base. If the receive then fails,
 * base[shard] holds garbage, which is safe: the get is retried (or, if the sync fails, the shard is
 * fetched again before it is used: every failure path ends in a fetch), and nothing is sent from
 * base[shard] meanwhile. */
static void *place_params(const blob_header *h, size_t plen, void *p)
{
    place_arg *a = p;
    void *upd = dl_update_place(a->d, a->shard, h, plen); /* --download update: elsewhere */
    if (upd) return upd;
    size_t off = (size_t)a->d->rc.shard_bounds[a->shard], n = (size_t)runconf_shard_numel(&a->d->rc, a->shard);
    if (strcmp(h->op, "params") != 0 || h->dtype != BLOB_F32 || h->count != n || plen != n * sizeof(float) ||
        h->shard != dl_shard_id(a->d, a->shard) || h->version < a->min_version)
        return NULL;
    a->d->tent_version[a->shard] = -1; /* until take_params: a broken receive leaves garbage */
    dl_dev_base_written(a->d, a->shard);
    return a->d->base + off;
}

/* A received shard of version h->version with the digest xxh is in base: remember whether it is durable
 * yet, and account for it. */
static int took_version(diloco *d, int shard, const blob_header *h, int tentative, uint64_t xxh, size_t plen,
                        int64_t *got)
{
    d->tent_version[shard] = tentative ? h->version : 0;
    d->tent_xxh[shard] = xxh;
    d->tent_epoch[shard] = h->epoch;
    stamp_max(&dl_round_info(d)->t_last_recv_us, wall_us());
    *got = h->version;
    __atomic_add_fetch(&dl_round_info(d)->bytes_down, plen, __ATOMIC_RELAXED);
    return DL_OK;
}

/* --download update: apply an update reply (the round's averaged pseudo-gradient) ourselves. */
static int take_update(diloco *d, int shard, const blob_header *h, const uint8_t *payload, size_t plen,
                       int64_t min_version, int64_t *got, char *err, size_t errlen)
{
    size_t n = (size_t)runconf_shard_numel(&d->rc, shard);
    if (!d->rc.download_update || !dl_update_fits(d, n, h, payload, plen) || h->shard != dl_shard_id(d, shard) ||
        h->version != min_version) {
        err_set(err, errlen, "bad update reply for shard %d (dtype %d, count %" PRIu64 ", version %" PRId64 ")",
                dl_shard_id(d, shard), h->dtype, h->count, h->version);
        return DL_FAIL;
    }
    uint64_t digest;
    int rc = dl_update_apply(d, shard, h, payload, &digest, err, errlen);
    if (rc != DL_OK) return rc;
    return took_version(d, shard, h, (h->flags & BLOB_UPDATE_TENTATIVE) != 0, digest, plen, got);
}

/* Check a params reply and copy it into base (unless it was received there); with --download update,
 * parameters then momentum. */
static int take_params(diloco *d, int shard, const blob_header *h, const uint8_t *payload, size_t plen,
                       int64_t min_version, int64_t *got, char *err, size_t errlen)
{
    size_t off = (size_t)d->rc.shard_bounds[shard], n = (size_t)runconf_shard_numel(&d->rc, shard);
    int with_mom = d->rc.download_update && (h->flags & BLOB_PARAMS_MOMENTUM);
    size_t count = with_mom ? 2 * n : n;
    if (h->dtype != BLOB_F32 || h->count != count || plen != count * sizeof(float) ||
        h->shard != dl_shard_id(d, shard) || h->version < min_version) {
        err_set(err, errlen, "bad params reply for shard %d (dtype %d, count %" PRIu64 ", version %" PRId64 ")",
                dl_shard_id(d, shard), h->dtype, h->count, h->version);
        return DL_FAIL;
    }
    if (with_mom) {
        dl_update_take_momentum(d, shard, h->version, payload);
        return took_version(d, shard, h, 0, strtoull(h->text, NULL, 16), plen, got);
    }
    if ((const void *)payload != (const void *)(d->base + off)) {
        dl_dev_base_written(d, shard);
        memcpy(d->base + off, payload, plen);
    }
    if (d->rc.download_update) d->mom_version[shard] = -1; /* parameters without momentum */
    return took_version(d, shard, h, (h->flags & BLOB_PARAMS_TENTATIVE) != 0, h->xxh, plen, got);
}

int conn_get(diloco *d, int shard, int64_t min_version, int flags, int64_t *got, char *err, size_t errlen)
{
    watch_stop(d);
    dp_conn *c;
    int rc = owner_conn(d, shard, &c, err, errlen);
    if (rc != DL_OK) return rc;
    blob_header h;
    blob_header_init(&h, "get");
    h.shard = dl_shard_id(d, shard);
    h.version = min_version;
    h.flags = dl_update_get_flags(d, shard, min_version, flags);
    h.inc = dl_inc(d);
    snprintf(h.worker, sizeof h.worker, "%s", d->worker_id);
    /* small replies land in buf, the parameters straight in base */
    uint8_t buf[SMALL_REPLY_CAP];
    place_arg pa = {d, shard, min_version};
    const uint8_t *payload;
    size_t plen;
    if (frame_send(c->fd, &h, NULL, 0, d->o.net_timeout_ms, err, errlen) < 0 ||
        await_reply(d, c->fd, shard, err, errlen) < 0 ||
        frame_recv_place(c->fd, buf, sizeof buf, d->recv_cap, place_params, &pa, &h, &payload, &plen,
                         d->o.net_timeout_ms, err, errlen) < 0) {
        conn_release(d, c, 1);
        return DL_RETRY;
    }
    conn_release(d, c, 0);
    if (strcmp(h.op, "params") == 0)
        rc = take_params(d, shard, &h, payload, plen, min_version, got, err, errlen);
    else if (strcmp(h.op, "update") == 0)
        rc = take_update(d, shard, &h, payload, plen, min_version, got, err, errlen);
    else
        rc = reply_outcome(d, &h, err, errlen);
    if (rc == DL_NEED) *got = h.round; /* the round whose Δ of ours the owner lacks (-1: not said) */
    return rc;
}

int conn_get_batch_send(diloco *d, const int *shards, int count, int64_t min_version, int flags, dp_conn **out,
                        char *err, size_t errlen)
{
    watch_stop(d);
    dp_conn *c;
    *out = NULL;
    int rc = owner_conn(d, shards[0], &c, err, errlen);
    if (rc != DL_OK) return rc;
    for (int sent = 0; sent < count; sent++) {
        blob_header h;
        blob_header_init(&h, "get");
        h.shard = dl_shard_id(d, shards[sent]);
        h.version = min_version;
        h.flags = dl_update_get_flags(d, shards[sent], min_version, flags);
        h.inc = dl_inc(d);
        snprintf(h.worker, sizeof h.worker, "%s", d->worker_id);
        if (frame_send(c->fd, &h, NULL, 0, d->o.net_timeout_ms, err, errlen) < 0) {
            conn_release(d, c, 1);
            return DL_RETRY;
        }
    }
    *out = c;
    return DL_OK;
}

int conn_get_batch_recv(diloco *d, dp_conn *c, const int *shards, int count, int64_t min_version, int *rcs,
                        int64_t *got, char *err, size_t errlen)
{
    watch_stop(d);
    for (int i = 0; i < count; i++) rcs[i] = DL_RETRY;
    int worst = DL_OK, broken = 0, moved = 0;
    for (int i = 0; i < count && !broken; i++) {
        blob_header h;
        uint8_t buf[SMALL_REPLY_CAP];
        place_arg pa = {d, shards[i], min_version};
        const uint8_t *payload;
        size_t plen;
        if (await_reply(d, c->fd, shards[i], err, errlen) < 0 ||
            frame_recv_place(c->fd, buf, sizeof buf, d->recv_cap, place_params, &pa, &h, &payload, &plen,
                             d->o.net_timeout_ms, err, errlen) < 0) {
            broken = 1;
            break;
        }
        char why[256] = "";
        if (strcmp(h.op, "params") == 0)
            rcs[i] = take_params(d, shards[i], &h, payload, plen, min_version, &got[i], why, sizeof why);
        else if (strcmp(h.op, "update") == 0)
            rcs[i] = take_update(d, shards[i], &h, payload, plen, min_version, &got[i], why, sizeof why);
        else
            rcs[i] = reply_outcome(d, &h, why, sizeof why);
        moved |= is_moved(&h);
        if (rcs[i] != DL_OK && (worst == DL_OK || rcs[i] == DL_CORRUPT)) { /* corrupt: an operator's job */
            err_set(err, errlen, "%s", why);
            worst = DL_RETRY;
        }
    }
    conn_release(d, c, broken);
    follow_moved(d, moved);
    return broken ? DL_RETRY : worst;
}

int conn_get_batch(diloco *d, const int *shards, int count, int64_t min_version, int flags, int *rcs, int64_t *got,
                   char *err, size_t errlen)
{
    dp_conn *c;
    int rc = conn_get_batch_send(d, shards, count, min_version, flags, &c, err, errlen);
    if (rc != DL_OK) {
        for (int i = 0; i < count; i++) rcs[i] = DL_RETRY;
        return rc;
    }
    return conn_get_batch_recv(d, c, shards, count, min_version, rcs, got, err, errlen);
}
