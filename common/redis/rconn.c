/*
 * rconn.c: the connections declared in rconn.h, on the hiredis 0.14 blocking API. Every command is
 * formatted once (RESP), its key's slot read from that (cluster.c), and sent by route(): the single
 * place where MOVED and ASK are followed.
 */
#include "base/log.h"
#include "base/sigpipe.h"
#include "base/util.h"
#include "redis/cluster.h"
#include "redis/rconn.h"
#include "redis/sentinel.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#define RETRY_BASE_MS 100
#define RETRY_CAP_MS 5000
#define RETRY_LOG_EVERY_MS 5000
/* what to check when Redis does not answer: said with every retry line and the final error */
#define UNREACHABLE_HINT "is redis-server running, and is the URL right?"
#define NO_FD_HINT "this process is out of descriptors: raise its limit (ulimit -n, systemd LimitNOFILE=)"

/* What to check, for why a connect failed: Redis and the URL, unless this very process could not make a socket
 * (it said "is redis-server running" to a worker at its `ulimit -n`). */
static const char *unreachable_hint(const char *why)
{
    return strstr(why, "Too many open files") ? NO_FD_HINT : UNREACHABLE_HINT;
}
#define RESOLVE_RETRY_CAP_MS 500
/* Asking a Sentinel or ROLE is one small command: a server that takes longer is dead or stopped. */
#define RESOLVE_TIMEOUT_MS 1000
/* Behind Sentinel, a command without a reply for this long asks whether the master changed (a
 * stopped or partitioned master keeps the connection open); it waits on, up to the connection's
 * timeout, while the Sentinels still name our master (a slow command, a big blob). */
#define PROBE_MS 1000
/* With a stop watched (rconn_watch_stop), replies are awaited in slices this long: a stop is seen within it. */
#define STOP_SLICE_MS 100
/* A new master has no replica for a second or two, until the Sentinels point the others at it. */
#define NOREPLICAS_PATIENCE_MS 10000
/* A Redis restarted from its AOF or RDB answers LOADING until the data set is in memory: seconds for
 * a run's parameters, longer for a big data set. */
#define LOADING_PATIENCE_MS 120000

struct rconn {
    redis_url given; /* as given (may name Sentinels or several seeds) */
    redis_url url;   /* the server it resolved to (its credentials are used on every node) */
    uint64_t moved_checked_ms;
    int timeout_ms;                        /* the whole wait for a reply */
    redisContext *seed;                    /* connection to the URL's server: keyless commands, and everything until a
                           redirection says this is a cluster */
    cluster_map *map;                      /* NULL: a single server */
    redisContext *node[CLUSTER_MAX_NODES]; /* per map node, opened on first use; may be seed */
    int broken;
    int not_master; /* broken by a failover reply (explain_failover): Redis answered, as a node that does not lead */
    char errstr[768];
    /* rconn_watch_stop: the stop, read by the thread that runs c's command (never another) */
    rconn_stop_fn *stopped; /* NULL: none watched */
    void *stop_arg;
    int closing_ms;
    int armed; /* the command in progress began before the stop: the stop ends it at once */
};

static struct timeval timeval_from_ms(int ms)
{
    if (ms <= 0) ms = 1;
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return tv;
}

/* Whether replies are awaited in PROBE_MS slices, asking the Sentinels between two (see PROBE_MS). */
static int probing(const redis_url *given)
{
    return given->sentinel_master[0] != '\0';
}

/* Whether replies are awaited in slices: when probing, or watching a stop. */
static int sliced(const rconn *c)
{
    return probing(&c->given) || c->stopped != NULL;
}

/* The socket timeout of c's connections: the command timeout, or its slice when sliced. */
static struct timeval socket_timeout(const rconn *c)
{
    int ms = c->timeout_ms;
    if (probing(&c->given) && ms > PROBE_MS) ms = PROBE_MS;
    if (c->stopped != NULL && ms > STOP_SLICE_MS) ms = STOP_SLICE_MS;
    return timeval_from_ms(ms);
}

#define MAXCLIENTS_ERROR "ERR max number of clients reached"

/* What an operator does about each refusal of a misbehaving Redis (the command did not run): Redis's own
 * words name the symptom, not always the cause or the cure. Matched on the start of the error text. */
static const struct {
    const char *start;
    const char *hint;
} refusal_hints[] = {
    {"OOM", "Redis is out of memory, its used_memory above maxmemory, and refuses writes: raise maxmemory (CONFIG "
            "SET maxmemory) or give Redis more memory; keep maxmemory-policy noeviction (docs/deploy.md). Nothing "
            "was written; the run's processes retry"},
    {"MISCONF", "its last RDB save failed and stop-writes-on-bgsave-error is on: fix what its log names (disk full, "
                "dir not writable), then BGSAVE; nothing was written; the run's processes retry"},
    {"BUSY", "Redis is busy running a script or function for longer than busy-reply-threshold: wait, or stop it "
             "(SCRIPT KILL / FUNCTION KILL); the run's processes retry"},
    {MAXCLIENTS_ERROR,
     "Redis refuses new connections: maxclients is reached; raise it (CONFIG SET maxclients N) or close idle clients "
     "(CLIENT LIST); the run's processes retry"},
    {"READONLY", "this Redis is a read-only replica: point the URL at the master, or at its Sentinels "
                 "(redis+sentinel://) to follow failovers"},
    {"MASTERDOWN", "this Redis is a replica that lost its master: point the URL at the master, or at its Sentinels "
                   "(redis+sentinel://) to follow failovers"},
    {"LOADING", "Redis is loading its data set after a restart; the run's processes wait for it"},
    {"NOREPLICAS", "the master has fewer replicas than its min-replicas-to-write: are its replicas up and linked?"},
};

