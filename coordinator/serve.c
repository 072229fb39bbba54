/* serve.c: `coordinator serve`, the operator's long-running process.
 *
 * Workers and shard-servers evict dead members themselves whenever they call the control plane,
 * but a run whose every worker is blocked still needs someone to notice a death on time: serve
 * calls dl_reap every second, and prints a one-line summary every --print-every seconds. It holds
 * no state, so several may run and any may be killed. (The HTTP dashboard comes with issue 6.) */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator.h"
#include "keys.h"
#include "log.h"
#include "rconn.h"
#include "util.h"

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static void summary(redisContext *rc, const char *run) {
    json_t *doc = coord_fetch_status(rc, run);
    if (!doc) return;
    json_t *st = json_object_get(doc, "state");
    log_info("run %s: round %s, %zu workers, %zu servers, commits %s, deaths %s, rejections %s",
             run, json_string_value(json_object_get(st, "round:0")),
             json_array_size(json_object_get(doc, "workers")), json_array_size(json_object_get(doc, "servers")),
             json_string_value(json_object_get(st, "commits")), json_string_value(json_object_get(st, "deaths")),
             json_string_value(json_object_get(st, "rejections")));
    json_decref(doc);
}

int cmd_serve(int argc, char **argv) {
    coord_common c = {0};
    long long print_every = 10;
    for (int i = 0; i < argc; i++) {
        int r = coord_common_flag(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "--print-every") && i + 1 < argc) {
            if (parse_int(argv[++i], 0, 86400, &print_every) < 0) {
                fprintf(stderr, "coordinator serve: --print-every wants seconds\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: bin/coordinator serve --redis URL --run NAME [--print-every S]\n");
            return 0;
        } else {
            fprintf(stderr, "coordinator serve: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    redisContext *rc = coord_connect(&c);
    if (!rc) return 1;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    char key[KEY_MAX], err[512];
    key_run(key, sizeof key, c.run, "config");
    uint64_t last_print = 0;
    log_info("serving run %s (reaping every second)", c.run);
    while (!g_stop) {
        if (!rc || rc->err) {
            if (rc) redisFree(rc);
            rc = rconn_connect_retry(&c.url, 5000, 0, (const volatile int *)&g_stop, err, sizeof err);
            if (!rc) break;
        }
        redisReply *r = redisCommand(rc, "FCALL dl_reap 1 %s", key);
        if (r && r->type == REDIS_REPLY_INTEGER && r->integer > 0) log_warn("evicted %lld dead worker(s)", r->integer);
        else if (r && r->type == REDIS_REPLY_ERROR) log_warn("reap: %s", r->str);
        if (r) freeReplyObject(r);
        if (print_every > 0 && now_ms() - last_print >= (uint64_t)print_every * 1000) {
            summary(rc, c.run);
            last_print = now_ms();
        }
        sleep_ms(1000);
    }
    if (rc) redisFree(rc);
    log_info("stopped");
    return 0;
}
