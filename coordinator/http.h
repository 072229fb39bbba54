/* http.h: the coordinator's HTTP side (docs/http.md): GET /status (JSON), GET /metrics (Prometheus
 * text), GET / and /dashboard (one embedded, self-contained HTML page), POST /control/<action>.
 *
 * The server runs on the caller's libevent loop (evhttp) and holds no state of its own: every
 * answer is built from one dl_status call (plus the tail of the events stream), and every change is
 * one Redis Function call (dl_kick, dl_set, dl_shutdown), so several coordinators may serve the same
 * run and any may be killed. Control actions are shared with `coordinator control` (control.c). */
#ifndef DILOCO_COORD_HTTP_H
#define DILOCO_COORD_HTTP_H

#include <hiredis/hiredis.h>

#include "redis/rconn.h"
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "redis/url.h"

struct event_base;

#define HTTP_MAX_BODY (64 * 1024)

/* Where the HTTP side gets its Redis connection: returns a connected context (reconnecting if the
 * last one broke) or NULL + err. Provided by the process that runs the loop (serve.c). */
typedef rconn *(*http_redis_fn)(void *arg, char *err, size_t errlen);
typedef struct saver saver;

typedef struct http_options {
    const char *host;     /* bind address, default 127.0.0.1 */
    int port;             /* 0 = any free port */
    const char *run;      /* run name */
    const char *token;    /* bearer token for /control (NULL = no auth) */
    const char *save_dir; /* save_state exports checkpoints here (NULL: save_state unavailable) */
    int keep;             /* checkpoints kept in save_dir (0 = all) */
    saver *saver;         /* runs those exports off the loop (http_save.c); NULL = synchronously */
    int dashboard;        /* 0: GET / and /dashboard answer 404 */
    http_redis_fn redis;
    void *redis_arg;
    const redis_url *url;            /* for the Redis topology in /status (NULL: left out) */
    struct topology_watch *topology; /* the last failover serve saw (coordinator.h) */
} http_options;

typedef struct http_server http_server;

/* Binds and registers on base; NULL + err on failure. http_port() is the port actually bound. */
http_server *http_start(struct event_base *base, const http_options *o, char *err, size_t errlen);
int http_port(const http_server *s);
void http_stop(http_server *s);

/* ---- shared by the HTTP server and the CLI (http_control.c) ---- */

/* The control actions, by the names of Forgather's /control/<action> endpoints. */
extern const char *const control_actions[];

typedef struct control_env {
    const char *run;
    const char *save_dir; /* where save_state writes checkpoints; NULL = not configured */
    int keep;             /* checkpoints to keep there (0 = all) */
} control_env;

/* Run one control action with a parsed JSON body (an object). Returns the HTTP status to answer
 * with (200, 4xx, 5xx) and sets *reply to {"status":"ok",...} or {"error":"..."} (caller decrefs).
 * Every change is exactly one FCALL; a body that fails validation changes nothing. save_state
 * changes nothing in Redis: it exports a checkpoint (coordinator/checkpoint.c) into env->save_dir. */
int control_run(rconn *rc, const control_env *env, const char *action, json_t *body, json_t **reply);

/* ---- documents built from dl_status (http_status.c) ---- */

/* An async run's progress for a line of text ("submissions applied N", with each fragment's version when it
 * has several) from dl_status's document raw into buf: 0, or -1 (buf untouched) for a sync run. */
int status_async_text(json_t *raw, char *buf, size_t cap);
/* The /status document from the raw dl_status document and the recent events (may be NULL).
 * New reference. */
json_t *status_document(json_t *raw, json_t *events, int auth_required, int dashboard, int can_save, double uptime_s);
/* Read dl_status + the last n_events events: the raw pieces status_document() wants. -1 + err, or
 * RUNCONF_ABSENT + err when the run is not in this Redis (no function library, or no config of the run),
 * with nothing left for the caller to free. */
int status_fetch(rconn *rc, const char *run, int n_events, json_t **raw, json_t **events, char *err, size_t errlen);
/* Prometheus text exposition of the run (malloc'd, NUL-terminated). */
char *metrics_text(json_t *raw, const char *run);

/* ---- checkpoint export on a thread (http_save.c) ---- */

/* Called on the loop thread when the save a caller waited for is done. */
typedef void (*saver_done_fn)(void *arg, int ok, const char *path, int64_t version, const char *err);
saver *saver_new(struct event_base *base, const redis_url *url, const char *run, const char *dir, int keep);
/* Start a save (0), or join the one in progress (1); fn(arg, ...) is called when it is done (fn may be
 * NULL). -1 if it cannot start. */
int saver_request(saver *s, saver_done_fn fn, void *arg);
/* The waiter with this arg no longer wants its callback (its client went away). */
void saver_cancel(saver *s, void *arg);
int saver_busy(const saver *s);
void saver_free(saver *s); /* waits for a save in progress */

/* The embedded dashboard page (build/gen/dashboard_html.c, from coordinator/dashboard.html). */
extern const char dashboard_html[];
extern const unsigned long dashboard_html_len;

#endif