const char *rconn_error_hint(const char *e)
{
    if (e == NULL) return NULL;
    for (size_t i = 0; i < sizeof refusal_hints / sizeof refusal_hints[0]; i++)
        if (strncmp(e, refusal_hints[i].start, strlen(refusal_hints[i].start)) == 0) return refusal_hints[i].hint;
    return NULL;
}

int rconn_error_transient(const char *e)
{
    return rconn_error_hint(e) != NULL || rconn_error_failover(e);
}

/* How much of Redis's own text a hint goes with: its first sentence, at most this long. MISCONF's is 330 characters,
 * four sentences, and with the hint after it a line said the same thing twice; its code and first sentence keep it
 * findable (in Redis's source, on the web). */
#define REDIS_TEXT_KEPT 120

void rconn_explain_error(const char *redis_error, char *out, size_t cap)
{
    const char *hint = rconn_error_hint(redis_error);
    if (hint == NULL) {
        snprintf(out, cap, "%s", redis_error ? redis_error : "Redis error");
        return;
    }
    size_t n = strlen(redis_error);
    const char *stop = strstr(redis_error, ". ");
    if (stop != NULL) n = (size_t)(stop - redis_error);
    /* (Redis ends some of its texts with a period: "...> 'maxmemory'." then " (Redis is out of...") */
    if (n > 0 && redis_error[n - 1] == '.') n--;
    const char *cut = n > REDIS_TEXT_KEPT ? "..." : "";
    if (n > REDIS_TEXT_KEPT) n = REDIS_TEXT_KEPT;
    snprintf(out, cap, "%.*s%s (%s)", (int)n, redis_error, cut, hint);
}

int rconn_reply_error(const rconn *c, redisReply *r, char *err, size_t errlen)
{
    if (r == NULL) {
        err_set(err, errlen, "Redis connection error: %s", c && c->errstr[0] ? c->errstr : "no reply");
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (err != NULL && errlen > 0) rconn_explain_error(r->str, err, errlen);
        return -1;
    }
    return 0;
}

int rconn_error_final(const char *e)
{
    static const char *const final[] = {
        "WRONGPASS",            /* Redis 6+: unknown user, wrong password or disabled user */
        "NOAUTH",               /* a password is required and the URL has none */
        "NOPERM",               /* the ACL user may not run this command or touch this key */
        "ERR invalid password", /* Redis < 6 */
        "ERR AUTH",             /* a password given to a server that has none */
        "ERR Client sent AUTH", /* the same, Redis < 6 */
        "ERR DB index is out of range",
    };
    if (e == NULL) return 0;
    for (size_t i = 0; i < sizeof final / sizeof final[0]; i++)
        if (strncmp(e, final[i], strlen(final[i])) == 0) return 1;
    return 0;
}

/* Whether r, a reply to ROLE, is a Sentinel's: ["sentinel", [master names]]. */
static int role_is_sentinel(const redisReply *r)
{
    return r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_STRING &&
           strcmp(r->element[0]->str, "sentinel") == 0;
}

int rconn_sentinel_error(rconn *c, const char *redis_error, char *err, size_t errlen)
{
    if (redis_error == NULL || strncmp(redis_error, "ERR unknown command", 19) != 0) return 0;
    redisReply *r = rconn_command(c, "ROLE");
    if (!role_is_sentinel(r)) {
        if (r != NULL) freeReplyObject(r);
        return 0;
    }
    /* (ROLE names the masters it watches: the one, when there is one, is the name to put in the URL) */
    const redisReply *names = r->elements >= 2 ? r->element[1] : NULL;
    const char *name = names && names->type == REDIS_REPLY_ARRAY && names->elements == 1 &&
                               names->element[0]->type == REDIS_REPLY_STRING
                           ? names->element[0]->str
                           : "MASTER_NAME";
    char where[300];
    rconn_server(c, where, sizeof where);
    err_set(err, errlen,
            "%s is a Redis Sentinel, not a Redis server: use redis+sentinel://%s/%s (the Sentinels and the name of "
            "the master they watch; docs/deploy.md, \"Redis with replicas and automatic failover\")",
            where, where, name);
    freeReplyObject(r);
    return 1;
}

int rconn_error_failover(const char *e)
{
    static const char *const failover[] = {
        "READONLY",    /* the node was demoted: it is a replica now */
        "MASTERDOWN",  /* a replica that lost its master (replica-serve-stale-data no) */
        "CLUSTERDOWN", /* a cluster master failed and no replica took over yet */
        "TRYAGAIN",    /* a cluster slot in the middle of a failover or migration */
    };
    if (e == NULL) return 0;
    for (size_t i = 0; i < sizeof failover / sizeof failover[0]; i++)
        if (strncmp(e, failover[i], strlen(failover[i])) == 0) return 1;
    return 0;
}

