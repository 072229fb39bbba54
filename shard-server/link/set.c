/*
 * set.c: the RLINK_SET transport (rlink.h): SET of big blobs, written without copies.
 *
 * hiredis 0.14 copies a command into its output buffer (sds) and, after every partial write(), moves
 * the unsent rest to the front of that buffer: a big SET on a non-blocking socket costs hundreds of
 * memmoves of megabytes. This transport instead sends the RESP command straight from the caller's
 * memory with writev() (RESP prefix, blob header, payload, CRLF: the payload is never copied in user
 * space) and parses the only replies SET, AUTH and SELECT give (+status / -error lines), in order.
 * The caller keeps the payload alive until its callback runs, so a MOVED or ASK reply can resend the
 * SET on the right twin (route.c).
 */
#include "internal.h"

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

#include "base/log.h"
#include "base/util.h"
#include "format/blob.h"
#include "redis/rconn.h"

#define RS_SOCKET_BUFFER (4 * 1024 * 1024)
#define RS_MAX_IOV 64

typedef struct rlink_item {
    struct rlink_item *next;
    struct iovec iov[4];
    int niov;
    int first; /* first iovec with bytes left */
    rlink_cb *cb;
    void *priv;
    int login;        /* AUTH/SELECT: an error drops the connection */
    char prefix[600]; /* RESP up to the payload length line */
    uint8_t head[BLOB_HEADER_MAX];
    /* to resend after a redirection */
    rlink *owner; /* the connection the caller used */
    int hops;
    size_t key_off, key_len; /* the key, in prefix */
    size_t hlen, plen;
    const void *payload;
} rl_item;

static int rs_follow(rl_item *it, rlink *to, int ask);

static void rs_set_events(rlink *rs)
{
    if (rs->fd < 0) return;
    if (rs->send != NULL || rs->connecting)
        event_add(rs->ev_write, NULL);
    else
        event_del(rs->ev_write);
}

/* Close the socket, fail every pending command (callbacks after the state is clean: they may send). why: for the
 * log line (NULL: said already). */
static void rs_drop(rlink *rs, const char *why)
{
    if (rs->fd >= 0) {
        if (!rs->stopping && why != NULL) log_warn("redis %s connection lost (%s); reconnecting", rs->name, why);
        event_del(rs->ev_read);
        event_del(rs->ev_write);
        close(rs->fd);
        rs->fd = -1;
    }
    rs->connecting = 0;
    rl_item *list = rs->head;
    rs->head = rs->tail = rs->send = NULL;
    rs->rlen = 0;
    rl_state_lost(rs);
    while (list != NULL) {
        rl_item *it = list;
        list = it->next;
        if (it->cb != NULL) it->cb(NULL, it->priv);
        free(it);
    }
}

static void rs_enqueue(rlink *rs, rl_item *it)
{
    it->next = NULL;
    if (rs->tail != NULL)
        rs->tail->next = it;
    else
        rs->head = it;
    rs->tail = it;
    if (rs->send == NULL) rs->send = it;
    rl_state_sent(rs);
}

