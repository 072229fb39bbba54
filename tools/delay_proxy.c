/*
 * delay_proxy.c: bin/delay-proxy, a TCP forwarder that adds a fixed round-trip time (and optional
 * jitter) to every connection it carries, so a run on one machine can be measured under WAN latency
 * (issue 28, docs/compression.md "Latency"; netem is not in every kernel).
 *
 *   bin/delay-proxy --rtt-ms 100 [--jitter-ms 5] [--split both|up|down] \
 *       --map 127.0.0.1:7001=127.0.0.1:6379 --map 127.0.0.1:7002=127.0.0.1:9001 ...
 *
 * Each --map LISTEN=TARGET listens on LISTEN and forwards every connection it accepts to TARGET: the
 * workers point at the proxy's Redis address, and each shard-server runs with --listen TARGET and
 * --advertise LISTEN, so the workers' data-plane connections go through it too.
 *
 * Where the delay goes (--split): both (default) delays each direction by RTT/2; up delays only the
 * bytes from the client to the target by the whole RTT; down only the bytes back. A request/answer
 * exchange (a Redis PING, a push and its ack) costs one RTT either way. Every chunk of bytes read is
 * held until now + delay + jitter (jitter uniform in [-J, +J]), and never before the chunk read before
 * it on the same connection and direction: bytes keep their order, as TCP's do. What it does not
 * model: the RTT of the TCP handshake (a connection to the proxy opens at once; workers keep their
 * connections, so it costs only the first round) and a rate limit (bench/shaped_round shapes links).
 *
 * At most --buffer-mb per connection and direction is held (default 64): beyond it the proxy stops
 * reading that side until its output drained, like a window of that size. SIGINT or SIGTERM stop it
 * cleanly, after a line with the connections and bytes it carried.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>

#include "base/opts.h"

#define MAX_MAPS 16

typedef struct {
    struct sockaddr_storage listen, target;
    socklen_t listen_len, target_len;
    char spec[300];
} proxy_map;

typedef struct {
    double rtt_ms, jitter_ms;
    int split; /* 0 both, 1 up, 2 down */
    int buffer_mb;
    long long seed;
    proxy_map maps[MAX_MAPS];
    int nmaps;
} proxy_opts;

/* One chunk of bytes read, held until due (microseconds, CLOCK_MONOTONIC); buf NULL: the end of the
 * stream (the source closed), delivered like data so the close comes after the last byte. */
typedef struct chunk {
    TAILQ_ENTRY(chunk) link;
    struct evbuffer *buf;
    uint64_t due_us;
} chunk;
TAILQ_HEAD(chunk_queue, chunk);

struct conn;

/* One direction of a connection: bytes read from `from`, held, then written to `to`. */
typedef struct pipe_dir {
    struct conn *c;
    struct bufferevent *from, *to;
    struct chunk_queue q;
    struct event *timer;
    size_t held;         /* bytes in q */
    uint64_t last_due;   /* due time of the last chunk queued: the next is never earlier */
    double delay_ms;     /* this direction's share of the RTT */
    int closing;         /* the end of stream reached `to`: free the connection once its output drained */
    uint64_t *bytes_out; /* the proxy's counter for this direction */
} pipe_dir;

typedef struct conn {
    pipe_dir up, down; /* up: client to target; down: target to client */
} conn;

