/*
 * frame.c: the socket framing of frame.h. All I/O is non-blocking calls (MSG_DONTWAIT) driven by
 * poll() against one deadline, so a stalled peer costs at most the timeout, whether the fd itself is
 * blocking or not.
 */
#include "base/util.h"
#include "math/hash.h"
#include "net/frame.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <xxhash.h>

/* Milliseconds left until deadline for poll(): -1 = forever, 0 = expired. */
static int time_left(uint64_t deadline)
{
    if (deadline == 0) return -1;
    uint64_t now = now_ms();
    if (now >= deadline) return 0;
    uint64_t left = deadline - now;
    return left > 1000000000u ? 1000000000 : (int)left;
}

static uint64_t deadline_from(int timeout_ms)
{
    return timeout_ms <= 0 ? 0 : now_ms() + (uint64_t)timeout_ms;
}

#define STOP_SLICE_MS 100 /* with a stop watched, a silent wait looks at it this often */

static _Thread_local frame_stop_fn *t_stopped; /* frame_watch_stop: this thread's, or NULL */
static _Thread_local void *t_stop_arg;

void frame_watch_stop(frame_stop_fn *stopped, void *arg)
{
    t_stopped = stopped;
    t_stop_arg = arg;
}

/* 0 when fd is ready for events, -1 on timeout, error or the thread's stop (frame_watch_stop). */
static int wait_ready(int fd, short events, uint64_t deadline, const char *what, char *err, size_t errlen)
{
    for (;;) {
        int left = time_left(deadline);
        if (left == 0) {
            err_set(err, errlen, "timeout while %s", what);
            return -1;
        }
        if (t_stopped != NULL && (left < 0 || left > STOP_SLICE_MS)) left = STOP_SLICE_MS;
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, left);
        if (rc > 0) return 0; /* errors and hang-ups surface in the following send/recv */
        if (rc < 0 && errno != EINTR) {
            err_set(err, errlen, "poll failed while %s: %s", what, strerror(errno));
            return -1;
        }
        if (rc == 0 && t_stopped != NULL && t_stopped(t_stop_arg)) {
            err_set(err, errlen, "stopped while %s (no progress for %d ms)", what, STOP_SLICE_MS);
            return -1;
        }
    }
}

/* Drop n sent bytes from the front of the iovec array. */
static void advance_iov(struct iovec **iov, int *iovcnt, size_t n)
{
    while (*iovcnt > 0 && n >= (*iov)->iov_len) {
        n -= (*iov)->iov_len;
        (*iov)++;
        (*iovcnt)--;
    }
    if (*iovcnt > 0) {
        (*iov)->iov_base = (char *)(*iov)->iov_base + n;
        (*iov)->iov_len -= n;
    }
}

static int send_all(int fd, struct iovec *iov, int iovcnt, uint64_t deadline, char *err, size_t errlen)
{
    while (iovcnt > 0) {
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0) {
            advance_iov(&iov, &iovcnt, (size_t)n);
            continue;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            err_set(err, errlen, "send failed: %s", strerror(errno));
            return -1;
        }
        if (wait_ready(fd, POLLOUT, deadline, "sending a frame", err, errlen) != 0) return -1;
    }
    return 0;
}

static int recv_all(int fd, uint8_t *buf, size_t len, uint64_t deadline, int frame_started, char *err, size_t errlen)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, buf + got, len - got, MSG_DONTWAIT);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0) {
            if (!frame_started && got == 0)
                err_set(err, errlen, "connection closed by peer");
            else
                err_set(err, errlen, "truncated frame: connection closed in the middle of a frame");
            return -1;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            err_set(err, errlen, "recv failed: %s", strerror(errno));
            return -1;
        }
        if (wait_ready(fd, POLLIN, deadline, "receiving a frame", err, errlen) != 0) return -1;
    }
    return 0;
}

/* Receive buf[have..len) and return the XXH3_64bits of buf[0..len) in *sum, hashing each chunk right
 * after it arrives, while it is still in the cache, instead of in a second pass over the whole buffer. */
#define RECV_HASH_CHUNK ((size_t)256 * 1024)