/* A small command of string arguments (AUTH, SELECT, ASKING). */
static void rs_enqueue_small(rlink *rs, int argc, const char **argv, int login)
{
    rl_item *it = calloc(1, sizeof *it);
    if (it == NULL) return;
    size_t off = (size_t)snprintf(it->prefix, sizeof it->prefix, "*%d\r\n", argc);
    for (int i = 0; i < argc && off < sizeof it->prefix; i++)
        off += (size_t)snprintf(it->prefix + off, sizeof it->prefix - off, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
    if (off >= sizeof it->prefix) {
        free(it);
        return;
    }
    it->iov[0] = (struct iovec){it->prefix, off};
    it->niov = 1;
    it->login = login;
    rs_enqueue(rs, it);
}

/* AUTH and SELECT, queued first on a new socket (a twin may queue SETs behind them while connecting). */
static void rs_enqueue_login(rlink *rs)
{
    rl_login login;
    rl_state_login_commands(&rs->target, &login);
    for (int i = 0; i < login.n; i++) rs_enqueue_small(rs, login.argc[i], login.argv[i], 1);
}

static void rs_on_connected(rlink *rs)
{
    rs->connecting = 0;
    event_add(rs->ev_read, NULL);
    rs_set_events(rs);
    rl_state_connected(rs);
}

/* Write what the socket takes now. soft: a failure only leaves the write event armed (the loop's
 * next attempt fails again and drops the connection), so callbacks never run inside rs_set. */
static void rs_write(rlink *rs, int soft)
{
    while (rs->send != NULL) {
        struct iovec iov[RS_MAX_IOV];
        int n = 0;
        for (rl_item *it = rs->send; it != NULL && n < RS_MAX_IOV; it = it->next)
            for (int i = it->first; i < it->niov && n < RS_MAX_IOV; i++) iov[n++] = it->iov[i];
        ssize_t w = writev(rs->fd, iov, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK || soft) break;
            rs_drop(rs, strerror(errno));
            return;
        }
        size_t left = (size_t)w;
        while (rs->send != NULL) {
            rl_item *it = rs->send;
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
    rlink *rs = arg;
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
static int rs_reply(rlink *rs, char *line, size_t len)
{
    rl_item *it = rs->head;
    if (it == NULL || it == rs->send) { /* a reply to something not (fully) sent */
        /* (Redis at its maxclients says so at accept, and closes: said as such, not as "unexpected reply") */
        if (line[0] == '-' && rl_state_refused(rs, line + 1)) rs_drop(rs, NULL);
        return -1;
    }
    if (line[0] != '+' && line[0] != '-') return -1;
    rs->head = it->next;
    if (rs->head == NULL) rs->tail = NULL;
    rl_state_replied(rs);
    redisReply r;
    memset(&r, 0, sizeof r);
    r.type = line[0] == '+' ? REDIS_REPLY_STATUS : REDIS_REPLY_ERROR;
    r.str = line + 1;
    r.len = len - 1;
    int drop = 0;
    if (it->login && r.type == REDIS_REPLY_ERROR) {
        rl_state_login_failed(rs, "login", r.str);
        drop = 1;
    }
    if (r.type == REDIS_REPLY_ERROR && rconn_error_noreplicas(r.str))
        rl_state_check_master(rs); /* cut off from its replicas: if another master leads now, leave this one */
    if (rl_state_failover_reply(rs, &r)) {
        if (it->cb != NULL) it->cb(NULL, it->priv); /* not executed; the caller retries as after a lost connection */
        free(it);
        return -1; /* drop: the reconnect finds the master again */
    }
    rlink *to;
    int ask;
    if (it->owner != NULL && rl_route_redirect(it->owner, &r, rs->target.host, it->hops, &to, &ask)) {
        if (to != NULL && rs_follow(it, to, ask) == 0) {
            free(it);
            return 0;
        }
        log_warn("redis %s connection: cannot follow %s: " RLINK_CANNOT_FOLLOW_HINT, it->owner->name, r.str);
        if (it->cb != NULL) it->cb(NULL, it->priv); /* not executed; the caller retries as after a lost connection */
        free(it);
        return 0;
    }
    if (it->cb != NULL) it->cb(&r, it->priv);
    free(it);
    if (drop) rs_drop(rs, NULL); /* (rl_state_login_failed said why) */
    return drop ? -1 : 0;
}

static void rs_on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rlink *rs = arg;
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
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            rs_drop(rs, strerror(errno));
            return;
        }
        rs->rlen += (size_t)n;
        size_t start = 0;
        for (;;) {
            char *nl = memchr(rs->rbuf + start, '\n', rs->rlen - start);
            if (nl == NULL) break;
            size_t end = (size_t)(nl - rs->rbuf);
            if (end == start || rs->rbuf[end - 1] != '\r') {
                rs_drop(rs, "malformed reply");
                return;
            }
            rs->rbuf[end - 1] = '\0';
            int fdnow = rs->fd;
            if (rs_reply(rs, rs->rbuf + start, end - 1 - start) != 0) {
                if (rs->fd == fdnow) rs_drop(rs, "unexpected reply");
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

static void rs_connect(rlink *rs)
{
    if (rs->stopping || rs->fd >= 0) return;
    int where = rl_state_resolve(rs);
    if (where != 0) {
        if (where < 0) rl_state_lost(rs);
        return; /* 1: rs_connect is called again once the Sentinels answer */
    }
    const redis_url *u = &rs->target;
    int fd = -1;
    int rc;
    if (u->is_unix) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        size_t plen = strlen(u->path);
        if (plen >= sizeof sa.sun_path) {
            errno = ENAMETOOLONG;
            goto fail;
        }
        memcpy(sa.sun_path, u->path, plen + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) goto fail;
        rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    } else {
        char port[16];
        snprintf(port, sizeof port, "%d", u->port);
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        if (getaddrinfo(u->host, port, &hints, &res) != 0 || res == NULL) goto fail;
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
    if (rc != 0 && errno != EINPROGRESS && errno != EAGAIN) goto fail;
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
    if (fd >= 0) close(fd);
    rl_state_lost(rs);
}

static int rs_is_open(const rlink *rs)
{
    return rs->fd >= 0;
}

/* A twin accepts while it connects; else the socket must be up. */
static int rs_accepting(const rlink *rs)
{
    return rs->fd >= 0 && (rs->ready || rs->is_twin);
}

/* drop also fails what a twin queued before its socket could be opened */
static void rs_close_or_drop(rlink *rs, const char *why)
{
    if (rs->fd >= 0 || rs->head != NULL || !rs->stopping) rs_drop(rs, why);
}

const rlink_transport rl_set_transport = {rs_connect, rs_close_or_drop, rs_is_open, rs_accepting};

/* Queue SET key head||payload on rs (a twin accepts while it connects; else rs must be ready). */
static int rs_send(rlink *rs, rlink *owner, const char *key, size_t klen, const uint8_t *head, size_t hlen,
                   const void *payload, size_t plen, rlink_cb *cb, void *priv, int asking, int hops)
{
    if (!rs_accepting(rs) || hlen > BLOB_HEADER_MAX) return -1;
    rl_item *it = calloc(1, sizeof *it);
    if (it == NULL) return -1;
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
    it->iov[0] = (struct iovec){it->prefix, (size_t)off};
    it->iov[1] = (struct iovec){it->head, hlen};
    it->niov = 2;
    if (plen > 0) it->iov[it->niov++] = (struct iovec){(void *)payload, plen};
    it->iov[it->niov++] = (struct iovec){(void *)"\r\n", 2};
    it->cb = cb;
    it->priv = priv;
    it->owner = owner;
    it->hops = hops;
    it->hlen = hlen;
    it->plen = plen;
    it->payload = payload;
    if (asking) {
        const char *argv[1] = {"ASKING"};
        rs_enqueue_small(rs, 1, argv, 0);
    }
    rs_enqueue(rs, it);
    if (!rs->connecting) rs_write(rs, 1); /* start at once; the rest goes out from the loop as the socket drains */
    rs_set_events(rs);
    return 0;
}

/* Resend the SET of `it` on `to`, where a MOVED/ASK reply says; 0 if queued there. */
static int rs_follow(rl_item *it, rlink *to, int ask)
{
    return rs_send(to, it->owner, it->prefix + it->key_off, it->key_len, it->head, it->hlen, it->payload, it->plen,
                   it->cb, it->priv, ask, it->hops + 1);
}

int rlink_set(rlink *l, const char *key, const uint8_t *head, size_t hlen, const void *payload, size_t plen,
              rlink_cb *cb, void *priv)
{
    if (l->kind != RLINK_SET) return -1;
    size_t klen = strlen(key);
    rlink *to = rl_route_twin(l, rl_route_node(l->route, cluster_key_slot(key, klen)));
    if (to != NULL && to != l && !rs_accepting(to)) to = l; /* see rl_route_twin in internal.h */
    return to == NULL ? -1 : rs_send(to, l, key, klen, head, hlen, payload, plen, cb, priv, 0, 0);
}
