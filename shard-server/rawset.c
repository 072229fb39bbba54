/*
 * rawset.c: a write-only Redis connection for big blob SETs, without copies.
 *
 * hiredis 0.14 copies a command into its output buffer (sds) and, after every partial write(), moves
 * the unsent rest to the front of that buffer: a 12.5 MB SET on a non-blocking socket costs hundreds of
 * memmoves of megabytes (measured: ~200 ms per 12.5 MB log entry, 60 MB/s). This connection instead
 * sends the RESP command straight from the caller's memory with writev() (RESP prefix, blob header,
 * payload, CRLF: the payload is never copied in user space) and parses the only replies SET, AUTH and
 * SELECT give (+status / -error lines), in order.
 *
 * Same contract as rasync: commands are only accepted while connected (else -1, callback not called);
 * the callback is called exactly once, with NULL if the connection is lost before the reply (outcome
 * unknown); the caller keeps the payload alive until then. The connection reconnects with jittered
 * backoff and is dropped when commands are pending and nothing came back for stall_ms. A final refusal
 * of its login (rconn_error_final) stops the process, as in rasync.c.
 *
 * Redis Cluster (route.c): as in rasync.c, a SET goes to this connection's twin on the master of its
 * key once the slot map is known, and a MOVED or ASK reply is followed here (the caller's payload is
 * still alive: its callback has not run), so callers only see the final reply.
 */
#include "ss.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "rconn.h"
#include "util.h"

#define RS_BACKOFF_BASE_MS 100
#define RS_BACKOFF_CAP_MS 5000
#define RS_WATCH_MS 500
#define RS_SOCKET_BUFFER (4 * 1024 * 1024)
#define RS_MAX_IOV 64

typedef struct rs_item {
    struct rs_item *next;
    struct iovec iov[4];
    int niov;
    int first;            /* first iovec with bytes left */
    ra_cb *cb;
    void *priv;
    int login;            /* AUTH/SELECT: an error drops the connection */
    char prefix[600];     /* RESP up to the payload length line */
    uint8_t head[BLOB_HEADER_MAX];
    /* to resend after a redirection */
    rawset *owner;        /* the connection the caller used */
    int hops;
    size_t key_off, key_len; /* the key, in prefix */
    size_t hlen, plen;
    const void *payload;
} rs_item;

static void rs_connect(rawset *rs);
static int rs_follow(rs_item *it, const cluster_redirect *rd);

static void rs_set_events(rawset *rs)
{
    if (rs->fd < 0)
        return;
    if (rs->send != NULL || rs->connecting)
        event_add(rs->ev_write, NULL);
    else
        event_del(rs->ev_write);
}

static void rs_schedule_retry(rawset *rs)
{
    if (rs->stopping)
        return;
    unsigned wait = backoff_ms(rs->attempt++, RS_BACKOFF_BASE_MS, RS_BACKOFF_CAP_MS);
    struct timeval tv = { .tv_sec = wait / 1000, .tv_usec = (wait % 1000) * 1000 };
    evtimer_add(rs->retry_timer, &tv);
}

/* Close the socket, fail every pending command (callbacks after the state is clean: they may send). */
static void rs_drop(rawset *rs, const char *why)
{
    if (rs->fd >= 0) {
        if (!rs->stopping)
            log_warn("redis %s connection lost (%s); reconnecting", rs->name, why);
        event_del(rs->ev_read);
        event_del(rs->ev_write);
        close(rs->fd);
        rs->fd = -1;
    }
    rs->ready = 0;
    rs->connecting = 0;
    rs_item *list = rs->head;
    rs->head = rs->tail = rs->send = NULL;
    rs->pending = 0;
    rs->rlen = 0;
    while (list != NULL) {
        rs_item *it = list;
        list = it->next;
        if (it->cb != NULL)
            it->cb(NULL, it->priv);
        free(it);
    }
    rs_schedule_retry(rs);
}

static void rs_enqueue(rawset *rs, rs_item *it)
{
    it->next = NULL;
    if (rs->tail != NULL)
        rs->tail->next = it;
    else
        rs->head = it;
    rs->tail = it;
    if (rs->send == NULL)
        rs->send = it;
    if (rs->pending == 0)
        rs->last_activity = now_ms();
    rs->pending++;
}

