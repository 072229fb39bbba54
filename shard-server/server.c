/*
 * server.c: the data-plane listener and its connections.
 *
 * A frame is a u32 little-endian length L followed by L bytes of blob (msgpack header + raw payload,
 * common/format/blob.h). Requests on one connection are answered strictly in order, so a connection handles
 * one request at a time: while a request waits (for Redis, for a shard to load, for a commit) the
 * connection reads no further frame. A frame longer than the largest legal blob is refused from its
 * length prefix alone (the payload is never buffered) and the connection is closed after the reply.
 * A connection that closes while its request is parked is freed when that request is.
 * Peers that hold a connection without using it are closed (peer_timeout_ms, --peer-timeout): one that has
 * not said hello (and proved the secret) within HELLO_TIMEOUT_MS of connecting, one that sends part of a
 * frame and not the rest (every frame, small or read straight into its buffer, is whole within the timeout of
 * its first byte, so a frame sent a byte at a time ends too: a worker gives up on a frame after its own net
 * timeout, 60 s as this one), and one that does not read its replies (libevent's write timeout). A connection
 * between requests is never closed: a worker keeps its connections open between rounds. One log line says so,
 * then at most one a minute. One closed after a refusal first drops what the peer still sends (conn_linger).
 * What a connection makes the server hold is bounded: its input by READ_HIGH_WATER (libevent stops reading the
 * socket there; the peer's own sends then wait), its replies by WRITE_HIGH_WATER and one more (no frame is
 * taken beyond it), a frame by the largest legal blob, and before the handshake by BLOB_HEADER_MAX (a peer
 * without the secret made the server read a frame of the largest shard's size per connection before it was
 * refused), and a peer without the secret gets one refusal per connection.
 * Requests go up to the dispatcher (ops.c) through ss->dispatch, which ctx.c sets; refusals (req_reject:
 * counted, logged, recorded with dl_reject) are made here, so the transport calls nothing above it.
 */
#include "ss.h"

#include "net/accept_guard.h"
#include "net/auth.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "base/log.h"
#include "base/util.h"

#define SOCKET_IO_CHUNK (4u << 20) /* bytes libevent may move per read/write call */
/* A frame at least this long is received straight from the socket into its own buffer (the bufferevent
 * stops reading meanwhile), instead of through the bufferevent's input and a copy out of it. */
#define DIRECT_MIN_FRAME (256u << 10)
/* A connection's input holds at most this many bytes: libevent stops reading it there, until a frame is taken out.
 * While a request is under way the connection reads no frame, so without it a peer that goes on sending (frames
 * pipelined behind a request that waits, or just bytes) grew the input for as long as it sent. A frame shorter
 * than DIRECT_MIN_FRAME must fit in it whole (a longer one is read into its own buffer). */
#define READ_HIGH_WATER (1u << 20)
_Static_assert(READ_HIGH_WATER >= 4 + DIRECT_MIN_FRAME, "a buffered frame must fit under the read high-watermark");
/* A connection whose replies wait to be sent beyond this takes no further frame until they go (the write callback
 * runs again below it, bufferevent_setwatermark). A peer that sent gets and read their replies a byte at a time
 * (the write timeout never ended it) had each answered and queued: the server grew ~100 MB a second. Enough
 * for a worker's pipelined gets to keep the connection busy: its next get is taken while this much of the
 * replies before it is still to go. */
#define WRITE_HIGH_WATER (16u << 20)
/* A new connection says hello (and answers the challenge) within this long, or the timeout if shorter: twice
 * the worker's own wait for the handshake (worker/diloco/conn.c HANDSHAKE_MS). */
#define HELLO_TIMEOUT_MS 10000
#define PEER_LOG_MS 60000 /* one line about peers closed for their silence, then at most one per this */
/* Refusals logged and recorded one by one (req_reject): this many at once, then REJECT_PER_S a second; the rest are
 * counted (rejections_total) and said in one line a minute. A peer that knew the secret and pipelined refused
 * requests had each logged and recorded: 20000 in 0.3 s from one connection, dl:{R}:events (capped) wiped. */
#define REJECT_BURST 100
#define REJECT_PER_S 10
#define LINGER_MS 2000    /* a connection closed after a refusal reads and drops what still comes this long */

