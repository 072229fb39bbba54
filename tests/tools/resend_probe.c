/* resend_probe.c: a worker of one sync round that then fetches the current global parameters the way a worker
 * does after it took its round as lost (round.c's "lost (stale)", sync.c's confirm_reset: fetch_current, a get
 * that may not push), for tests/it_lost_round_resend.sh.
 *
 *   1. opens a session (diloco_open) on parameters it perturbs, and syncs once (diloco_force_sync): its Δ of
 *      round 0 goes to the owner, it arrives, and it takes version 1 (the test's server serves it tentatively
 *      and dies before committing it: shard-server --fault-tentative-to);
 *   2. prints "synced version V tentative T digest D" (T: the shard's tentative version, D its digest), waits
 *      for the file --go (the test restarts the server meanwhile: its new owner needs our Δ of round 0);
 *   3. calls fetch_current on fragment 0 and prints "fetch ok version V digest D in MS ms" or
 *      "fetch failed after MS ms: ERROR", then closes the session.
 *
 * The new owner counts our Δ (we are a live participant of round 0) and answers the get with `need`: the get
 * must send it again although it may not push. Before, it waited for the sync timeout, the owner's round
 * for it, as it_cluster_sync_crash once did for 120 s.
 *
 * usage: resend_probe --redis URL --run RUN --worker-id ID --go FILE [--sync-timeout-ms MS (20000)]
 * exits 0 when the fetch succeeded, 1 otherwise. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "diloco/internal.h"

typedef struct probe_args {
    const char *redis, *run, *id, *go;
    int sync_timeout_ms;
} probe_args;

static int parse_args(int argc, char **argv, probe_args *a)
{
    *a = (probe_args){.sync_timeout_ms = 20000};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--redis"))
            a->redis = argv[i + 1];
        else if (!strcmp(argv[i], "--run"))
            a->run = argv[i + 1];
        else if (!strcmp(argv[i], "--worker-id"))
            a->id = argv[i + 1];
        else if (!strcmp(argv[i], "--go"))
            a->go = argv[i + 1];
        else if (!strcmp(argv[i], "--sync-timeout-ms"))
            a->sync_timeout_ms = atoi(argv[i + 1]);
        else
            return -1;
    }
    return a->redis && a->run && a->id && a->go && argc % 2 == 1 ? 0 : -1;
}

/* step 1: a session whose one sync sends a Δ of round 0 */
static diloco *open_and_sync(const probe_args *a, float **params, char *err, size_t errlen)
{
    diloco_options o;
    diloco_options_default(&o);
    o.redis_url = a->redis;
    o.run = a->run;
    o.worker_id = a->id;
    o.sync_every = 1;
    o.sync_timeout_ms = a->sync_timeout_ms;
    o.heartbeat_interval_ms = 1000;
    uint64_t numel = 0;
    if (diloco_peek_run(&o, &numel, NULL, 0, err, errlen) < 0) return NULL;
    *params = calloc(numel, sizeof(float));
    diloco *d = NULL;
    if (!*params || diloco_open(&o, *params, numel, &d, err, errlen) != 0) return NULL;
    for (uint64_t i = 0; i < numel; i++) (*params)[i] += 0.001f * (float)(i % 7 + 1); /* an inner "step" */
    if (diloco_force_sync(d, err, errlen) < 0) {
        diloco_close(d);
        return NULL;
    }
    return d;
}

int main(int argc, char **argv)
{
    probe_args a;
    if (parse_args(argc, argv, &a) != 0) {
        fprintf(stderr, "usage: resend_probe --redis URL --run RUN --worker-id ID --go FILE [--sync-timeout-ms MS]\n");
        return 2;
    }
    char err[512] = "";
    float *params = NULL;
    diloco *d = open_and_sync(&a, &params, err, sizeof err);
    if (!d) {
        printf("sync failed: %s\n", err);
        free(params);
        return 1;
    }
    printf("synced version %" PRId64 " tentative %" PRId64 " digest %016" PRIx64 "\n", diloco_version(d),
           d->tent_version[0], d->tent_xxh[0]);
    fflush(stdout);
    while (access(a.go, F_OK) != 0) sleep_ms(20);
    uint64_t t0 = now_ms();
    int rc = fetch_current(d, 0, err, sizeof err);
    unsigned ms = (unsigned)(now_ms() - t0);
    if (rc == 0)
        printf("fetch ok version %" PRId64 " digest %016" PRIx64 " in %u ms\n", d->shard_version[0], d->tent_xxh[0],
               ms);
    else
        printf("fetch failed after %u ms: %s\n", ms, err);
    fflush(stdout);
    diloco_close(d);
    free(params);
    return rc == 0 ? 0 : 1;
}
