/* repair.c: waiting out a shard whose durable state is corrupt.
 *
 * A shard-server that cannot load a shard because its snapshot or a log entry fails its checksum (or is
 * missing, or the replay misses k:digest) marks it in dl:{R}:shards (k:corrupt) and answers every push
 * and get of it with `err CORRUPT`. No round can close until an operator runs `coordinator repair`, so
 * retrying is useless: the worker says so (every REPAIR_TELL_MS), keeps heartbeating (so it is not evicted
 * meanwhile) and looks at the marks every REPAIR_POLL_MS. The repair installs the parameters as a new
 * version above every version anyone holds, so the caller then simply fetches again. */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "internal.h"
#include "redis/rconn.h"

#define REPAIR_POLL_MS 2000
#define REPAIR_TELL_MS 60000

int repair_marked(diloco *d)
{
    char key[KEY_MAX];
    redisReply *r = dl_command(d, NULL, 0, "HKEYS %s", key_run(key, sizeof key, d->o.run, "shards"));
    int marked = -1;
    if (r && r->type == REDIS_REPLY_ARRAY) {
        marked = 0;
        for (size_t i = 0; i < r->elements; i++) {
            const char *f = r->element[i]->type == REDIS_REPLY_STRING ? r->element[i]->str : "";
            const char *colon = strchr(f, ':');
            marked += colon && !strcmp(colon + 1, "corrupt");
        }
    }
    if (r) freeReplyObject(r);
    return marked;
}

/* Says that we wait (why; we look every every_ms), at most once every REPAIR_TELL_MS (a Streaming fragment's
 * thread may wait too). */
static void tell_waiting(diloco *d, const char *why, int every_ms)
{
    uint64_t now = now_ms();
    pthread_mutex_lock(&d->hb_mu);
    int tell = d->corrupt_told_ms == 0 || now - d->corrupt_told_ms >= REPAIR_TELL_MS;
    if (tell) d->corrupt_told_ms = now;
    pthread_mutex_unlock(&d->hb_mu);
    if (tell) log_error("%s; waiting for it (checking every %g s)", why, every_ms / 1000.0);
}

int repair_look(diloco *d, const char *why, int every_ms)
{
    tell_waiting(d, why, every_ms);
    return repair_marked(d) == 0;
}

void repair_over(diloco *d)
{
    log_info("no shard of the run is marked corrupt any more (coordinator repair); fetching the global "
             "parameters again");
    pthread_mutex_lock(&d->hb_mu);
    d->corrupt_told_ms = 0;
    pthread_mutex_unlock(&d->hb_mu);
    char ignore[128];
    owners_refresh(d, ignore, sizeof ignore); /* the repair revoked every lease */
}

int repair_pause(diloco *d, int ms)
{
    for (int slept = 0; slept < ms; slept += 100) {
        if (dl_stopping(d) || dl_shutdown_seen(d)) return 1;
        sleep_ms(100);
    }
    return 0;
}

int repair_wait(diloco *d, const char *why, char *err, size_t errlen)
{
    char said[512];
    snprintf(said, sizeof said, "%s", why); /* why may be err itself */
    for (;;) {
        tell_waiting(d, said, REPAIR_POLL_MS);
        /* the pause comes first: a server's mark may still be on its way to Redis, and a fetch right
         * after an unmarked look would only meet the same CORRUPT again */
        if (repair_pause(d, REPAIR_POLL_MS)) {
            err_set(err, errlen, "%s while waiting for a repair of the corrupt state (%s)",
                    dl_stopping(d) ? "stopped" : dl_run_end(d), said);
            return -1;
        }
        if (repair_marked(d) == 0) {
            repair_over(d);
            return 0;
        }
    }
}