typedef struct ss_conn {
    ss_ctx *ss;
    struct ss_conn *prev, *next; /* in ss->conns */
    struct bufferevent *bev;
    struct event *resume; /* deferred "read the next frame" */
    char peer[80];
    char worker[64];                /* from hello */
    char nonce[AUTH_NONCE_LEN + 1]; /* our challenge to this connection */
    int authed;                     /* proved the run secret (or the run has none) */
    int busy;                       /* a request is in progress */
    int closed;                     /* bev gone; freed when not busy */
    int close_after_flush;
    int lingering;          /* its last reply sent: dropping what the peer still sends (conn_linger) */
    unsigned long frames;   /* frames received */
    struct event *deadline; /* the hello, or the frame being received, is late (conn_on_deadline) */
    int deadline_for;       /* what deadline waits for: DEADLINE_* */
    struct event *direct;   /* read event of a frame being received directly */
    uint8_t *dbuf;        /* that frame */
    size_t dlen, dgot;
} ss_conn;

enum { DEADLINE_NONE, DEADLINE_HELLO, DEADLINE_FRAME, DEADLINE_LINGER };

static void conn_process(ss_conn *c);

static void conn_free(ss_conn *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else if (c->ss->conns == c)
        c->ss->conns = c->next;
    if (c->next != NULL) c->next->prev = c->prev;
    if (c->direct != NULL) event_free(c->direct);
    if (c->deadline != NULL) event_free(c->deadline);
    free(c->dbuf);
    if (c->bev != NULL) bufferevent_free(c->bev);
    if (c->resume != NULL) event_free(c->resume);
    free(c);
}

/* Close the socket now; the struct lives on while a request references it. */
static void conn_close(ss_conn *c, const char *why)
{
    if (c->closed) return;
    log_debug("connection %s (%s) closed: %s", c->peer, c->worker[0] ? c->worker : "-", why);
    c->closed = 1;
    if (c->direct != NULL) event_del(c->direct); /* before its fd goes away with the bufferevent */
    if (c->deadline != NULL) event_del(c->deadline);
    if (c->bev != NULL) {
        bufferevent_free(c->bev);
        c->bev = NULL;
    }
    if (!c->busy) conn_free(c);
}

int req_conn_alive(const ss_req *req)
{
    return req->conn != NULL && !req->conn->closed;
}

void req_free(ss_req *req)
{
    ss_conn *c = req->conn;
    free(req->frame);
    free(req);
    if (c == NULL) return;
    c->busy = 0;
    if (c->closed) {
        conn_free(c);
        return;
    }
    event_active(c->resume, EV_READ, 0);
}

/* ---------------------------------------------------------------------------------------------- */
/* payloads sent by reference: a buffer queued in a connection's output is freed only once every
 * connection has sent it (parameters are never changed in place, only replaced) */

typedef struct ss_pin {
    struct ss_pin *next;
    void *p;
    int refs;
    int release; /* the owner let go: free at the last reference */
} ss_pin;

static ss_pin *g_pins;

static ss_pin *pin_find(const void *p)
{
    for (ss_pin *pn = g_pins; pn != NULL; pn = pn->next)
        if (pn->p == p) return pn;
    return NULL;
}

static ss_pin *pin_get(void *p)
{
    ss_pin *pn = pin_find(p);
    if (pn == NULL) {
        pn = calloc(1, sizeof *pn);
        if (pn == NULL) return NULL;
        pn->p = p;
        pn->next = g_pins;
        g_pins = pn;
    }
    pn->refs++;
    return pn;
}

static void pin_unlink_free(ss_pin *pn)
{
    for (ss_pin **pp = &g_pins; *pp != NULL; pp = &(*pp)->next)
        if (*pp == pn) {
            *pp = pn->next;
            break;
        }
    if (pn->release) free(pn->p);
    free(pn);
}

static void pin_on_sent(const void *data, size_t len, void *extra)
{
    (void)data;
    (void)len;
    ss_pin *pn = extra;
    if (--pn->refs == 0) {
        log_debug("a parameter buffer is sent");
        pin_unlink_free(pn);
    }
}

int server_bufs_in_flight(void)
{
    int n = 0;
    for (ss_pin *pn = g_pins; pn != NULL; pn = pn->next) n += pn->refs > 0;
    return n;
}

void server_buf_release(void *p)
{
    if (p == NULL) return;
    ss_pin *pn = pin_find(p);
    if (pn == NULL)
        free(p);
    else
        pn->release = 1;
}

/* Write one frame: length prefix, header, payload (copied, or by reference when byref: the payload is
 * then a buffer released with server_buf_release, and h->xxh already holds its checksum). Returns bytes
 * queued, 0 on failure. */
