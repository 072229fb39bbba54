/* http_server.c: the evhttp plumbing of the coordinator's HTTP side: routing, the bearer token,
 * the browser-safety checks, body limits, and JSON replies (docs/http.md).
 *
 *   GET  /, /dashboard        the embedded page (404 with --no-dashboard)
 *   GET  /status              JSON document of the run
 *   GET  /metrics             Prometheus text
 *   POST /control/<action>    save_state, kick_worker, update_optimizer, update_num_workers, shutdown
 *
 * Safety: bodies over 64 KiB are refused by evhttp (413) before they are buffered; with a token,
 * POST /control needs "Authorization: Bearer <token>"; a browser POST whose Origin is not this
 * server is refused (CSRF); and when bound to loopback, a request whose Host is not a loopback name
 * is refused (DNS rebinding), so a web page cannot drive a run on the operator's machine. A connection has
 * HTTP_REQUEST_DEADLINE_S to send its request (http_deadline.c: one sent a byte at a time held it for ever)
 * and serves one request (`Connection: close`). */
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/util.h"
#include "coordinator.h"
#include "net/accept_guard.h"
#include "net/http_deadline.h"
#include "http.h"
#include "redis/runconf_load.h"

struct http_server {
    struct evhttp *http;
    accept_guard *guard; /* pauses accepting when accept() fails (EMFILE): libevent's listener spun */
    http_deadlines *deadlines;
    http_options o;
    int port;
    int loopback;
    uint64_t started_ms;
};

static void reply_raw(struct evhttp_request *req, int code, const char *ctype, const char *body, size_t len)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", ctype);
    evhttp_add_header(h, "Cache-Control", "no-store");
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "Connection", "close"); /* one request per connection: its deadline covers it all */
    struct evbuffer *b = evbuffer_new();
    if (body) evbuffer_add(b, body, len);
    const char *reason = code == 200   ? "OK"
                         : code == 400 ? "Bad Request"
                         : code == 401 ? "Unauthorized"
                         : code == 403 ? "Forbidden"
                         : code == 404 ? "Not Found"
                         : code == 405 ? "Method Not Allowed"
                         : code == 409 ? "Conflict"
                         : code == 413 ? "Payload Too Large"
                         : code == 500 ? "Internal Server Error"
                         : code == 501 ? "Not Implemented"
                         : code == 502 ? "Bad Gateway"
                         : code == 503 ? "Service Unavailable"
                                       : "Error";
    evhttp_send_reply(req, code, reason, b);
    evbuffer_free(b);
}

/* Steals doc. */
static void reply_json(struct evhttp_request *req, int code, json_t *doc)
{
    char *s = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(doc);
    if (!s) {
        reply_raw(req, 500, "application/json", "{\"error\":\"cannot encode the reply\"}", 35);
        return;
    }
    size_t n = strlen(s);
    char *t = malloc(n + 2);
    if (t) {
        memcpy(t, s, n);
        t[n] = '\n';
        reply_raw(req, code, "application/json", t, n + 1);
        free(t);
    }
    free(s);
}

static void reply_error(struct evhttp_request *req, int code, const char *msg)
{
    reply_json(req, code, json_pack("{s:s}", "error", msg));
}

/* The connection to Redis, or NULL after a 503 (JSON, or plain text for /metrics). */
static rconn *redis_or_503(http_server *s, struct evhttp_request *req, int text)
{
    char err[512] = "";
    rconn *rc = s->o.redis(s->o.redis_arg, err, sizeof err);
    if (!rc) {
        char msg[700];
        snprintf(msg, sizeof msg, "redis unavailable: %s", err);
        if (text)
            reply_raw(req, 503, "text/plain; charset=utf-8", msg, strlen(msg));
        else
            reply_error(req, 503, msg);
    }
    return rc;
}

/* The HTTP status of a failed status_fetch: 404 for a run that is not in this Redis, as control answers. */
static int fetch_failure_code(int rc)
{
    return rc == RUNCONF_ABSENT ? 404 : 503;
}

static void serve_status(http_server *s, struct evhttp_request *req)
{
    rconn *rc = redis_or_503(s, req, 0);
    if (!rc) return;
    json_t *raw = NULL, *events = NULL;
    char err[512];
    int st = status_fetch(rc, s->o.run, 500, &raw, &events, err, sizeof err);
    if (st < 0) {
        reply_error(req, fetch_failure_code(st), err);
        return;
    }
    json_t *doc = status_document(raw, events, s->o.token != NULL, s->o.dashboard, s->o.save_dir != NULL,
                                  (double)(now_ms() - s->started_ms) / 1000.0);
    if (s->o.url) json_object_set_new(doc, "redis", topology_read(rc, s->o.url, s->o.topology));
    json_decref(raw);
    json_decref(events);
    reply_json(req, 200, doc);
}