/* Whether redisGetReply failed only because the socket timeout (a slice: PROBE_MS, STOP_SLICE_MS) passed. */
static int slice_passed(const redisContext *ctx)
{
    return ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* What ends a connect's retries and its handshake early: rconn_connect_retry's flag or
 * rconn_connect_watched's function, as one function and its argument (fn NULL: nothing does). */
typedef struct stop_src {
    rconn_stop_fn *fn;
    void *arg;
} stop_src;

static int stop_now(const stop_src *s)
{
    return s != NULL && s->fn != NULL && s->fn(s->arg);
}

/* A command of a connection's opening (AUTH, PING, SELECT). With stop, its socket timeout is a STOP_SLICE_MS
 * slice and the reply is awaited up to timeout_ms (what the socket timeout would be without), slice after
 * slice, while the stop says go on: a process told to stop does not wait out the whole timeout on a Redis that
 * accepts connections but answers nothing (frozen), as a reconnect to it would. Without, one wait of the
 * socket timeout. NULL: failed (c->errstr). */
static redisReply *handshake(redisContext *c, const stop_src *stop, int timeout_ms, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int queued = redisvAppendCommand(c, fmt, ap) == REDIS_OK;
    va_end(ap);
    void *reply = NULL;
    for (uint64_t t0 = now_ms(); queued && redisGetReply(c, &reply) != REDIS_OK;) {
        if (!slice_passed(c)) return NULL; /* (an I/O error: errstr says which) */
        if (stop == NULL || now_ms() - t0 >= (uint64_t)timeout_ms) {
            snprintf(c->errstr, sizeof c->errstr, "no reply within %d ms (is Redis frozen or overloaded?)", timeout_ms);
            return NULL;
        }
        if (stop_now(stop)) {
            snprintf(c->errstr, sizeof c->errstr, "stopped while Redis did not answer");
            return NULL;
        }
        c->err = 0;
        c->errstr[0] = '\0';
    }
    return reply;
}

/* How a connect attempt failed, for what its caller does and says next: not refused (no reply, an I/O error, or a
 * refusal not known: "is Redis running, is the URL right?" still applies), refused for good (rconn_error_final, or
 * a URL that cannot be right: retrying cannot help), or refused for now with a refusal rconn_error_hint explains
 * (maxclients reached, say: Redis is running and the URL is right, and the error already says what to do). */
typedef enum refusal { NOT_REFUSED = 0, REFUSED_FINAL, REFUSED_EXPLAINED } refusal;

/* Run one command whose only interesting outcome is error or not; *refused says how Redis refused it (refusal).
 * check: what to look at when Redis refuses it, said only then (no reply is not a matter of credentials:
 * a frozen or overloaded Redis, or a cut connection; nor is a refusal rconn_error_hint explains). */
static int run_simple(redisContext *c, const char *what, const char *check, refusal *refused, char *err, size_t errlen,
                      redisReply *r)
{
    int rc = 0;
    if (r == NULL) {
        err_set(err, errlen, "%s failed: %s", what, c->errstr[0] ? c->errstr : "no reply");
        rc = -1;
    } else if (r->type == REDIS_REPLY_ERROR) {
        int final = rconn_error_final(r->str);
        int explained = !final && rconn_error_hint(r->str) != NULL;
        *refused = final ? REFUSED_FINAL : explained ? REFUSED_EXPLAINED : NOT_REFUSED;
        /* (a refusal that is not about the URL, maxclients reached say, is not blamed on the login) */
        char why[512];
        rconn_explain_error(r->str, why, sizeof why);
        if (!explained)
            err_set(err, errlen, "%s (%s) failed: %s", what, check, r->str);
        else
            err_set(err, errlen, "%s failed: %s", what, why);
        rc = -1;
    }
    if (r != NULL) freeReplyObject(r);
    return rc;
}

/* What to put in u, in its own scheme (redis://, unix://, redis+sentinel://) and with its own servers, for a
 * server that wants a login: an ACL user's (USER:PASSWORD@, as deploy/redis/users.acl, whose default user
 * is off, wants) or the default user's password (:PASSWORD@). */
static void login_hint(const redis_url *u, const char *start, char *buf, size_t cap)
{
    redis_url bare = *u;
    bare.user[0] = '\0';
    char url[REDIS_URL_MAX];
    if (redis_url_format(&bare, url, sizeof url) != 0) snprintf(url, sizeof url, "redis://HOST:PORT");
    const char *sep = strstr(url, "://");
    int scheme = sep ? (int)(sep - url) + 3 : 0;
    snprintf(buf, cap,
             "%s: %.*sUSER:PASSWORD@%s for an ACL user (e.g. deploy/redis/users.acl's), or %.*s:PASSWORD@%s "
             "for the default user's password",
             start, scheme, url, url + scheme, scheme, url, url + scheme);
}

static int authenticate(redisContext *c, const redis_url *u, const stop_src *stop, int timeout_ms, refusal *final,
                        char *err, size_t errlen)
{
    char hint[3 * REDIS_URL_MAX];
    login_hint(u, u->user[0] || u->pass[0] ? "check the login in the Redis URL" : "the server wants a login in the URL",
               hint, sizeof hint);
    if (u->user[0] != '\0')
        return run_simple(c, "AUTH", hint, final, err, errlen,
                          handshake(c, stop, timeout_ms, "AUTH %s %s", u->user, u->pass));
    if (u->pass[0] != '\0')
        return run_simple(c, "AUTH", hint, final, err, errlen, handshake(c, stop, timeout_ms, "AUTH %s", u->pass));
    /* No credentials: a PING finds out at once whether the server wants some (NOAUTH, final), so that no
     * caller's first command is refused in its own way (a large FUNCTION LOAD before AUTH is answered
     * "Protocol error: unauthenticated bulk length"). */
    return run_simple(c, "PING", hint, final, err, errlen, handshake(c, stop, timeout_ms, "PING"));
}

/* Open, authenticate and configure one connection: to the URL's server (host NULL) or to host:port
 * with the URL's credentials (a cluster node); io_tv is its socket timeout (socket_timeout); stop (may
 * be NULL) ends its handshake (handshake). *final: whether and how Redis refused the login or the database. */
static redisContext *open_node(const redis_url *u, const char *host, int port, int timeout_ms, struct timeval io_tv,
                               const stop_src *stop, refusal *final, char *err, size_t errlen)
{
    struct timeval tv = timeval_from_ms(timeout_ms);
    char where[600];
    redisContext *c;
    if (host != NULL)
        snprintf(where, sizeof where, "cluster node %s:%d", host, port);
    else if (redis_url_format(u, where, sizeof where) != 0)
        where[0] = '\0';
    if (host == NULL && u->is_unix)
        c = redisConnectUnixWithTimeout(u->path, tv);
    else
        c = redisConnectWithTimeout(host ? host : u->host, host ? port : u->port, tv);
    if (c == NULL) {
        err_set(err, errlen, "cannot connect to %s: out of memory", where);
        return NULL;
    }
    if (c->err) {
        err_set(err, errlen, "cannot connect to %s: %s", where, c->errstr);
        goto error;
    }
    if (redisSetTimeout(c, stop ? timeval_from_ms(STOP_SLICE_MS) : io_tv) != REDIS_OK) {
        err_set(err, errlen, "cannot set the command timeout on %s: %s", where, c->errstr);
        goto error;
    }
    /* (the handshake's limit is the socket timeout's, in slices or not: a PROBE_MS slice behind Sentinel, so
     * that a stopped master is given up and the Sentinels asked again) */
    int limit_ms = (int)(io_tv.tv_sec * 1000 + io_tv.tv_usec / 1000);
    if (authenticate(c, u, stop, limit_ms, final, err, errlen) != 0) goto error;
    /* SELECT 0 is skipped so the same URL also works against a Redis Cluster node. */
    if (host == NULL && u->db != 0 &&
        run_simple(c, "SELECT", "check the database number in the Redis URL", final, err, errlen,
                   handshake(c, stop, limit_ms, "SELECT %d", u->db)) != 0)
        goto error;
    if (stop && redisSetTimeout(c, io_tv) != REDIS_OK) {
        err_set(err, errlen, "cannot set the command timeout on %s: %s", where, c->errstr);
        goto error;
    }
    return c;

error:
    redisFree(c);
    return NULL;
}

/* Several nodes in a redis:// URL are the seeds of one Redis Cluster. Servers that are not Cluster nodes
 * would each be a Redis of its own, and every connection would use the one that answered first: init, the
 * workers and the shard-servers could each land on another. So the node we reached must be a Cluster node.
 * Only "cluster support disabled" refuses: a user whose ACL lacks CLUSTER MYID is not judged. -1 + err. */
static int check_seeds_cluster(rconn *c, const stop_src *stop, char *err, size_t errlen)
{
    if (c->given.nhosts < 2 || c->given.sentinel_master[0] != '\0') return 0;
    redisReply *r = handshake(c->seed, stop, c->timeout_ms, "CLUSTER MYID");
    int alone = r != NULL && r->type == REDIS_REPLY_ERROR && strstr(r->str, "cluster support disabled") != NULL;
    if (r != NULL) freeReplyObject(r);
    if (!alone) return 0;
    err_set(err, errlen,
            "the Redis URL names %d nodes, the form of a Redis Cluster's seeds, but %s:%d is not a Cluster node "
            "(cluster support disabled): name one Redis server alone (redis://HOST:PORT), or its Sentinels "
            "(redis+sentinel://HOST:PORT,HOST:PORT/MASTER)",
            c->given.nhosts, c->url.host, c->url.port);
    return -1;
}

/* One attempt; stop and *final as open_node. */
static rconn *connect_once(const redis_url *u, int timeout_ms, const stop_src *stop, refusal *final, char *err,
                           size_t errlen)
{
    *final = NOT_REFUSED;
    rconn *c = calloc(1, sizeof *c);
    if (c == NULL) {
        err_set(err, errlen, "out of memory");
        return NULL;
    }
    c->timeout_ms = timeout_ms;
    c->given = *u;
    if (redis_url_resolve(u, timeout_ms < RESOLVE_TIMEOUT_MS ? timeout_ms : RESOLVE_TIMEOUT_MS, &c->url, err, errlen) !=
        0) {
        free(c);
        return NULL;
    }
    sigpipe_guard g;
    sigpipe_hold(&g);
    c->seed = open_node(&c->url, NULL, 0, timeout_ms, socket_timeout(c), stop, final, err, errlen);
    int seeds_ok = c->seed != NULL && check_seeds_cluster(c, stop, err, errlen) == 0;
    sigpipe_release(&g);
    if (c->seed != NULL && !seeds_ok) {
        *final = REFUSED_FINAL; /* (the URL is wrong: trying again cannot help) */
        redisFree(c->seed);
        c->seed = NULL;
    }
    if (c->seed == NULL) {
        free(c);
        return NULL;
    }
    return c;
}

rconn *rconn_connect(const redis_url *u, int timeout_ms, char *err, size_t errlen)
{
    refusal final;
    return connect_once(u, timeout_ms, NULL, &final, err, errlen);
}

/* Sleep ms in slices so a stop request is honoured promptly; with a watch (Sentinel URL), wake early
 * when the Sentinels announce a new master. */
static void sleep_unless_stopped(unsigned ms, const stop_src *stop, sentinel_watch *watch)
{
    for (unsigned slept = 0; slept < ms && !stop_now(stop); slept += 50) {
        unsigned slice = ms - slept < 50 ? ms - slept : 50;
        int heard = watch != NULL ? sentinel_watch_wait(watch, (int)slice) : -1;
        if (heard == 1) return;
        if (heard < 0) sleep_ms(slice);
    }
}

/* rconn_connect_retry; *watch: the Sentinel subscriptions it opened, for the caller to close. */
static rconn *connect_retry(const redis_url *u, int timeout_ms, int wait_ms, const stop_src *stop, int *refused,
                            sentinel_watch **watch, char *err, size_t errlen)
{
    char where[600];
    char why[512] = "";
    refusal final = NOT_REFUSED;
    if (redis_url_format(u, where, sizeof where) != 0) where[0] = '\0';
    if (refused != NULL) *refused = 0;
    uint64_t t0 = now_ms(), logged = 0;
    unsigned attempt = 0;
    for (;; attempt++) {
        if (stop_now(stop)) {
            err_set(err, errlen, "stopped while connecting to %s (last error: %s)", where, why);
            return NULL;
        }
        rconn *c = connect_once(u, timeout_ms, stop, &final, why, sizeof why);
        if (c != NULL) {
            if (attempt > 0)
                log_info("connected to Redis at %s after %u failed attempts (%.1f s)", where, attempt,
                         (double)(now_ms() - t0) / 1000.0);
            return c;
        }
        if (final == REFUSED_FINAL) { /* why names the refusal (AUTH or SELECT and Redis's reply) */
            if (refused != NULL) *refused = 1;
            err_set(err, errlen, "%s", why);
            return NULL;
        }
        if (stop_now(stop)) continue; /* (ended by the stop: said above) */
        uint64_t elapsed = now_ms() - t0;
        if (wait_ms >= 0 && elapsed >= (uint64_t)wait_ms) break;
        if (*watch == NULL && u->sentinel_master[0] != '\0' && attempt == 0) {
            /* retry at once once subscribed: a failover announced before that would be missed */
            *watch = sentinel_watch_open(u, RESOLVE_TIMEOUT_MS);
            if (*watch != NULL) continue;
        }
        /* Sentinels in the middle of a failover: ask again soon (cheap), to use the new master at once */
        unsigned pause =
            backoff_ms(attempt, RETRY_BASE_MS, redis_url_needs_resolve(u) ? RESOLVE_RETRY_CAP_MS : RETRY_CAP_MS);
        if (wait_ms >= 0 && elapsed + pause > (uint64_t)wait_ms)
            pause = (unsigned)((uint64_t)wait_ms - elapsed); /* the last attempt at the deadline */
        if (logged == 0 || now_ms() - logged >= RETRY_LOG_EVERY_MS) {
            /* why already names the URL (without password); a Redis that answered with a refusal rconn_error_hint
             * explains (maxclients reached, say) is running, and the URL is right: its hint is in why already */
            char check[320] = "";
            if (final != REFUSED_EXPLAINED) snprintf(check, sizeof check, " (%s)", unreachable_hint(why));
            if (wait_ms < 0)
                log_warn("%s; retrying until it answers%s", why, check);
            else
                log_warn("%s; retrying for up to %.1f s more%s", why, (double)((uint64_t)wait_ms - elapsed) / 1000.0,
                         check);
            logged = now_ms();
        }
        sleep_unless_stopped(pause, stop, *watch);
    }
    const char *check = final == REFUSED_EXPLAINED ? "" : unreachable_hint(why);
    if (attempt == 0)
        err_set(err, errlen, "%s%s%s%s", why, *check ? " (" : "", check, *check ? ")" : "");
    else
        err_set(err, errlen, "%s (gave up after %.1f s and %u attempts%s%s)", why, (double)(now_ms() - t0) / 1000.0,
                attempt + 1, *check ? "; " : "", check);
    return NULL;
}

rconn *rconn_connect_watched(const redis_url *u, int timeout_ms, int wait_ms, rconn_stop_fn *stopped, void *arg,
                             int *refused, char *err, size_t errlen)
{
    stop_src stop = {stopped, arg};
    sentinel_watch *watch = NULL;
    rconn *c = connect_retry(u, timeout_ms, wait_ms, stopped != NULL ? &stop : NULL, refused, &watch, err, errlen);
    sentinel_watch_close(watch);
    return c;
}

static int flag_set(void *flag)
{
    return __atomic_load_n((const volatile int *)flag, __ATOMIC_RELAXED);
}

rconn *rconn_connect_retry(const redis_url *u, int timeout_ms, int wait_ms, const volatile int *stop, int *refused,
                           char *err, size_t errlen)
{
    /* (the flag is only read: the cast drops its qualifiers to pass it as the function's argument) */
    return rconn_connect_watched(u, timeout_ms, wait_ms, stop != NULL ? flag_set : NULL, (void *)(uintptr_t)stop,
                                 refused, err, errlen);
}

void rconn_free(rconn *c)
{
    if (c == NULL) return;
    for (int i = 0; i < CLUSTER_MAX_NODES; i++)
        if (c->node[i] != NULL && c->node[i] != c->seed) redisFree(c->node[i]);
    if (c->seed != NULL) redisFree(c->seed);
    free(c->map);
    free(c);
}

void rconn_interrupt(rconn *c)
{
    if (c->seed != NULL) shutdown(c->seed->fd, SHUT_RDWR);
    for (int i = 0; i < CLUSTER_MAX_NODES; i++) {
        redisContext *n = __atomic_load_n(&c->node[i], __ATOMIC_ACQUIRE); /* (node_ctx may open one meanwhile) */
        if (n != NULL && n != c->seed) shutdown(n->fd, SHUT_RDWR);
    }
}

static int set_socket_timeouts(rconn *c, struct timeval tv)
{
    int rc = redisSetTimeout(c->seed, tv) == REDIS_OK ? 0 : -1;
    for (int i = 0; i < CLUSTER_MAX_NODES; i++)
        if (c->node[i] != NULL && c->node[i] != c->seed && redisSetTimeout(c->node[i], tv) != REDIS_OK) rc = -1;
    return rc;
}

int rconn_set_timeout(rconn *c, int timeout_ms)
{
    c->timeout_ms = timeout_ms;
    return set_socket_timeouts(c, socket_timeout(c));
}

void rconn_watch_stop(rconn *c, rconn_stop_fn *stopped, void *arg, int closing_ms)
{
    c->stopped = stopped;
    c->stop_arg = arg;
    c->closing_ms = closing_ms;
    (void)set_socket_timeouts(c, socket_timeout(c));
}

/* At the start of each command: does the stop (if watched) end it at once, or only its wait? */
static void stop_arm(rconn *c)
{
    c->armed = c->stopped != NULL && !c->stopped(c->stop_arg);
}

/* Whether the stop ends now the command begun at t0 (NULL when it does not; else why): one begun before
 * the stop at once, one begun after it once closing_ms passed. */
static const char *stop_ends(rconn *c, uint64_t t0)
{
    if (c->stopped == NULL || !c->stopped(c->stop_arg)) return NULL;
    if (c->armed) return "interrupted by a stop (the command had no reply yet)";
    return now_ms() - t0 >= (uint64_t)c->closing_ms ? "no reply within the closing timeout, after a stop" : NULL;
}

int rconn_broken(const rconn *c)
{
    return c->broken;
}
int rconn_broken_not_master(const rconn *c)
{
    return c->broken && c->not_master;
}
const char *rconn_errstr(const rconn *c)
{
    return c->errstr;
}
int rconn_is_cluster(const rconn *c)
{
    return c->map != NULL;
}

const char *rconn_server(const rconn *c, char *buf, size_t cap)
{
    if (c->url.is_unix)
        snprintf(buf, cap, "%s", c->url.path);
    else
        snprintf(buf, cap, strchr(c->url.host, ':') ? "[%s]:%d" : "%s:%d", c->url.host, c->url.port);
    return buf;
}

static void set_broken(rconn *c, const char *why)
{
    c->broken = 1;
    snprintf(c->errstr, sizeof c->errstr, "%.760s", why);
}

int rconn_wait_closed(rconn *c, int ms)
{
    if (c->broken) return 1;
    struct pollfd p = {.fd = c->seed->fd, .events = POLLIN};
    int k = poll(&p, 1, ms);
    if (k <= 0) return 0; /* quiet (or EINTR: the caller waits again) */
    /* nothing is owed on an idle connection: readable means closed (or a protocol error) */
    set_broken(c, "the server closed the connection");
    return 1;
}

/* The connection to map node i (opened now if needed); NULL and broken if it cannot be opened. */
static redisContext *node_ctx(rconn *c, int i)
{
    if (c->node[i] != NULL) return c->node[i];
    const cluster_node *n = &c->map->node[i];
    if (!c->url.is_unix && n->port == c->url.port && strcmp(n->host, c->url.host) == 0) {
        __atomic_store_n(&c->node[i], c->seed, __ATOMIC_RELEASE); /* (rconn_interrupt reads it from another thread) */
        return c->seed;
    }
    char err[300];
    refusal final;
    redisContext *opened =
        open_node(&c->url, n->host, n->port, c->timeout_ms, socket_timeout(c), NULL, &final, err, sizeof err);
    __atomic_store_n(&c->node[i], opened, __ATOMIC_RELEASE);
    if (opened == NULL) set_broken(c, err);
    return opened;
}

static const char *node_host(const rconn *c, int i)
{
    return i < 0 ? c->url.host : c->map->node[i].host;
}

int rconn_error_noreplicas(const char *e)
{
    return e != NULL && strncmp(e, "NOREPLICAS", 10) == 0;
}

int rconn_error_maxclients(const char *e)
{
    return e != NULL && strncmp(e, MAXCLIENTS_ERROR, strlen(MAXCLIENTS_ERROR)) == 0;
}

int rconn_error_loading(const char *e)
{
    return e != NULL && strncmp(e, "LOADING", 7) == 0;
}

/* How long a refusal that means "the command did not run, try again soon" is worth waiting out on
 * the same connection: NOREPLICAS, LOADING; 0 for any other reply. */
static uint64_t refusal_patience_ms(const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ERROR) return 0;
    if (rconn_error_noreplicas(r->str)) return NOREPLICAS_PATIENCE_MS;
    if (rconn_error_loading(r->str)) return LOADING_PATIENCE_MS;
    return 0;
}