static int recv_all_hashed(int fd, uint8_t *buf, size_t have, size_t len, uint64_t deadline, uint64_t *sum, char *err,
                           size_t errlen)
{
    XXH3_state_t *xs = XXH3_createState();
    if (xs == NULL) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    XXH3_64bits_reset(xs);
    hash_update(xs, buf, have);
    int rc = 0;
    for (size_t off = have; off < len && rc == 0; off += RECV_HASH_CHUNK) {
        size_t n = len - off < RECV_HASH_CHUNK ? len - off : RECV_HASH_CHUNK;
        rc = recv_all(fd, buf + off, n, deadline, 1, err, errlen);
        if (rc == 0) hash_update(xs, buf + off, n);
    }
    *sum = len > 0 ? XXH3_64bits_digest(xs) : 0; /* the blob convention for an empty payload */
    XXH3_freeState(xs);
    return rc;
}

static int send_frame(int fd, blob_header *h, const void *payload, size_t payload_len, int hashed, int timeout_ms,
                      char *err, size_t errlen)
{
    uint8_t prefix[FRAME_PREFIX_LEN];
    uint8_t head[BLOB_HEADER_MAX];
    int hl = hashed ? blob_encode_header_hashed(h, payload_len, head, sizeof head, err, errlen)
                    : blob_encode_header(h, payload, payload_len, head, sizeof head, err, errlen);
    if (hl < 0) return -1;
    if (payload_len > UINT32_MAX - (size_t)hl) {
        err_set(err, errlen, "frame too large: %zu-byte payload (max 4 GiB per frame)", payload_len);
        return -1;
    }
    uint32_t total = (uint32_t)((size_t)hl + payload_len);
    for (int i = 0; i < FRAME_PREFIX_LEN; i++) prefix[i] = (uint8_t)(total >> (8 * i));
    struct iovec iov[3] = {
        {.iov_base = prefix, .iov_len = sizeof prefix},
        {.iov_base = head, .iov_len = (size_t)hl},
        {.iov_base = (void *)payload, .iov_len = payload_len},
    };
    return send_all(fd, iov, payload_len > 0 ? 3 : 2, deadline_from(timeout_ms), err, errlen);
}

int frame_send(int fd, blob_header *h, const void *payload, size_t payload_len, int timeout_ms, char *err,
               size_t errlen)
{
    return send_frame(fd, h, payload, payload_len, 0, timeout_ms, err, errlen);
}

int frame_send_hashed(int fd, blob_header *h, const void *payload, size_t payload_len, int timeout_ms, char *err,
                      size_t errlen)
{
    return send_frame(fd, h, payload, payload_len, 1, timeout_ms, err, errlen);
}

int frame_recv(int fd, uint8_t *buf, size_t cap, blob_header *h, const uint8_t **payload, size_t *payload_len,
               int timeout_ms, char *err, size_t errlen)
{
    uint64_t deadline = deadline_from(timeout_ms);
    uint8_t prefix[FRAME_PREFIX_LEN];
    if (recv_all(fd, prefix, sizeof prefix, deadline, 0, err, errlen) != 0) return -1;
    uint32_t total = 0;
    for (int i = 0; i < FRAME_PREFIX_LEN; i++) total |= (uint32_t)prefix[i] << (8 * i);
    if (total > cap) {
        err_set(err, errlen, "oversize frame: %u bytes, at most %zu accepted", total, cap);
        return -1;
    }
    if (recv_all(fd, buf, total, deadline, 1, err, errlen) != 0) return -1;
    return blob_decode(buf, total, h, payload, payload_len, err, errlen);
}