static void serve_metrics(http_server *s, struct evhttp_request *req)
{
    rconn *rc = redis_or_503(s, req, 1);
    if (!rc) return;
    json_t *raw = NULL;
    char err[512];
    int st = status_fetch(rc, s->o.run, 0, &raw, NULL, err, sizeof err);
    if (st < 0) { /* (Prometheus text, not JSON: a scraper shows the body as it is) */
        reply_raw(req, fetch_failure_code(st), "text/plain; charset=utf-8", err, strlen(err));
        return;
    }
    char *txt = metrics_text(raw, s->o.run);
    json_decref(raw);
    reply_raw(req, 200, "text/plain; version=0.0.4; charset=utf-8", txt, strlen(txt));
    free(txt);
}

static void serve_dashboard(http_server *s, struct evhttp_request *req)
{
    if (!s->o.dashboard) {
        reply_error(req, 404, "the dashboard is disabled (--no-dashboard)");
        return;
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    /* nothing may be fetched from anywhere but this server; no framing (clickjacking) */
    evhttp_add_header(h, "Content-Security-Policy",
                      "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                      "connect-src 'self'; img-src data:; frame-ancestors 'none'; form-action 'none'");
    evhttp_add_header(h, "X-Frame-Options", "DENY");
    evhttp_add_header(h, "Referrer-Policy", "no-referrer");
    reply_raw(req, 200, "text/html; charset=utf-8", dashboard_html, dashboard_html_len);
}

/* Constant-time comparison of the presented bearer token. */
static int token_ok(http_server *s, struct evhttp_request *req)
{
    if (!s->o.token) return 1;
    const char *a = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!a || strncasecmp(a, "Bearer ", 7)) return 0;
    a += 7;
    while (*a == ' ') a++;
    size_t n = strlen(a), m = strlen(s->o.token);
    unsigned char diff = n != m;
    for (size_t i = 0; i < m; i++) diff |= (unsigned char)(s->o.token[i] ^ (i < n ? a[i] : 0));
    return diff == 0;
}

/* Host header names a loopback address ("127.0.0.1:8512", "localhost", "[::1]:8512")? */
static int host_is_loopback(const char *h)
{
    char name[256];
    size_t n;
    if (h[0] == '[') {
        const char *e = strchr(h, ']');
        if (!e) return 0;
        n = (size_t)(e - h - 1);
        h++;
    } else {
        const char *c = strchr(h, ':');
        n = c ? (size_t)(c - h) : strlen(h);
    }
    if (n == 0 || n >= sizeof name) return 0;
    memcpy(name, h, n);
    name[n] = 0;
    if (!strcasecmp(name, "localhost")) return 1;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, name, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, name, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

/* save_state on the saver thread: the reply goes out when the file is written. If the client goes
 * away first, evhttp frees the request: the connection's close callback cancels the reply. */
typedef struct save_wait {
    http_server *s;
    struct evhttp_request *req;
    struct evhttp_connection *conn;
} save_wait;

static void save_conn_closed(struct evhttp_connection *conn, void *arg)
{
    save_wait *w = arg;
    (void)conn;
    saver_cancel(w->s->o.saver, w);
    free(w);
}

static void save_done(void *arg, int ok, const char *path, int64_t version, const char *err)
{
    save_wait *w = arg;
    evhttp_connection_set_closecb(w->conn, NULL, NULL);
    if (ok)
        reply_json(w->req, 200,
                   json_pack("{s:s,s:s,s:I}", "status", "ok", "path", path, "version", (json_int_t)version));
    else {
        char msg[700];
        snprintf(msg, sizeof msg, "save_state: %s", err);
        reply_error(w->req, 500, msg);
    }
    free(w);
}

static void save_async(http_server *s, struct evhttp_request *req)
{
    save_wait *w = calloc(1, sizeof *w);
    if (!w) {
        reply_error(req, 500, "out of memory");
        return;
    }
    w->s = s;
    w->req = req;
    w->conn = evhttp_request_get_connection(req);
    if (saver_request(s->o.saver, save_done, w) < 0) {
        free(w);
        reply_error(req, 503, "save_state: cannot start a save now (too many waiting)");
        return;
    }
    evhttp_connection_set_closecb(w->conn, save_conn_closed, w);
}

/* Who may control: a browser's POST only from this very server (Origin), and the bearer token when serve
 * has one. 1, or 0 after the refusal was answered (403, 401). */
static int control_allowed(http_server *s, struct evhttp_request *req)
{
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    /* a browser sends Origin with every POST; it must be this very server */
    const char *origin = evhttp_find_header(in, "Origin"), *host = evhttp_find_header(in, "Host");
    if (origin) {
        char self[300];
        snprintf(self, sizeof self, "http://%s", host ? host : "");
        if (!host || strcasecmp(origin, self)) {
            reply_error(req, 403, "cross-origin control request refused");
            return 0;
        }
    }
    if (!token_ok(s, req)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer");
        reply_error(req, 401, "control endpoints need 'Authorization: Bearer <token>' (the --token-file of serve)");
        return 0;
    }
    return 1;
}

/* The request's JSON body (an empty one is {}); NULL after the error was answered (413, 400). */
static json_t *control_body(struct evhttp_request *req)
{
    struct evbuffer *body = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(body);
    if (len > HTTP_MAX_BODY) {
        reply_error(req, 413, "body larger than 64 KiB");
        return NULL;
    }
    if (len == 0) return json_object(); /* Forgather's {} bodies may be sent empty */
    json_error_t jerr;
    json_t *doc = json_loadb((const char *)evbuffer_pullup(body, (ev_ssize_t)len), len, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc) {
        char msg[400];
        snprintf(msg, sizeof msg, "malformed JSON body (line %d, column %d): %s", jerr.line, jerr.column, jerr.text);
        reply_error(req, 400, msg);
    }
    return doc;
}

static void serve_control(http_server *s, struct evhttp_request *req, const char *action)
{
    json_t *doc;
    if (!control_allowed(s, req) || !(doc = control_body(req))) return;
    control_env env = {.run = s->o.run, .save_dir = s->o.save_dir, .keep = s->o.keep};
    if (!strcmp(action, "save_state") && s->o.saver && json_is_object(doc) && json_object_size(doc) == 0) {
        json_decref(doc);
        save_async(s, req);
        return;
    }
    int known = 0;
    for (const char *const *a = control_actions; *a; a++) known |= !strcmp(*a, action);
    rconn *rc = NULL; /* an unknown action, or a body that is no object, is answered without Redis */
    if (known && json_is_object(doc) && !(rc = redis_or_503(s, req, 0))) {
        json_decref(doc);
        return;
    }
    json_t *reply;
    int code = control_run(rc, &env, action, doc, &reply);
    json_decref(doc);
    reply_json(req, code, reply);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    http_server *s = arg;
    http_deadlines_met(s->deadlines, req);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !*path) path = "/";
    log_debug("http %d %s", (int)cmd, path);
    if (s->loopback) {
        const char *host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
        if (host && !host_is_loopback(host)) {
            reply_error(req, 403,
                        "this server is bound to loopback: use http://127.0.0.1:PORT or http://localhost:PORT");
            return;
        }
    }
    int get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;
    if (!strncmp(path, "/control/", 9)) {
        if (cmd != EVHTTP_REQ_POST) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "POST");
            reply_error(req, 405, "control endpoints take POST");
            return;
        }
        serve_control(s, req, path + 9);
        return;
    }
    int known = !strcmp(path, "/") || !strcmp(path, "/dashboard") || !strcmp(path, "/dashboard/") ||
                !strcmp(path, "/status") || !strcmp(path, "/metrics");
    if (!known) {
        reply_error(req, 404, "no such endpoint (see /status, /metrics, /dashboard, /control/<action>)");
        return;
    }
    if (!get) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
        reply_error(req, 405, "this endpoint takes GET");
        return;
    }
    if (!strcmp(path, "/status"))
        serve_status(s, req);
    else if (!strcmp(path, "/metrics"))
        serve_metrics(s, req);
    else
        serve_dashboard(s, req);
}