static size_t conn_send(ss_conn *c, blob_header *h, const void *payload, size_t len, int byref)
{
    uint8_t hdr[BLOB_HEADER_MAX];
    char err[256];
    int hlen = byref ? blob_encode_header_hashed(h, len, hdr, sizeof hdr, err, sizeof err)
                     : blob_encode_header(h, payload, len, hdr, sizeof hdr, err, sizeof err);
    if (hlen < 0) {
        log_error("cannot encode a '%s' reply: %s", h->op, err);
        return 0;
    }
    uint32_t total = (uint32_t)((size_t)hlen + len);
    uint8_t prefix[4] = {(uint8_t)total, (uint8_t)(total >> 8), (uint8_t)(total >> 16), (uint8_t)(total >> 24)};
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (evbuffer_add(out, prefix, 4) != 0 || evbuffer_add(out, hdr, (size_t)hlen) != 0) {
        log_error("connection %s: out of memory queueing a reply", c->peer);
        return 0;
    }
    if (len > 0 && byref) {
        ss_pin *pn = pin_get((void *)payload);
        if (pn == NULL || evbuffer_add_reference(out, payload, len, pin_on_sent, pn) != 0) {
            if (pn != NULL && --pn->refs == 0) pin_unlink_free(pn);
            log_error("connection %s: out of memory queueing a reply", c->peer);
            return 0;
        }
    } else if (len > 0 && evbuffer_add(out, payload, len) != 0) {
        log_error("connection %s: out of memory queueing a reply", c->peer);
        return 0;
    }
    return 4 + (size_t)total;
}

static void reply(ss_req *req, blob_header *h, const void *payload, size_t len, int byref)
{
    ss_conn *c = req->conn;
    if (c != NULL && !c->closed) {
        size_t sent = conn_send(c, h, payload, len, byref);
        c->ss->m.bytes_out += sent;
        if (sent == 0) c->close_after_flush = 1;
    }
    if (req->on_reply != NULL) req->on_reply(req, h, payload, len);
    req_free(req);
}

void req_reply(ss_req *req, blob_header *h, const void *payload, size_t len)
{
    reply(req, h, payload, len, 0);
}

void req_reply_buf(ss_req *req, blob_header *h, void *buf, size_t len)
{
    reply(req, h, buf, len, 1);
}

void req_reply_simple(ss_req *req, const char *op, const char *text)
{
    blob_header h;
    blob_header_init(&h, op);
    h.shard = req->h.shard;
    if (text != NULL) snprintf(h.text, sizeof h.text, "%s", text);
    req_reply(req, &h, NULL, 0);
}

void req_reply_err(ss_req *req, dp_err code, const char *fmt, ...)
{
    blob_header h;
    blob_header_init(&h, "err");
    h.shard = req->h.shard;
    h.round = req->h.round;
    snprintf(h.code, sizeof h.code, "%s", dp_err_code(code));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h.text, sizeof h.text, fmt, ap);
    va_end(ap);
    req_reply(req, &h, NULL, 0);
}

/* Record a rejection in dl:{R}:events (fire and forget: the reply does not wait for it). */
static void record_reject(ss_ctx *ss, const ss_req *req, const char *code, const char *msg)
{
    char shard[24], round[24];
    snprintf(shard, sizeof shard, "%lld", (long long)req->h.shard);
    snprintf(round, sizeof round, "%lld", (long long)req->h.round);
    const char *args[6] = {ss->id, req->h.worker, code, msg, shard, round};
    if (store_fcall(ss, NULL, NULL, "dl_reject", 6, args) != 0)
        log_warn("cannot record rejection %s in Redis (not connected)", code);
}

static double g_reject_tokens = REJECT_BURST;
static uint64_t g_reject_ms;       /* when the tokens were last counted (0: never) */
static uint64_t g_quiet_logged_ms; /* when the last line about refusals left out was written */
static unsigned long g_quiet;      /* refusals left out since */

/* Whether this refusal is logged and recorded (REJECT_BURST, REJECT_PER_S). The first one left out says so in a
 * line, then at most one a minute, with how many were left out since the line before (g_quiet). */