static proxy_opts g_opts;
static uint64_t g_rng;
static uint64_t g_conns, g_bytes_up, g_bytes_down;

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A uniform double in [-1, 1] (xorshift64*: reproducible with --seed, good enough for jitter). */
static double rand_sym(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    uint64_t r = g_rng * 2685821657736338717ull;
    return (double)(r >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

static void conn_free(conn *c)
{
    pipe_dir *dirs[2] = {&c->up, &c->down};
    for (int i = 0; i < 2; i++) {
        chunk *k;
        while ((k = TAILQ_FIRST(&dirs[i]->q)) != NULL) {
            TAILQ_REMOVE(&dirs[i]->q, k, link);
            if (k->buf) evbuffer_free(k->buf);
            free(k);
        }
        event_free(dirs[i]->timer);
    }
    bufferevent_free(c->up.from);
    bufferevent_free(c->down.from);
    free(c);
}

static void arm_timer(pipe_dir *p)
{
    chunk *k = TAILQ_FIRST(&p->q);
    if (!k) return;
    uint64_t now = now_us(), wait = k->due_us > now ? k->due_us - now : 0;
    struct timeval tv = {.tv_sec = (time_t)(wait / 1000000u), .tv_usec = (suseconds_t)(wait % 1000000u)};
    evtimer_add(p->timer, &tv);
}

static size_t pending(const pipe_dir *p) { return p->held + evbuffer_get_length(bufferevent_get_output(p->to)); }

/* The due chunks of p go to its output, in order; the end of stream marks it closing. */
static void deliver(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    pipe_dir *p = arg;
    uint64_t now = now_us();
    chunk *k;
    while ((k = TAILQ_FIRST(&p->q)) != NULL && k->due_us <= now) {
        TAILQ_REMOVE(&p->q, k, link);
        if (k->buf) {
            size_t n = evbuffer_get_length(k->buf);
            p->held -= n;
            *p->bytes_out += n;
            evbuffer_add_buffer(bufferevent_get_output(p->to), k->buf);
            evbuffer_free(k->buf);
        } else {
            p->closing = 1;
        }
        free(k);
    }
    if (p->closing && evbuffer_get_length(bufferevent_get_output(p->to)) == 0) {
        conn_free(p->c);
        return;
    }
    arm_timer(p);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    conn *c = arg;
    pipe_dir *p = bev == c->up.from ? &c->up : &c->down;
    chunk *k = calloc(1, sizeof *k);
    if (!k || !(k->buf = evbuffer_new())) {
        free(k);
        fprintf(stderr, "delay-proxy: out of memory: closing a connection\n");
        conn_free(c);
        return;
    }
    evbuffer_add_buffer(k->buf, bufferevent_get_input(bev));
    p->held += evbuffer_get_length(k->buf);
    double d = p->delay_ms + g_opts.jitter_ms * rand_sym();
    uint64_t due = now_us() + (uint64_t)(d > 0 ? d * 1000.0 : 0);
    k->due_us = due > p->last_due ? due : p->last_due;
    p->last_due = k->due_us;
    int was_empty = TAILQ_EMPTY(&p->q);
    TAILQ_INSERT_TAIL(&p->q, k, link);
    if (was_empty) arm_timer(p);
    if (pending(p) > (size_t)g_opts.buffer_mb << 20) bufferevent_disable(bev, EV_READ);
}

/* The output of `to` drained: read again from the other side if it was held back, or finish a close. */
static void on_write(struct bufferevent *bev, void *arg)
{
    conn *c = arg;
    pipe_dir *p = bev == c->up.to ? &c->up : &c->down;
    if (p->closing) {
        conn_free(c);
        return;
    }
    if (!(bufferevent_get_enabled(p->from) & EV_READ) && pending(p) <= ((size_t)g_opts.buffer_mb << 20) / 2)
        bufferevent_enable(p->from, EV_READ);
}

/* End of stream or an error on one side: the other side gets the bytes already read, then the close. */
static void on_event(struct bufferevent *bev, short what, void *arg)
{
    conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        int one = 1;
        setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return;
    }
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))) return;
    pipe_dir *p = bev == c->up.from ? &c->up : &c->down;
    if (what & BEV_EVENT_ERROR && bev == c->up.to)
        fprintf(stderr, "delay-proxy: the connection to the target failed: %s\n",
                evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    bufferevent_disable(bev, EV_READ);
    chunk *k = calloc(1, sizeof *k);
    if (!k) {
        conn_free(c);
        return;
    }
    uint64_t due = now_us() + (uint64_t)(p->delay_ms * 1000.0);
    k->due_us = due > p->last_due ? due : p->last_due;
    p->last_due = k->due_us;
    int was_empty = TAILQ_EMPTY(&p->q);
    TAILQ_INSERT_TAIL(&p->q, k, link);
    if (was_empty) arm_timer(p);
}

static void pipe_init(pipe_dir *p, conn *c, struct bufferevent *from, struct bufferevent *to, double delay_ms,
                      uint64_t *counter)
{
    p->c = c;
    p->from = from;
    p->to = to;
    TAILQ_INIT(&p->q);
    p->timer = evtimer_new(bufferevent_get_base(from), deliver, p);
    p->delay_ms = delay_ms;
    p->bytes_out = counter;
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)sa, (void)salen;
    proxy_map *m = arg;
    struct event_base *base = evconnlistener_get_base(l);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn *c = calloc(1, sizeof *c);
    struct bufferevent *client = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    struct bufferevent *target = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!c || !client || !target) {
        fprintf(stderr, "delay-proxy: out of memory: refusing a connection\n");
        if (client) bufferevent_free(client);
        else evutil_closesocket(fd);
        if (target) bufferevent_free(target);
        free(c);
        return;
    }
    double rtt = g_opts.rtt_ms;
    double up = g_opts.split == 0 ? rtt / 2 : g_opts.split == 1 ? rtt : 0;
    pipe_init(&c->up, c, client, target, up, &g_bytes_up);
    pipe_init(&c->down, c, target, client, rtt - up, &g_bytes_down);
    bufferevent_setcb(client, on_read, on_write, on_event, c);
    bufferevent_setcb(target, on_read, on_write, on_event, c);
    if (!c->up.timer || !c->down.timer ||
        bufferevent_socket_connect(target, (struct sockaddr *)&m->target, (int)m->target_len) != 0) {
        fprintf(stderr, "delay-proxy: cannot connect to %s\n", m->spec);
        conn_free(c);
        return;
    }
    bufferevent_enable(client, EV_READ | EV_WRITE);
    bufferevent_enable(target, EV_READ | EV_WRITE);
    g_conns++;
}