/* A small command of string arguments (AUTH, SELECT, ASKING). */
static void rs_enqueue_small(rawset *rs, int argc, const char **argv, int login)
{
    rs_item *it = calloc(1, sizeof *it);
    if (it == NULL)
        return;
    size_t off = (size_t)snprintf(it->prefix, sizeof it->prefix, "*%d\r\n", argc);
    for (int i = 0; i < argc && off < sizeof it->prefix; i++)
        off += (size_t)snprintf(it->prefix + off, sizeof it->prefix - off, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
    if (off >= sizeof it->prefix) {
        free(it);
        return;
    }
    it->iov[0] = (struct iovec){ it->prefix, off };
    it->niov = 1;
    it->login = login;
    rs_enqueue(rs, it);
}

/* AUTH and SELECT, queued first on a new socket (a twin may queue SETs behind them while connecting). */
static void rs_enqueue_login(rawset *rs)
{
    const redis_url *u = rs->url;
    if (u->user[0] != '\0') {
        const char *argv[3] = { "AUTH", u->user, u->pass };
        rs_enqueue_small(rs, 3, argv, 1);
    } else if (u->pass[0] != '\0') {
        const char *argv[2] = { "AUTH", u->pass };
        rs_enqueue_small(rs, 2, argv, 1);
    }
    if (u->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", u->db);
        const char *argv[2] = { "SELECT", db };
        rs_enqueue_small(rs, 2, argv, 1);
    }
}

static void rs_on_connected(rawset *rs)
{
    rs->connecting = 0;
    rs->ready = 1;
    rs->attempt = 0;
    log_info("redis %s connection established", rs->name);
    event_add(rs->ev_read, NULL);
    rs_set_events(rs);
}

/* Write what the socket takes now. soft: a failure only leaves the write event armed (the loop's
 * next attempt fails again and drops the connection), so callbacks never run inside rs_set. */
static void rs_write(rawset *rs, int soft)
{
    while (rs->send != NULL) {
        struct iovec iov[RS_MAX_IOV];
        int n = 0;
        for (rs_item *it = rs->send; it != NULL && n < RS_MAX_IOV; it = it->next)
            for (int i = it->first; i < it->niov && n < RS_MAX_IOV; i++)
                iov[n++] = it->iov[i];
        ssize_t w = writev(rs->fd, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK || soft)
                break;
            rs_drop(rs, strerror(errno));
            return;
        }
        size_t left = (size_t)w;
        while (rs->send != NULL) {
            rs_item *it = rs->send;
            while (it->first < it->niov && left >= it->iov[it->first].iov_len) {
                left -= it->iov[it->first].iov_len;
                it->iov[it->first].iov_len = 0;
                it->first++;
            }
            if (it->first < it->niov) {
                it->iov[it->first].iov_base = (char *)it->iov[it->first].iov_base + left;
                it->iov[it->first].iov_len -= left;
                break;
            }
            rs->send = it->next;
        }
    }
    rs_set_events(rs);
}

static void rs_on_write(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rawset *rs = arg;
    if (rs->connecting) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(rs->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            char why[160];
            snprintf(why, sizeof why, "connect failed: %s", strerror(soerr ? soerr : errno));
            rs_drop(rs, why); /* fails what was queued meanwhile, retries later */
            return;
        }
        rs_on_connected(rs);
    }
    rs_write(rs, 0);
}

/* One reply line: hand it to the oldest pending command. */
static int rs_reply(rawset *rs, char *line, size_t len)
{
    rs_item *it = rs->head;
    if (it == NULL || it == rs->send) /* a reply to something not (fully) sent */
        return -1;
    if (line[0] != '+' && line[0] != '-')
        return -1;
    rs->head = it->next;
    if (rs->head == NULL)
        rs->tail = NULL;
    rs->pending--;
    rs->last_activity = now_ms();
    redisReply r;
    memset(&r, 0, sizeof r);
    r.type = line[0] == '+' ? REDIS_REPLY_STATUS : REDIS_REPLY_ERROR;
    r.str = line + 1;
    r.len = len - 1;
    int drop = 0;
    if (it->login && r.type == REDIS_REPLY_ERROR) {
        if (rconn_error_final(r.str))
            ss_refused(rs->name, r.str);
        else
            log_error("redis %s connection: login failed: %s (check the Redis URL)", rs->name, r.str);
        drop = 1;
    }
    cluster_redirect rd;
    if (it->owner != NULL && it->owner->route != NULL && it->hops < CLUSTER_MAX_HOPS &&
        cluster_reply_redirect(&r, rs->url->host, &rd)) {
        if (rs_follow(it, &rd) == 0) {
            free(it);
            return 0;
        }
        log_warn("redis %s connection: cannot follow %s", it->owner->name, r.str);
        if (it->cb != NULL)
            it->cb(NULL, it->priv); /* not executed; the caller retries as after a lost connection */
        free(it);
        return 0;
    }
    if (it->cb != NULL)
        it->cb(&r, it->priv);
    free(it);
    return drop ? -1 : 0;
}