static redisReply *execute_once(rconn *c, redisContext *ctx, const char *cmd, size_t len, int asking);

/* Do the Sentinels name another master now (we talk to an old one: cut off from its replicas, after
 * NOREPLICAS; stopped or partitioned, after PROBE_MS without a reply)? Asked at most twice a second. */
static int master_moved(rconn *c)
{
    uint64_t now = now_ms();
    if (!probing(&c->given) || now - c->moved_checked_ms < 500) return 0;
    c->moved_checked_ms = now;
    redis_url found;
    if (!sentinel_master_changed(&c->given, c->url.host, c->url.port, RESOLVE_TIMEOUT_MS, &found)) return 0;
    log_warn("Redis master %s:%d does not answer or refuses writes, and the Sentinels name %s:%d now: reconnecting",
             c->url.host, c->url.port, found.host, found.port);
    return 1;
}

/* execute_once, sent again while Redis refuses it for a moment (the command did not run): a master
 * without the replicas it wants (NOREPLICAS), a restarted one still loading its data (LOADING); up
 * to refusal_patience_ms. */
static redisReply *execute(rconn *c, redisContext *ctx, const char *cmd, size_t len, int asking)
{
    uint64_t t0 = now_ms();
    int logged = 0;
    for (unsigned attempt = 0;; attempt++) {
        redisReply *r = execute_once(c, ctx, cmd, len, asking);
        uint64_t patience = refusal_patience_ms(r);
        if (patience == 0 || now_ms() - t0 >= patience || stop_ends(c, t0) != NULL) return r;
        if (!logged++) log_info("Redis at %s:%d answers %.60s: trying again", c->url.host, c->url.port, r->str);
        if (master_moved(c)) {
            set_broken(c, r->str); /* the caller reconnects, to the new master */
            freeReplyObject(r);
            return NULL;
        }
        freeReplyObject(r);
        sleep_ms(backoff_ms(attempt, 20, 500));
    }
}

