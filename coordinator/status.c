/* status.c: `coordinator status`, the run as a table (or JSON with --json).
 *
 * Everything comes from one dl_status call, so the picture is consistent: rounds and counters,
 * every worker with its heartbeat age, every shard-server, and every shard's version, owner and
 * lease, and whether its durable state was found corrupt (first line and shard table, in red on a
 * terminal; `corrupt`/`corrupt_reason` in the JSON), and the evaluator's validation losses (`evals`). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/opts.h"
#include "coordinator.h"
#include "http.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: bin/coordinator status --redis URL --run NAME [--json]\n\n" COORD_HELP
               "  --json                    print the status as one JSON document: dl_status's, not GET\n"
               "                            /status's (docs/http.md, \"`coordinator status --json`\")\n");
}

static const char *str(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : "-";
}

static double num(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (json_is_number(v)) return json_number_value(v);
    if (json_is_string(v)) return atof(json_string_value(v));
    return 0;
}

/* Red on a terminal, plain in a pipe or file. */
static const char *red(void)
{
    return isatty(STDOUT_FILENO) ? "\033[1;31m" : "";
}
static const char *plain(void)
{
    return isatty(STDOUT_FILENO) ? "\033[0m" : "";
}

/* One line per shard marked corrupt in dl:{R}:shards, before everything else. */
static void print_corrupt(json_t *doc)
{
    json_t *ss = json_object_get(doc, "shards"), *s;
    size_t i;
    json_array_foreach(ss, i, s)
    {
        if (!json_is_string(json_object_get(s, "corrupt"))) continue;
        printf("%sCORRUPT: shard %.0f's durable state (key %s: %s); the run cannot go on: see `coordinator repair "
               "--help`%s\n",
               red(), num(s, "shard"), str(s, "corrupt"), str(s, "corrupt_reason"), plain());
    }
}

/* A sync run's open round (each fragment's when it has several), rounds closed, commits, workers needed. */
static void print_sync_rounds(json_t *doc)
{
    json_t *cfg = json_object_get(doc, "config"), *st = json_object_get(doc, "state");
    int nf = atoi(str(cfg, "fragments"));
    printf("open round%s", nf > 1 ? "s (by fragment) " : " ");
    for (int f = 0; f < (nf > 1 ? nf : 1); f++) {
        char k[32];
        snprintf(k, sizeof k, "round:%d", f);
        printf("%s%s", f ? "/" : "", str(st, k));
    }
    printf("  rounds closed %s  commits %s  workers needed %s (min %s)  ", str(st, "rounds_closed"), str(st, "commits"),
           str(st, "target_workers"), str(st, "min_workers"));
}

static void print_run(json_t *doc)
{
    json_t *cfg = json_object_get(doc, "config"), *st = json_object_get(doc, "state");
    /* "dl:{NAME}" -> NAME */
    char name[128];
    const char *run = str(doc, "run");
    if (sscanf(run, "dl:{%127[^}]}", name) != 1) snprintf(name, sizeof name, "%s", run);
    printf("run %s  mode %s  status %s  trainer %s  %s parameters in %s shards, %s fragment(s)", name, str(cfg, "mode"),
           str(st, "status"), str(cfg, "trainer"), str(cfg, "numel"), str(cfg, "shards"), str(cfg, "fragments"));
    if (num(st, "dylu") != 0) printf("  DyLU (base H %s)", str(st, "dylu_base_sync_every"));
    printf("\n");
    char progress[256];
    if (status_async_text(doc, progress, sizeof progress) == 0) /* no rounds, no barrier to fill */
        printf("%s  shard commits %s  ", progress, str(st, "commits"));
    else
        print_sync_rounds(doc);
    printf("deaths %s  rejections %s  duplicates %.0f\n", str(st, "deaths"), str(st, "rejections"),
           num(st, "duplicates"));
    printf("outer lr %s  momentum %s  nesterov %s  heartbeat timeout %.0f s\n", str(st, "outer_lr"),
           str(st, "outer_momentum"), str(st, "nesterov"), num(st, "heartbeat_timeout_ms") / 1000.0);
    /* runs made before these settings have neither field: bf16 and params */
    const char *cz = str(cfg, "compress"), *dl = str(cfg, "download");
    printf("pseudo-gradients %s", strcmp(cz, "-") ? cz : "bf16");
    if (!strcmp(cz, "topk")) /* (a run made before --topk-bits has 2-bit values) */
        printf(" (density %s, %s bits, beta %s)", str(cfg, "topk_density"),
               strcmp(str(cfg, "topk_bits"), "-") ? str(cfg, "topk_bits") : "2", str(cfg, "topk_beta"));
    printf("  download %s\n", strcmp(dl, "-") ? dl : "params");
    if (!strcmp(str(cfg, "mode"), "async")) /* (runs made before the rule or the lookahead: plain, 0) */
        printf("async: Delayed Nesterov %s (%s), rule %s, workers start %s ahead, max staleness %s\n",
               str(cfg, "dn_buffer"), str(cfg, "dn_variant"),
               strcmp(str(cfg, "async_rule"), "-") ? str(cfg, "async_rule") : "plain",
               strcmp(str(cfg, "async_lookahead"), "-") ? str(cfg, "async_lookahead") : "0",
               num(st, "max_staleness") > 0 ? str(st, "max_staleness") : "no limit"); /* (0: none, lua) */
}