static void rs_on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rawset *rs = arg;
    for (;;) {
        if (rs->rlen == sizeof rs->rbuf) {
            rs_drop(rs, "reply line too long");
            return;
        }
        ssize_t n = read(rs->fd, rs->rbuf + rs->rlen, sizeof rs->rbuf - rs->rlen);
        if (n == 0) {
            rs_drop(rs, "closed by Redis");
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            rs_drop(rs, strerror(errno));
            return;
        }
        rs->rlen += (size_t)n;
        size_t start = 0;
        for (;;) {
            char *nl = memchr(rs->rbuf + start, '\n', rs->rlen - start);
            if (nl == NULL)
                break;
            size_t end = (size_t)(nl - rs->rbuf);
            if (end == start || rs->rbuf[end - 1] != '\r') {
                rs_drop(rs, "malformed reply");
                return;
            }
            rs->rbuf[end - 1] = '\0';
            int fdnow = rs->fd;
            if (rs_reply(rs, rs->rbuf + start, end - 1 - start) != 0) {
                if (rs->fd == fdnow)
                    rs_drop(rs, "unexpected reply");
                return;
            }
            if (rs->fd != fdnow) /* a callback dropped or closed us */
                return;
            start = end + 1;
        }
        memmove(rs->rbuf, rs->rbuf + start, rs->rlen - start);
        rs->rlen -= start;
    }
}

static void rs_connect(rawset *rs)
{
    if (rs->stopping || rs->fd >= 0)
        return;
    const redis_url *u = rs->url;
    int fd = -1;
    int rc;
    if (u->is_unix) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t plen = strlen(u->path);
        if (plen >= sizeof sa.sun_path) {
            errno = ENAMETOOLONG;
            goto fail;
        }
        memcpy(sa.sun_path, u->path, plen + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            goto fail;
        rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    } else {
        char port[16];
        snprintf(port, sizeof port, "%d", u->port);
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
        if (getaddrinfo(u->host, port, &hints, &res) != 0 || res == NULL)
            goto fail;
        fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            freeaddrinfo(res);
            goto fail;
        }
        int one = 1, bytes = RS_SOCKET_BUFFER;
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        rc = connect(fd, res->ai_addr, res->ai_addrlen);
        freeaddrinfo(res);
    }
    if (rc != 0 && errno != EINPROGRESS && errno != EAGAIN)
        goto fail;
    rs->fd = fd;
    event_assign(rs->ev_read, rs->base, fd, EV_READ | EV_PERSIST, rs_on_read, rs);
    event_assign(rs->ev_write, rs->base, fd, EV_WRITE | EV_PERSIST, rs_on_write, rs);
    rs_enqueue_login(rs);
    if (rc == 0) {
        rs_on_connected(rs);
    } else {
        rs->connecting = 1;
        event_add(rs->ev_write, NULL);
    }
    return;
fail:
    log_warn("redis %s connection: cannot connect: %s; retrying", rs->name, strerror(errno));
    if (fd >= 0)
        close(fd);
    rs_schedule_retry(rs);
}

static void rs_on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rs_connect(arg);
}

static void rs_on_watch(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rawset *rs = arg;
    if (rs->fd < 0 || rs->pending <= 0)
        return;
    uint64_t idle = now_ms() - rs->last_activity;
    if (idle >= (uint64_t)rs->stall_ms) {
        char why[96];
        snprintf(why, sizeof why, "no reply for %llu ms with %d commands pending", (unsigned long long)idle,
                 rs->pending);
        rs_drop(rs, why);
    }
}

int rs_init(rawset *rs, const char *name, const redis_url *url, struct event_base *base, int stall_ms)
{
    memset(rs, 0, sizeof *rs);
    rs->name = name;
    rs->url = url;
    rs->base = base;
    rs->stall_ms = stall_ms;
    rs->fd = -1;
    rs->retry_timer = evtimer_new(base, rs_on_retry, rs);
    rs->watch_timer = event_new(base, -1, EV_PERSIST, rs_on_watch, rs);
    rs->ev_read = event_new(base, -1, 0, rs_on_read, rs);
    rs->ev_write = event_new(base, -1, 0, rs_on_write, rs);
    if (rs->retry_timer == NULL || rs->watch_timer == NULL || rs->ev_read == NULL || rs->ev_write == NULL)
        return -1;
    struct timeval tv = { .tv_sec = 0, .tv_usec = RS_WATCH_MS * 1000 };
    evtimer_add(rs->watch_timer, &tv);
    rs_connect(rs);
    return 0;
}