/* redisGetReply in slices (sliced: when probing, or watching a stop). After each silent slice: a stop
 * that ends the command (stop_ends) -> broken; when probing, once every PROBE_MS, ask the Sentinels: the
 * master they name is another one -> broken; else wait on up to c->timeout_ms from t0. hiredis marks the
 * context failed at a timeout but keeps what it read and has still to write, so clearing the mark
 * resumes it. */
static int get_reply(rconn *c, redisContext *ctx, uint64_t t0, void **reply)
{
    uint64_t probe_at = t0 + PROBE_MS;
    for (;;) {
        if (redisGetReply(ctx, reply) == REDIS_OK) return 0;
        if (!sliced(c) || !slice_passed(ctx) || now_ms() - t0 >= (uint64_t)c->timeout_ms) return -1;
        const char *stop = stop_ends(c, t0);
        if (stop != NULL) {
            snprintf(ctx->errstr, sizeof ctx->errstr, "%s", stop);
            return -1;
        }
        if (now_ms() >= probe_at) {
            if (master_moved(c)) {
                snprintf(ctx->errstr, sizeof ctx->errstr, "no reply, and the Sentinels name another master");
                return -1;
            }
            probe_at = now_ms() + PROBE_MS;
        }
        ctx->err = 0;
        ctx->errstr[0] = '\0';
    }
}