static int reject_recorded(void)
{
    uint64_t now = now_ms();
    if (g_reject_ms != 0) g_reject_tokens += (double)(now - g_reject_ms) * REJECT_PER_S / 1000.0;
    if (g_reject_tokens > REJECT_BURST) g_reject_tokens = REJECT_BURST;
    g_reject_ms = now;
    if (g_reject_tokens >= 1) {
        g_reject_tokens -= 1;
        return 1;
    }
    if (g_quiet_logged_ms != 0 && now - g_quiet_logged_ms < PEER_LOG_MS) {
        g_quiet++;
        return 0;
    }
    char more[96] = "";
    if (g_quiet > 0)
        snprintf(more, sizeof more, " (%lu left out since the last line, %llu s ago)", g_quiet,
                 (unsigned long long)(now - g_quiet_logged_ms) / 1000);
    log_warn("refusals beyond %d at once or %d a second are counted (rejections_total) but not logged or recorded in "
             "dl:{R}:events one by one%s: a client in a loop? At most one line a minute about these",
             REJECT_BURST, REJECT_PER_S, more);
    g_quiet_logged_ms = now;
    g_quiet = 0;
    return 0;
}

void req_reject(ss_ctx *ss, ss_req *req, dp_err code, const char *fmt, ...)
{
    /* A peer that has not proved the secret gets one refusal per connection: each is logged and recorded in
     * Redis, and such a peer pipelining malformed frames had every one of them recorded (dl:{R}:events is
     * capped: the run's history pushed out). */
    if (req->conn != NULL && !req->conn->authed) req->conn->close_after_flush = 1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ss->m.rejections++;
    if (reject_recorded()) {
        log_warn("rejected %s from %s (shard %lld round %lld): %s %s", req->h.op,
                 req->h.worker[0] ? req->h.worker : "?", (long long)req->h.shard, (long long)req->h.round,
                 dp_err_code(code), msg);
        record_reject(ss, req, dp_err_code(code), msg);
    }
    req_reply_err(req, code, "%s", msg);
}

/* A connection that broke the handshake: answer, record, close. */
static void refuse_auth(ss_ctx *ss, ss_req *req, const char *fmt, const char *detail)
{
    req->conn->close_after_flush = 1;
    req_reject(ss, req, DP_AUTH, fmt, detail);
}

/* hello: check the run name, remember the worker id; then challenge it to prove the run secret
 * (auth.h), or, for a run without a secret, answer with our id at once. */
static void op_hello(ss_ctx *ss, ss_req *req)
{
    if (strcmp(req->h.text, ss->opts.run) != 0) {
        req_reject(ss, req, DP_BADRUN, "this shard-server serves run '%s', not '%s'", ss->opts.run, req->h.text);
        return;
    }
    snprintf(req->conn->worker, sizeof req->conn->worker, "%s", req->h.worker);
    if (ss->rc.secret[0] == '\0') {
        req->conn->authed = 1;
        req_reply_simple(req, "ack", ss->id);
        return;
    }
    if (auth_nonce(req->conn->nonce) != 0) {
        req_reply_err(req, DP_BUSY, "cannot make a challenge (no randomness)");
        return;
    }
    req->conn->authed = 0;
    req_reply_simple(req, "challenge", req->conn->nonce);
}

/* auth: the answer to our challenge. */
static void op_auth(ss_ctx *ss, ss_req *req)
{
    ss_conn *c = req->conn;
    if (c->nonce[0] == '\0') {
        refuse_auth(ss, req, "%s", "auth without a challenge: send hello first");
        return;
    }
    int ok = auth_check(ss->rc.secret, c->nonce, c->worker, ss->opts.run, req->h.text) == 0;
    c->nonce[0] = '\0'; /* one answer per challenge */
    if (!ok) {
        refuse_auth(ss, req,
                    "worker %s does not know the run's secret; read it from Redis (coordinator init "
                    "created it) or ask the operator for access",
                    c->worker);
        return;
    }
    c->authed = 1;
    req_reply_simple(req, "ack", ss->id);
}

int req_take_frame(ss_req *req, uint8_t *frame, size_t len, char *err, size_t errlen)
{
    req->frame = frame;
    req->frame_len = len;
    size_t hlen = 0;
    if (blob_decode_header(frame, len, &req->h, &hlen, err, errlen) != 0) return -1;
    uint8_t *payload = frame + hlen;
    size_t shift = (FRAME_PAYLOAD_ALIGN - (uintptr_t)payload % FRAME_PAYLOAD_ALIGN) % FRAME_PAYLOAD_ALIGN;
    if (shift != 0 && len > hlen) memmove(payload + shift, payload, len - hlen);
    req->payload = payload + shift;
    req->payload_len = len - hlen;
    return 0;
}