/* Queue SET key head||payload on rs (a twin accepts while it connects; else rs must be ready). */
static int rs_send(rawset *rs, rawset *owner, const char *key, size_t klen, const uint8_t *head, size_t hlen,
                   const void *payload, size_t plen, ra_cb *cb, void *priv, int asking, int hops)
{
    if (rs->fd < 0 || !(rs->ready || rs->is_twin) || hlen > BLOB_HEADER_MAX)
        return -1;
    rs_item *it = calloc(1, sizeof *it);
    if (it == NULL)
        return -1;
    int off = snprintf(it->prefix, sizeof it->prefix, "*3\r\n$3\r\nSET\r\n$%zu\r\n", klen);
    if (off < 0 || (size_t)off + klen + 40 >= sizeof it->prefix) {
        free(it);
        return -1;
    }
    it->key_off = (size_t)off;
    it->key_len = klen;
    memcpy(it->prefix + off, key, klen);
    off += (int)klen;
    off += snprintf(it->prefix + off, sizeof it->prefix - (size_t)off, "\r\n$%zu\r\n", hlen + plen);
    memcpy(it->head, head, hlen);
    it->iov[0] = (struct iovec){ it->prefix, (size_t)off };
    it->iov[1] = (struct iovec){ it->head, hlen };
    it->niov = 2;
    if (plen > 0)
        it->iov[it->niov++] = (struct iovec){ (void *)payload, plen };
    it->iov[it->niov++] = (struct iovec){ (void *)"\r\n", 2 };
    it->cb = cb;
    it->priv = priv;
    it->owner = owner;
    it->hops = hops;
    it->hlen = hlen;
    it->plen = plen;
    it->payload = payload;
    if (asking) {
        const char *argv[1] = { "ASKING" };
        rs_enqueue_small(rs, 1, argv, 0);
    }
    rs_enqueue(rs, it);
    if (!rs->connecting)
        rs_write(rs, 1); /* start at once; the rest goes out from the loop as the socket drains */
    rs_set_events(rs);
    return 0;
}

/* A twin owns its URL and name. */
typedef struct rs_twin_conn {
    rawset rs; /* first: a twin is freed through its rawset pointer */
    redis_url url;
    char name[300];
} rs_twin_conn;

/* This connection's twin on cluster node `node` (-1: itself), opened now if needed; NULL if it cannot be. */
static rawset *rs_twin(rawset *rs, int node)
{
    if (node < 0)
        return rs;
    if (rs->twin[node] != NULL)
        return rs->twin[node];
    rs_twin_conn *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    if (route_node_url(rs->route, node, rs->url, &t->url)) {
        free(t);
        return rs->twin[node] = rs;
    }
    snprintf(t->name, sizeof t->name, "%s@%s:%d", rs->name, t->url.host, t->url.port);
    if (rs_init(&t->rs, t->name, &t->url, rs->base, rs->stall_ms) != 0) {
        free(t);
        return NULL;
    }
    t->rs.is_twin = 1;
    t->rs.route = rs->route;
    return rs->twin[node] = &t->rs;
}

/* Resend the SET of `it` where a MOVED/ASK reply says; 0 if queued there. */
static int rs_follow(rs_item *it, const cluster_redirect *rd)
{
    int node = route_learn(it->owner->route, rd);
    rawset *to = node >= 0 ? rs_twin(it->owner, node) : NULL;
    return to == NULL ? -1
                      : rs_send(to, it->owner, it->prefix + it->key_off, it->key_len, it->head, it->hlen, it->payload,
                                it->plen, it->cb, it->priv, rd->ask, it->hops + 1);
}

int rs_set(rawset *rs, const char *key, const uint8_t *head, size_t hlen, const void *payload, size_t plen,
           ra_cb *cb, void *priv)
{
    size_t klen = strlen(key);
    rawset *to = rs_twin(rs, route_node(rs->route, cluster_key_slot(key, klen)));
    return to == NULL ? -1 : rs_send(to, rs, key, klen, head, hlen, payload, plen, cb, priv, 0, 0);
}

void rs_close(rawset *rs)
{
    for (int i = 0; i < CLUSTER_MAX_NODES; i++)
        if (rs->twin[i] != NULL && rs->twin[i] != rs) {
            rs_close(rs->twin[i]);
            free(rs->twin[i]);
            rs->twin[i] = NULL;
        }
    rs->stopping = 1;
    if (rs->fd >= 0 || rs->head != NULL)
        rs_drop(rs, "closing");
}