/* Send one formatted command (after ASKING when asking) and read its reply; NULL = broken. */
static redisReply *execute_once(rconn *c, redisContext *ctx, const char *cmd, size_t len, int asking)
{
    void *reply = NULL;
    uint64_t t0 = now_ms();
    if ((asking && redisAppendCommand(ctx, "ASKING") != REDIS_OK) ||
        redisAppendFormattedCommand(ctx, cmd, len) != REDIS_OK)
        goto io_error;
    if (asking) {
        if (get_reply(c, ctx, t0, &reply) != 0) goto io_error;
        freeReplyObject(reply);
        reply = NULL;
    }
    if (get_reply(c, ctx, t0, &reply) != 0) goto io_error;
    return reply;
io_error:
    set_broken(c, ctx->errstr[0] ? ctx->errstr : "connection error");
    return NULL;
}

/* A keyless command of rconn's own (CLUSTER SLOTS, CLUSTER NODES) on ctx, its reply awaited as a caller's
 * command's is (get_reply: in slices when sliced). NULL: failed (ctx->errstr). */
static redisReply *own_command(rconn *c, redisContext *ctx, const char *cmd)
{
    void *reply = NULL;
    if (redisAppendCommand(ctx, cmd) != REDIS_OK || get_reply(c, ctx, now_ms(), &reply) != 0) return NULL;
    return reply;
}