/* Hand a complete frame to its handler. The request owns the frame from here on. */
static void conn_dispatch(ss_conn *c, uint8_t *frame, size_t len)
{
    ss_ctx *ss = c->ss;
    ss_req *req = calloc(1, sizeof *req);
    if (req == NULL) {
        free(frame);
        conn_close(c, "out of memory");
        return;
    }
    req->conn = c;
    c->busy = 1;
    c->frames++;
    char err[256];
    if (req_take_frame(req, frame, len, err, sizeof err) != 0) {
        blob_header_init(&req->h, "?");
        snprintf(req->h.worker, sizeof req->h.worker, "%s", c->worker);
        req_reject(ss, req, DP_BADFRAME, "malformed blob header from %s: %s", c->peer, err);
        return;
    }
    if (strcmp(req->h.op, "hello") == 0)
        op_hello(ss, req);
    else if (strcmp(req->h.op, "auth") == 0)
        op_auth(ss, req);
    else if (!c->authed)
        refuse_auth(ss, req, "%s", "say hello and prove the run's secret before anything else");
    else
        ss->dispatch(ss, req);
}

/* The longest frame c may send now: before the handshake, a hello or an auth (a header, no payload). */
static size_t conn_max_frame(const ss_conn *c)
{
    return c->authed ? c->ss->max_frame : BLOB_HEADER_MAX;
}

/* Refuse a frame whose length prefix is impossible: reply, record, close without reading it. */
static void conn_refuse_oversize(ss_conn *c, uint32_t flen)
{
    ss_ctx *ss = c->ss;
    ss_req *req = calloc(1, sizeof *req);
    if (req == NULL) {
        conn_close(c, "out of memory");
        return;
    }
    req->conn = c;
    c->busy = 1;
    blob_header_init(&req->h, "?");
    snprintf(req->h.worker, sizeof req->h.worker, "%s", c->worker);
    c->close_after_flush = 1;
    bufferevent_disable(c->bev, EV_READ);
    if (c->authed)
        req_reject(ss, req, DP_BADSIZE, "frame of %u bytes from %s exceeds the largest legal blob (%zu bytes); closing",
                   flen, c->peer, ss->max_frame);
    else
        req_reject(ss, req, DP_AUTH,
                   "frame of %u bytes from %s before the handshake (a hello or auth frame is at most %d bytes): say "
                   "hello and prove the run's secret first; closing",
                   flen, c->peer, BLOB_HEADER_MAX);
}

/* ---------------------------------------------------------------------------------------------- */
/* peers that hold a connection without using it */

static uint64_t g_peer_logged_ms; /* when the last line about them was written (0: never) */
static unsigned long g_peer_unlogged;

/* Close c for its silence: counted, and said in one line a minute at most. */
static void conn_drop_silent(ss_conn *c, const char *why)
{
    ss_ctx *ss = c->ss;
    ss->m.peers_timed_out++;
    g_peer_unlogged++;
    if (g_peer_logged_ms == 0 || now_ms() - g_peer_logged_ms >= PEER_LOG_MS) {
        char more[96] = "";
        if (g_peer_unlogged > 1)
            snprintf(more, sizeof more, " (%lu connections closed so in the last %llu s)", g_peer_unlogged,
                     (unsigned long long)(now_ms() - g_peer_logged_ms) / 1000);
        log_warn("closed connection %s (%s): %s%s; a worker connects again by itself, so this is a peer that is "
                 "not one, or one frozen or cut off (at most one line a minute about these)",
                 c->peer, c->worker[0] ? c->worker : "no hello", why, g_peer_logged_ms ? more : "");
        g_peer_logged_ms = now_ms();
        g_peer_unlogged = 0;
    }
    conn_close(c, why);
}

static void conn_on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ss_conn *c = arg;
    if (c->closed) return;
    if (c->deadline_for == DEADLINE_LINGER) {
        conn_close(c, "closed after an unrecoverable request");
        return;
    }
    char why[160];
    int ms = c->ss->opts.peer_timeout_ms;
    if (c->deadline_for == DEADLINE_HELLO)
        snprintf(why, sizeof why, "no hello within %d ms of connecting", ms < HELLO_TIMEOUT_MS ? ms : HELLO_TIMEOUT_MS);
    else if (c->dbuf != NULL)
        snprintf(why, sizeof why, "a %zu-byte frame not whole %d ms after its first byte (%zu received)", c->dlen, ms,
                 c->dgot);
    else
        snprintf(why, sizeof why, "a frame begun but not complete %d ms later", ms);
    c->deadline_for = DEADLINE_NONE;
    conn_drop_silent(c, why);
}