static int addr_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (!strcasecmp(host, "localhost")) return 1;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

http_server *http_start(struct event_base *base, const http_options *o, char *err, size_t errlen)
{
    http_server *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->o = *o;
    if (!s->o.host) s->o.host = "127.0.0.1";
    s->loopback = addr_is_loopback(s->o.host);
    s->started_ms = now_ms();
    s->http = evhttp_new(base);
    if (!s->http) {
        err_set(err, errlen, "evhttp_new failed");
        free(s);
        return NULL;
    }
    evhttp_set_flags(s->http, EVHTTP_SERVER_LINGERING_CLOSE); /* a 413 reaches the client before close */
    evhttp_set_max_body_size(s->http, HTTP_MAX_BODY);
    evhttp_set_max_headers_size(s->http, 16 * 1024);
    evhttp_set_timeout(s->http, 30);
    s->deadlines = http_deadlines_new(s->http, base);
    /* every method evhttp knows reaches on_request, which answers a wrong one 405 in JSON with Allow (left
     * out, TRACE and CONNECT got evhttp's HTML 501) */
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH |
                                            EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT);
    evhttp_set_gencb(s->http, on_request, s);
    struct evhttp_bound_socket *h = evhttp_bind_socket_with_handle(s->http, s->o.host, (ev_uint16_t)s->o.port);
    if (!h) {
        err_set(err, errlen, "cannot listen on %s:%d (in use? not a local address?)", s->o.host, s->o.port);
        http_deadlines_free(s->deadlines);
        evhttp_free(s->http);
        free(s);
        return NULL;
    }
    s->guard = accept_guard_new(evhttp_bound_socket_get_listener(h), "HTTP");
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    s->port = s->o.port;
    if (getsockname(evhttp_bound_socket_get_fd(h), (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return s;
}

int http_port(const http_server *s)
{
    return s->port;
}

void http_stop(http_server *s)
{
    if (!s) return;
    accept_guard_free(s->guard);
    http_deadlines_free(s->deadlines);
    evhttp_free(s->http);
    free(s);
}