static int resolve(const char *hostport, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || colon == hostport || (size_t)(colon - hostport) >= sizeof host || !colon[1]) return -1;
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0 || !res) return -1;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* --map LISTEN=TARGET, each HOST:PORT */
static int parse_map(const char *v, void *dest)
{
    proxy_opts *o = dest;
    if (o->nmaps == MAX_MAPS) return -1;
    proxy_map *m = &o->maps[o->nmaps];
    char listen[300];
    const char *eq = strchr(v, '=');
    if (!eq || (size_t)(eq - v) >= sizeof listen) return -1;
    memcpy(listen, v, (size_t)(eq - v));
    listen[eq - v] = '\0';
    if (resolve(listen, &m->listen, &m->listen_len) != 0 || resolve(eq + 1, &m->target, &m->target_len) != 0)
        return -1;
    snprintf(m->spec, sizeof m->spec, "%s", v);
    o->nmaps++;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: delay-proxy --rtt-ms MS --map LISTEN=TARGET [--map ...] [options]\n"
               "\n"
               "Forwards every TCP connection accepted on LISTEN (HOST:PORT) to TARGET (HOST:PORT) and adds a\n"
               "fixed round-trip time to it, keeping each connection's bytes in order. Point workers at the\n"
               "proxy's Redis address and run each shard-server with --listen TARGET --advertise LISTEN.\n"
               "\n"
               "  --map LISTEN=TARGET   a forwarded address (repeat for each; at most 16)\n"
               "  --rtt-ms MS           round-trip time added to every connection (default 0)\n"
               "  --jitter-ms J         each chunk's delay varies uniformly in [-J, +J] ms, order kept (default 0)\n"
               "  --split both|up|down  both: RTT/2 each way (default); up: the whole RTT on client-to-target\n"
               "                        bytes; down: the whole RTT on the bytes back\n"
               "  --buffer-mb N         bytes held per connection and direction before reading pauses (default 64)\n"
               "  --seed N              seed of the jitter (default 1)\n"
               "  -h, --help            this text\n"
               "\n"
               "Prints 'listening LISTEN -> TARGET' per map once ready; SIGINT or SIGTERM stop it.\n");
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig, (void)what;
    event_base_loopbreak(arg);
}

int main(int argc, char **argv)
{
    proxy_opts *o = &g_opts;
    o->buffer_mb = 64;
    o->seed = 1;
    const opt_spec specs[] = {
        {.name = "map", .kind = OPT_CUSTOM, .dest = o, .parse = parse_map, .wants = "LISTEN=TARGET (HOST:PORT each)"},
        {.name = "rtt-ms", .kind = OPT_DOUBLE, .dest = &o->rtt_ms, .min = 0, .max = 600000},
        {.name = "jitter-ms", .kind = OPT_DOUBLE, .dest = &o->jitter_ms, .min = 0, .max = 600000},
        {.name = "split", .kind = OPT_CHOICE, .dest = &o->split, .choices = "both|up|down"},
        {.name = "buffer-mb", .kind = OPT_INT, .dest = &o->buffer_mb, .lo = 1, .hi = 4096},
        {.name = "seed", .kind = OPT_LLONG, .dest = &o->seed, .lo = 0, .hi = INT64_MAX},
        {0},
    };
    int rc = opts_parse_cmd("delay-proxy", usage, specs, argc, argv, 1, NULL, NULL);
    if (rc != 0) return opts_exit_status(rc);
    if (o->nmaps == 0) {
        fprintf(stderr, "delay-proxy: at least one --map LISTEN=TARGET is needed (see --help)\n");
        return OPTS_EXIT_USAGE;
    }
    g_rng = (uint64_t)o->seed * 0x9E3779B97F4A7C15ull + 1;
    signal(SIGPIPE, SIG_IGN);
    struct event_base *base = event_base_new();
    struct evconnlistener *ls[MAX_MAPS] = {0};
    struct event *sigs[2] = {evsignal_new(base, SIGINT, on_signal, base), evsignal_new(base, SIGTERM, on_signal, base)};
    for (int i = 0; i < 2; i++) evsignal_add(sigs[i], NULL);
    int status = 0;
    for (int i = 0; i < o->nmaps && status == 0; i++) {
        ls[i] = evconnlistener_new_bind(base, on_accept, &o->maps[i], LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE, 128,
                                        (struct sockaddr *)&o->maps[i].listen, (int)o->maps[i].listen_len);
        if (!ls[i]) {
            fprintf(stderr, "delay-proxy: cannot listen for %s: %s\n", o->maps[i].spec, strerror(errno));
            status = 1;
        } else {
            const char *eq = strchr(o->maps[i].spec, '=');
            printf("listening %.*s -> %s (rtt %.1f ms, jitter %.1f ms)\n", (int)(eq - o->maps[i].spec),
                   o->maps[i].spec, eq + 1, o->rtt_ms, o->jitter_ms);
        }
    }
    fflush(stdout);
    if (status == 0) event_base_dispatch(base);
    fprintf(stderr, "delay-proxy: stopping: %llu connections, %llu bytes up, %llu bytes down\n", (unsigned long long)g_conns, (unsigned long long)g_bytes_up,
            (unsigned long long)g_bytes_down);
    for (int i = 0; i < o->nmaps; i++)
        if (ls[i]) evconnlistener_free(ls[i]);
    for (int i = 0; i < 2; i++) event_free(sigs[i]);
    event_base_free(base);
    return status;
}