static void deadline_arm(ss_conn *c, int what, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    c->deadline_for = what;
    evtimer_add(c->deadline, &tv);
}

/* After the connection did something: the deadline that applies now. The hello's runs from the connect until
 * the handshake is done; a frame's from when its first byte is waited for (not while a request is under
 * way: the peer then waits for us) until it is whole, a big frame read straight into its buffer too (it is
 * not moved while conn_on_direct reads). Moving it at each byte, as a big frame's once was, let a peer hold
 * the frame's buffer for ever with a byte every timeout less a second. */
static void deadline_update(ss_conn *c)
{
    if (c->closed || c->lingering || c->ss->opts.peer_timeout_ms <= 0) return;
    if (c->deadline_for == DEADLINE_HELLO && !(c->authed && c->frames > 0)) return;
    /* (a frame left in the input while the replies before it wait to go is not late: the peer is to read) */
    int waiting = !c->busy && !c->close_after_flush &&
                  (c->dbuf != NULL || (evbuffer_get_length(bufferevent_get_input(c->bev)) > 0 &&
                                       evbuffer_get_length(bufferevent_get_output(c->bev)) <= WRITE_HIGH_WATER));
    if (waiting && c->deadline_for != DEADLINE_FRAME)
        deadline_arm(c, DEADLINE_FRAME, c->ss->opts.peer_timeout_ms);
    else if (!waiting && c->deadline_for != DEADLINE_NONE) {
        evtimer_del(c->deadline);
        c->deadline_for = DEADLINE_NONE;
    }
}

static void conn_on_direct(evutil_socket_t fd, short what, void *arg);

/* Receive the rest of a big frame straight into its buffer: take what the bufferevent already holds
 * (only this frame's bytes: it is incomplete), stop the bufferevent reading, and read the socket here. */
static void conn_start_direct(ss_conn *c, struct evbuffer *in, uint32_t flen)
{
    uint8_t *frame = malloc((size_t)flen + FRAME_SLACK);
    if (frame == NULL) {
        conn_close(c, "out of memory");
        return;
    }
    if (c->direct == NULL)
        c->direct = event_new(c->ss->base, bufferevent_getfd(c->bev), EV_READ | EV_PERSIST, conn_on_direct, c);
    if (c->direct == NULL) {
        free(frame);
        conn_close(c, "out of memory");
        return;
    }
    evbuffer_drain(in, 4);
    c->dbuf = frame;
    c->dlen = flen;
    c->dgot = evbuffer_remove(in, frame, flen);
    bufferevent_disable(c->bev, EV_READ);
    event_add(c->direct, NULL);
    event_active(c->direct, EV_READ, 0); /* bytes may be waiting already */
}

static void conn_on_direct(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    ss_conn *c = arg;
    if (c->closed || c->dbuf == NULL) return;
    while (c->dgot < c->dlen) {
        size_t want = c->dlen - c->dgot;
        ssize_t n = recv(fd, c->dbuf + c->dgot, want < SOCKET_IO_CHUNK ? want : SOCKET_IO_CHUNK, MSG_DONTWAIT);
        if (n > 0) {
            c->dgot += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EINTR)) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return; /* the deadline stays where it is */
        conn_close(c, n == 0 ? "peer closed" : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        return;
    }
    event_del(c->direct);
    if (c->deadline_for == DEADLINE_FRAME) {
        evtimer_del(c->deadline);
        c->deadline_for = DEADLINE_NONE;
    }
    uint8_t *frame = c->dbuf;
    size_t len = c->dlen;
    c->dbuf = NULL;
    c->dlen = c->dgot = 0;
    bufferevent_enable(c->bev, EV_READ);
    c->ss->m.bytes_in += 4 + len;
    if (len > 1000000) log_debug("connection %s (%s): %zu-byte frame received", c->peer, c->worker, len);
    conn_dispatch(c, frame, len);
}

/* Whether c may take its next frame: no request under way, no frame being received, its replies sent but
 * WRITE_HIGH_WATER at most. */