int frame_recv_place(int fd, uint8_t *buf, size_t cap, size_t max_total, frame_place_fn place, void *arg,
                     blob_header *h, const uint8_t **payload, size_t *payload_len, int timeout_ms, char *err,
                     size_t errlen)
{
    uint64_t deadline = deadline_from(timeout_ms);
    uint8_t prefix[FRAME_PREFIX_LEN];
    if (recv_all(fd, prefix, sizeof prefix, deadline, 0, err, errlen) != 0) return -1;
    uint32_t total = 0;
    for (int i = 0; i < FRAME_PREFIX_LEN; i++) total |= (uint32_t)prefix[i] << (8 * i);
    if (total <= cap) {
        if (recv_all(fd, buf, total, deadline, 1, err, errlen) != 0) return -1;
        return blob_decode(buf, total, h, payload, payload_len, err, errlen);
    }
    if (total > max_total || cap < BLOB_HEADER_MAX) {
        err_set(err, errlen, "oversize frame: %u bytes, at most %zu accepted", total, max_total);
        return -1;
    }
    /* the header is at most BLOB_HEADER_MAX bytes: read that much, the rest of it is payload */
    size_t got = BLOB_HEADER_MAX;
    if (recv_all(fd, buf, got, deadline, 1, err, errlen) != 0) return -1;
    size_t hl;
    if (blob_decode_header(buf, got, h, &hl, err, errlen) != 0) return -1;
    size_t plen = (size_t)total - hl;
    uint64_t sum;
    uint8_t *dst = place(h, plen, arg);
    if (dst == NULL) {
        err_set(err, errlen, "unexpected %u-byte '%s' frame", total, h->op);
        return -1;
    }
    memcpy(dst, buf + hl, got - hl);
    if (recv_all_hashed(fd, dst, got - hl, plen, deadline, &sum, err, errlen) != 0) return -1;
    if (blob_check_payload_hashed(h, plen, sum, err, errlen) != 0) return -1;
    *payload = dst;
    *payload_len = plen;
    return 0;
}

/* Split "host:port" / "[v6]:port" into host and port strings. */
static int split_host_port(const char *s, char *host, size_t hcap, char *port, size_t pcap, char *err, size_t errlen)
{
    const char *colon = strrchr(s, ':');
    const char *h = s;
    size_t hlen = colon ? (size_t)(colon - s) : 0;
    if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
        h = s + 1;
        hlen -= 2;
    }
    if (colon == NULL || hlen == 0 || colon[1] == '\0') {
        err_set(err, errlen, "bad address '%s' (want host:port)", s);
        return -1;
    }
    long long p;
    if (parse_int(colon + 1, 1, 65535, &p) != 0 || hlen >= hcap) {
        err_set(err, errlen, "bad address '%s' (want host:port, port 1..65535)", s);
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    snprintf(port, pcap, "%lld", p);
    return 0;
}

/* Frames are written whole, so Nagle would only delay their last segment. The buffer sizes are left to
 * the kernel: a fixed SO_RCVBUF/SO_SNDBUF turns Linux's autotuning off and is silently capped at
 * net.core.rmem_max/wmem_max (212992 bytes by default: a window for ~33 Mbit/s at 50 ms of round trip),
 * while autotuning grows to net.ipv4.tcp_rmem/tcp_wmem's maximum (6 and 4 MiB by default). A failure
 * only costs speed, so it is ignored. */
static void tune_socket(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Try one resolved address; returns a connected non-blocking fd or -1 with err. */
static int connect_one(const struct addrinfo *ai, uint64_t deadline, char *err, size_t errlen)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        err_set(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    tune_socket(fd);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            err_set(err, errlen, "%s", strerror(errno));
            goto error;
        }
        if (wait_ready(fd, POLLOUT, deadline, "connecting", err, errlen) != 0) goto error;
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            err_set(err, errlen, "%s", strerror(soerr ? soerr : errno));
            goto error;
        }
    }
    return fd;

error:
    close(fd);
    return -1;
}

int tcp_connect(const char *host_port, int timeout_ms, char *err, size_t errlen)
{
    char host[256], port[8], why[256] = "no address";
    if (split_host_port(host_port, host, sizeof host, port, sizeof port, err, errlen) != 0) return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0) {
        err_set(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(gai));
        return -1;
    }
    uint64_t deadline = deadline_from(timeout_ms);
    int fd = -1;
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
        fd = connect_one(ai, deadline, why, sizeof why);
    freeaddrinfo(res);
    if (fd < 0) {
        err_set(err, errlen, "cannot connect to %s: %s", host_port, why);
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        err_set(err, errlen, "cannot make the socket to %s blocking: %s", host_port, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}