/* The evaluator's newest validation losses (worker --evaluate-every), or how to get them. */
static void print_evals(json_t *doc)
{
    json_t *ev = json_object_get(doc, "evals");
    size_t n = json_array_size(ev);
    if (n == 0) {
        printf("validation loss: none yet (start an evaluator: bin/worker --evaluate-every N)\n");
        return;
    }
    json_t *last = json_array_get(ev, n - 1);
    printf("validation loss %.4f at version %.0f", num(last, "loss"), num(last, "version"));
    for (size_t i = n > 4 ? n - 4 : 0; i + 1 < n; i++) {
        json_t *e = json_array_get(ev, i);
        printf("%s v%.0f %.4f", i == (n > 4 ? n - 4 : 0) ? "  (before:" : ",", num(e, "version"), num(e, "loss"));
    }
    printf("%s\n", n > 1 ? ")" : "");
}

static void print_workers(json_t *doc)
{
    json_t *ws = json_object_get(doc, "workers"), *w;
    size_t i;
    printf("\nworkers (%zu)\n  %-28s %5s %-16s %9s %9s %9s %8s %6s %13s\n", json_array_size(ws), "id", "inc", "host",
           "hb age", "steps/s", "loss", "joined", "H", "stale mean/max");
    json_array_foreach(ws, i, w)
    {
        json_t *joined = json_object_get(w, "joined");
        char stale[32] = "-";
        if (json_object_get(w, "stale_n"))
            snprintf(stale, sizeof stale, "%.1f/%.0f", num(w, "stale_mean"), num(w, "stale_max"));
        char id[96]; /* a process group (docs/PROTOCOL.md) says how many processes it is */
        int n = snprintf(id, sizeof id, "%s", str(w, "id"));
        if (num(w, "group") > 1 && n > 0 && (size_t)n < sizeof id)
            snprintf(id + n, sizeof id - (size_t)n, " (%.0f ranks)", num(w, "group"));
        char speed[32] = "-", loss[32] = "-"; /* -1: nothing reported since it registered */
        if (num(w, "speed") >= 0) snprintf(speed, sizeof speed, "%.2f", num(w, "speed"));
        if (num(w, "loss") >= 0) snprintf(loss, sizeof loss, "%.4f", num(w, "loss"));
        printf("  %-28s %5.0f %-16s %8.1fs %9s %9s %8.0f %6.0f %13s\n", id, num(w, "inc"), str(w, "host"),
               num(w, "heartbeat_age_ms") / 1000.0, speed, loss,
               json_is_array(joined) ? json_number_value(json_array_get(joined, 0)) : -1, num(w, "h"), stale);
    }
}

static void print_servers(json_t *doc)
{
    json_t *ss = json_object_get(doc, "servers"), *s;
    size_t i;
    printf("\nshard-servers (%zu)\n  %-28s %-22s %9s %6s\n", json_array_size(ss), "id", "address", "age", "held");
    json_array_foreach(ss, i, s)
    {
        printf("  %-28s %-22s %8.1fs %6.0f\n", str(s, "id"), str(s, "addr"), num(s, "age_ms") / 1000.0, num(s, "held"));
    }
}

static void print_shards(json_t *doc)
{
    json_t *ss = json_object_get(doc, "shards"), *s;
    size_t i;
    printf("\nshards (%zu)\n  %5s %8s %-28s %6s %10s %-16s %-12s %s\n", json_array_size(ss), "shard", "version",
           "owner", "epoch", "lease", "digest", "snapshot", "state");
    json_array_foreach(ss, i, s)
    {
        double left = num(s, "lease_left_ms");
        char lease[32];
        if (left > 0)
            snprintf(lease, sizeof lease, "%.1fs", left / 1000.0);
        else
            snprintf(lease, sizeof lease, "expired");
        const char *owner = str(s, "owner");
        int corrupt = json_is_string(json_object_get(s, "corrupt"));
        printf("  %5.0f %8.0f %-28s %6.0f %10s %-16s %-12s %s%s%s\n", num(s, "shard"), num(s, "version"),
               owner[0] ? owner : "(none)", num(s, "epoch"), lease, str(s, "digest"), str(s, "snap"),
               corrupt ? red() : "", corrupt ? "CORRUPT" : "ok", corrupt ? plain() : "");
    }
}

int cmd_status(int argc, char **argv)
{
    coord_common c = {0};
    int as_json = 0;
    const opt_spec specs[] = {
        COORD_COMMON_OPTS(&c),
        {.name = "json", .kind = OPT_FLAG, .dest = &as_json},
        {0},
    };
    int prc = opts_parse_cmd("coordinator status", usage, specs, argc, argv, 0, NULL, NULL);
    if (prc != 0) return opts_exit_status(prc);
    rconn *rc;
    int st = coord_connect(&c, &rc);
    if (st != 0) return st;
    json_t *doc;
    char err[512];
    if (status_fetch(rc, c.run, 0, &doc, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator: status of run '%s': %s\n", c.run, err);
        rconn_free(rc);
        return 1;
    }
    json_object_set_new(doc, "redis", topology_read(rc, &c.url, NULL));
    rconn_free(rc);
    if (as_json) {
        json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
        putchar('\n');
    } else {
        print_corrupt(doc);
        print_run(doc);
        print_evals(doc);
        print_workers(doc);
        print_servers(doc);
        print_shards(doc);
        topology_print(json_object_get(doc, "redis"));
    }
    json_decref(doc);
    return 0;
}