static int conn_takes_frames(ss_conn *c)
{
    return !c->busy && !c->closed && !c->close_after_flush && c->dbuf == NULL &&
           evbuffer_get_length(bufferevent_get_output(c->bev)) <= WRITE_HIGH_WATER;
}

static void conn_read_frames(ss_conn *c)
{
    while (conn_takes_frames(c)) {
        struct evbuffer *in = bufferevent_get_input(c->bev);
        size_t have = evbuffer_get_length(in);
        if (have < 4) return;
        uint8_t p[4];
        evbuffer_copyout(in, p, 4);
        uint32_t flen = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        if (flen == 0 || flen > conn_max_frame(c)) {
            conn_refuse_oversize(c, flen);
            return;
        }
        if (have < 4 + (size_t)flen) {
            if (flen >= DIRECT_MIN_FRAME) conn_start_direct(c, in, flen);
            return;
        }
        uint8_t *frame = malloc((size_t)flen + FRAME_SLACK);
        if (frame == NULL) {
            conn_close(c, "out of memory");
            return;
        }
        evbuffer_drain(in, 4);
        evbuffer_remove(in, frame, flen);
        if (flen > 1000000) log_debug("connection %s (%s): %u-byte frame received", c->peer, c->worker, flen);
        c->ss->m.bytes_in += 4 + (size_t)flen;
        conn_dispatch(c, frame, flen);
    }
}

static void conn_process(ss_conn *c)
{
    conn_read_frames(c);
    deadline_update(c);
}

/* A connection to close after a refusal, its last reply sent: end our side (the peer reads the reply, then the end
 * of the stream) and read and drop what the peer still sends, until it closes or for LINGER_MS. Closed at once,
 * with bytes unread (the rest of a frame refused from its length), the socket was reset, and a worker still
 * sending the frame failed with "connection reset" and never read the reason. */
static void conn_linger(ss_conn *c)
{
    c->lingering = 1;
    shutdown(bufferevent_getfd(c->bev), SHUT_WR);
    if (c->deadline_for != DEADLINE_NONE) evtimer_del(c->deadline);
    deadline_arm(c, DEADLINE_LINGER, LINGER_MS);
    struct evbuffer *in = bufferevent_get_input(c->bev);
    evbuffer_drain(in, evbuffer_get_length(in));
    bufferevent_enable(c->bev, EV_READ);
}

/* After a reply went out: whether c was to close after it, and now lingers (conn_linger). */
static int conn_flushed_close(ss_conn *c)
{
    if (!c->close_after_flush || c->busy) return 0;
    if (!c->lingering && evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) conn_linger(c);
    return 1;
}

static void conn_on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ss_conn *c = arg;
    if (c->closed || conn_flushed_close(c)) return;
    conn_process(c);
}

static void conn_on_read(struct bufferevent *bev, void *arg)
{
    ss_conn *c = arg;
    if (c->lingering) {
        struct evbuffer *in = bufferevent_get_input(bev);
        evbuffer_drain(in, evbuffer_get_length(in));
        return;
    }
    conn_process(c);
}

/* Replies went out, and WRITE_HIGH_WATER at most wait: close a connection to close once they all went; take the
 * next frame of one that waited for them (conn_takes_frames). */
static void conn_on_write(struct bufferevent *bev, void *arg)
{
    (void)bev;
    ss_conn *c = arg;
    if (c->busy || conn_flushed_close(c)) return;
    conn_process(c);
}