static int enter_cluster(rconn *c)
{
    if (c->map != NULL) return 0;
    c->map = malloc(sizeof *c->map);
    if (c->map == NULL) {
        set_broken(c, "out of memory for the cluster slot map");
        return -1;
    }
    cluster_map_init(c->map);
    log_debug("Redis at %s:%d is a cluster node: routing by hash slot", c->url.host, c->url.port);
    return 0;
}

/* Re-read the slot map from node i. A refused CLUSTER SLOTS (an ACL without it) keeps what MOVED
 * replies taught us; -1 only when the connection broke. */
static int refresh(rconn *c, int i)
{
    redisContext *ctx = node_ctx(c, i);
    if (ctx == NULL) return -1;
    redisReply *r = own_command(c, ctx, "CLUSTER SLOTS");
    if (r == NULL) {
        set_broken(c, ctx->errstr[0] ? ctx->errstr : "connection error");
        return -1;
    }
    char err[256];
    if (cluster_map_load(c->map, r, node_host(c, i), err, sizeof err) != 0)
        log_debug("keeping the slot map learnt from redirections: %s", err);
    freeReplyObject(r);
    return 0;
}

/* The connection is broken by a failover reply: CLUSTERDOWN is explained from the node's CLUSTER NODES
 * (which node is unreachable, what to do), the others are kept as Redis said them. */
static void explain_failover(rconn *c, redisContext *ctx, const char *why)
{
    c->not_master = 1;
    if (strncmp(why, "CLUSTERDOWN", 11) != 0) {
        char text[sizeof c->errstr];
        rconn_explain_error(why, text, sizeof text); /* (a replica: what to give as the URL) */
        redisReply *role = strncmp(why, "READONLY", 8) == 0 ? own_command(c, ctx, "ROLE") : NULL;
        if (role && role->type == REDIS_REPLY_ARRAY && role->elements >= 3 &&
            role->element[1]->type == REDIS_REPLY_STRING && role->element[2]->type == REDIS_REPLY_INTEGER) {
            size_t n = strlen(text);
            snprintf(text + n, sizeof text - n, "; its master is %s:%lld", role->element[1]->str,
                     (long long)role->element[2]->integer);
        }
        if (role) freeReplyObject(role);
        set_broken(c, text);
        return;
    }
    redisReply *n = own_command(c, ctx, "CLUSTER NODES");
    char seed[300], text[sizeof c->errstr];
    snprintf(seed, sizeof seed, "%s:%d", ctx->tcp.host ? ctx->tcp.host : c->url.host, ctx->tcp.port);
    cluster_explain_down(why, n && n->type == REDIS_REPLY_STRING ? n->str : NULL, seed, text, sizeof text);
    if (n) freeReplyObject(n);
    set_broken(c, text);
}

/* Send cmd to the node that serves slot (-1: the URL's node), following redirections. */
static redisReply *route_unguarded(rconn *c, const char *cmd, size_t len, int slot)
{
    if (c->broken) return NULL;
    int node = c->map ? cluster_map_owner(c->map, slot) : -1;
    int asking = 0;
    for (int hop = 0;; hop++) {
        redisContext *ctx = node < 0 ? c->seed : node_ctx(c, node);
        if (ctx == NULL) return NULL;
        redisReply *r = execute(c, ctx, cmd, len, asking);
        if (r != NULL && r->type == REDIS_REPLY_ERROR && rconn_error_failover(r->str)) {
            explain_failover(c, ctx, r->str); /* the caller reconnects, which finds the master again */
            freeReplyObject(r);
            return NULL;
        }
        cluster_redirect rd;
        if (r == NULL || hop == CLUSTER_MAX_HOPS || !cluster_reply_redirect(r, node_host(c, node), &rd)) return r;
        freeReplyObject(r);
        if (enter_cluster(c) != 0) return NULL;
        node = cluster_map_node(c->map, rd.host, rd.port);
        if (node < 0) {
            set_broken(c, "too many cluster nodes");
            return NULL;
        }
        asking = rd.ask;
        if (!rd.ask) {
            c->map->owner[rd.slot] = (int16_t)node;
            if (refresh(c, node) != 0) return NULL;
        }
    }
}

/* route() with SIGPIPE held off (sigpipe.h): hiredis writes with write(). */
static redisReply *route_to(rconn *c, const char *cmd, size_t len, int slot)
{
    sigpipe_guard g;
    sigpipe_hold(&g);
    stop_arm(c);
    redisReply *r = route_unguarded(c, cmd, len, slot);
    sigpipe_release(&g);
    return r;
}

static redisReply *route(rconn *c, const char *cmd, size_t len)
{
    return route_to(c, cmd, len, cluster_resp_slot(cmd, len));
}

int rconn_wait_replicas(rconn *c, const char *key, int replicas, int timeout_ms)
{
    char *cmd = NULL;
    int len = redisFormatCommand(&cmd, "WAIT %d %d", replicas, timeout_ms);
    if (len < 0) {
        set_broken(c, "cannot format the command");
        return -1;
    }
    redisReply *r = route_to(c, cmd, (size_t)len, cluster_key_slot(key, strlen(key)));
    redisFreeCommand(cmd);
    int n = r != NULL && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    if (r != NULL) freeReplyObject(r);
    return n;
}

/* Send a command hiredis formatted (len < 0: it could not) and free it. */
static redisReply *route_formatted(rconn *c, char *cmd, int len)
{
    if (len < 0) {
        set_broken(c, "cannot format the command");
        return NULL;
    }
    redisReply *r = route(c, cmd, (size_t)len);
    redisFreeCommand(cmd);
    return r;
}

redisReply *rconn_vcommand(rconn *c, const char *fmt, va_list ap)
{
    char *cmd = NULL;
    int len = redisvFormatCommand(&cmd, fmt, ap);
    return route_formatted(c, cmd, len);
}

redisReply *rconn_command(rconn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = rconn_vcommand(c, fmt, ap);
    va_end(ap);
    return r;
}

redisReply *rconn_command_argv(rconn *c, int argc, const char **argv, const size_t *argvlen)
{
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
    return route_formatted(c, cmd, len);
}

static int each_master(rconn *c, rconn_node_fn *fn, void *arg, char *err, size_t errlen)
{
    if (c->broken) {
        err_set(err, errlen, "Redis connection error: %s", c->errstr);
        return -1;
    }
    if (c->map == NULL) {
        redisReply *r = redisCommand(c->seed, "CLUSTER SLOTS");
        if (r == NULL) {
            set_broken(c, c->seed->errstr[0] ? c->seed->errstr : "connection error");
            err_set(err, errlen, "Redis connection error: %s", c->errstr);
            return -1;
        }
        /* "ERR This instance has cluster support disabled" (or a refusal): one server. */
        int cluster = r->type == REDIS_REPLY_ARRAY;
        if (cluster && (enter_cluster(c) != 0 || cluster_map_load(c->map, r, c->url.host, err, errlen) != 0)) {
            if (c->broken) err_set(err, errlen, "%s", c->errstr);
            freeReplyObject(r);
            return -1;
        }
        freeReplyObject(r);
        if (!cluster) {
            char where[600];
            if (redis_url_format(&c->url, where, sizeof where) != 0) where[0] = '\0';
            return fn(c->seed, where, arg, err, errlen);
        }
    } else {
        int any = cluster_map_owner(c->map, 0) >= 0 ? cluster_map_owner(c->map, 0) : 0;
        if (refresh(c, any) != 0) {
            err_set(err, errlen, "Redis connection error: %s", c->errstr);
            return -1;
        }
    }
    char owns[CLUSTER_MAX_NODES] = {0};
    for (int s = 0; s < CLUSTER_SLOTS; s++)
        if (c->map->owner[s] >= 0) owns[c->map->owner[s]] = 1;
    for (int i = 0; i < c->map->nnodes; i++) {
        if (!owns[i]) continue;
        char where[300];
        snprintf(where, sizeof where, "%s:%d", c->map->node[i].host, c->map->node[i].port);
        redisContext *ctx = node_ctx(c, i);
        if (ctx == NULL) {
            err_set(err, errlen, "%s", c->errstr);
            return -1;
        }
        if (fn(ctx, where, arg, err, errlen) != 0) return -1;
    }
    return 0;
}

int rconn_scan_node(redisContext *node, const char *addr, const char *pattern, rconn_key_fn *fn, void *arg, char *err,
                    size_t errlen)
{
    char cursor[32] = "0";
    do {
        redisReply *r = redisCommand(node, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            err_set(err, errlen, "%s: SCAN: %s", addr, r && r->type == REDIS_REPLY_ERROR ? r->str : node->errstr);
            if (r) freeReplyObject(r);
            return -1;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++)
            if (fn(node, r->element[1]->element[i]->str, arg) < 0) {
                err_set(err, errlen, "%s: at key %s", addr, r->element[1]->element[i]->str);
                freeReplyObject(r);
                return -1;
            }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

int rconn_each_master(rconn *c, rconn_node_fn *fn, void *arg, char *err, size_t errlen)
{
    sigpipe_guard g;
    sigpipe_hold(&g);
    /* fn's commands (FUNCTION LOAD, SCAN) are not sliced: they get the whole timeout at once */
    if (sliced(c)) set_socket_timeouts(c, timeval_from_ms(c->timeout_ms));
    int rc = each_master(c, fn, arg, err, errlen);
    if (sliced(c)) set_socket_timeouts(c, socket_timeout(c));
    sigpipe_release(&g);
    return rc;
}