static void conn_on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    ss_conn *c = arg;
    if (what & BEV_EVENT_TIMEOUT) {
        char why[96];
        snprintf(why, sizeof why, "replies not read for %d ms", c->ss->opts.peer_timeout_ms);
        conn_drop_silent(c, why);
    } else if (what & BEV_EVENT_EOF)
        conn_close(c, "peer closed");
    else if (what & BEV_EVENT_ERROR)
        conn_close(c, evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)l;
    (void)salen;
    ss_ctx *ss = arg;
    if (ss->stopping) {
        evutil_closesocket(fd);
        return;
    }
    ss_conn *c = calloc(1, sizeof *c);
    if (c == NULL) {
        evutil_closesocket(fd);
        return;
    }
    c->ss = ss;
    c->authed = ss->rc.secret[0] == '\0'; /* a run made without a secret (by hand) has no handshake */
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)sa;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(c->peer, sizeof c->peer, "%s:%d", ip, ntohs(in->sin_port));
    } else {
        snprintf(c->peer, sizeof c->peer, "fd %d", (int)fd);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->bev = bufferevent_socket_new(ss->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->resume = event_new(ss->base, -1, 0, conn_on_resume, c);
    c->deadline = evtimer_new(ss->base, conn_on_deadline, c);
    if (c->bev == NULL || c->resume == NULL || c->deadline == NULL) {
        if (c->bev == NULL) evutil_closesocket(fd);
        conn_free(c);
        return;
    }
    bufferevent_set_max_single_read(c->bev, SOCKET_IO_CHUNK);
    bufferevent_set_max_single_write(c->bev, SOCKET_IO_CHUNK);
    bufferevent_setwatermark(c->bev, EV_READ, 0, READ_HIGH_WATER);
    bufferevent_setwatermark(c->bev, EV_WRITE, WRITE_HIGH_WATER, 0);
    bufferevent_setcb(c->bev, conn_on_read, conn_on_write, conn_on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    int ms = ss->opts.peer_timeout_ms;
    if (ms > 0) {
        struct timeval wtv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
        bufferevent_set_timeouts(c->bev, NULL, &wtv); /* (libevent runs it only while a reply waits to go) */
        deadline_arm(c, DEADLINE_HELLO, ms < HELLO_TIMEOUT_MS ? ms : HELLO_TIMEOUT_MS);
    }
    c->next = ss->conns;
    if (ss->conns != NULL) ss->conns->prev = c;
    ss->conns = c;
    ss->m.connections++;
    log_debug("connection from %s", c->peer);
}

static int bound_port(evutil_socket_t fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) return -1;
    if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

/* Parse an IPv4 or IPv6 literal and a port (0 = ephemeral) into sa. */
static int make_sockaddr(const char *host, int port, struct sockaddr_storage *sa, int *salen)
{
    memset(sa, 0, sizeof *sa);
    struct sockaddr_in *in4 = (struct sockaddr_in *)sa;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        *salen = sizeof *in4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        *salen = sizeof *in6;
        return 0;
    }
    return -1;
}

int server_listen(ss_ctx *ss, char *err, size_t errlen)
{
    struct sockaddr_storage sa;
    int salen = 0;
    char spec[300];
    snprintf(spec, sizeof spec, "%s:%d", ss->opts.listen_host, ss->opts.listen_port);
    if (make_sockaddr(ss->opts.listen_host, ss->opts.listen_port, &sa, &salen) != 0) {
        err_set(err, errlen, "cannot parse listen address '%s' (use an IP address, e.g. 127.0.0.1)", spec);
        return -1;
    }
    ss->listener = evconnlistener_new_bind(ss->base, on_accept, ss, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128,
                                           (struct sockaddr *)&sa, salen);
    if (ss->listener == NULL) {
        err_set(err, errlen, "cannot listen on %s: %s", spec, strerror(errno));
        return -1;
    }
    ss->listen_guard = accept_guard_new(ss->listener, "data plane");
    int port = bound_port(evconnlistener_get_fd(ss->listener));
    if (ss->opts.advertise[0] != '\0')
        snprintf(ss->addr, sizeof ss->addr, "%s", ss->opts.advertise);
    else if (strcmp(ss->opts.listen_host, "0.0.0.0") == 0 || strcmp(ss->opts.listen_host, "::") == 0)
        snprintf(ss->addr, sizeof ss->addr, "127.0.0.1:%d", port);
    else
        snprintf(ss->addr, sizeof ss->addr, "%s:%d", ss->opts.listen_host, port);
    /* the port bound, not the one asked for (0: an ephemeral port the kernel picked) */
    log_info("listening on %s:%d%s (advertised as %s)", ss->opts.listen_host, port,
             ss->opts.listen_port == 0 ? ", an ephemeral port" : "", ss->addr);
    if (strcmp(ss->opts.listen_host, "0.0.0.0") == 0 && ss->opts.advertise[0] == '\0')
        log_warn("listening on all interfaces but advertising %s: pass --advertise host:port for remote workers",
                 ss->addr);
    return 0;
}

void server_stop_accepting(ss_ctx *ss)
{
    accept_guard_free(ss->listen_guard);
    ss->listen_guard = NULL;
    if (ss->listener != NULL) {
        evconnlistener_free(ss->listener);
        ss->listener = NULL;
    }
}

void server_close(ss_ctx *ss)
{
    server_stop_accepting(ss);
    for (ss_conn *c = ss->conns, *next; c != NULL; c = next) {
        next = c->next;
        conn_close(c, "shutting down");
    }
}
