/*
 * metrics.c: the shard-server's counters (ss_metrics in ss.h), kept in memory and logged every 30 s
 * at INFO. Issue 6 exposes the same struct over HTTP; nothing else needs to change for that.
 */
#include "ss.h"

#include "log.h"

#define METRICS_PERIOD_S 30

void metrics_log(ss_ctx *ss)
{
    const ss_metrics *m = &ss->m;
    int held = 0, ready = 0;
    for (int k = 0; k < ss->nshards; k++) {
        held += ss->shards[k].state != SH_FREE;
        ready += ss->shards[k].state == SH_READY;
    }
    double mean = m->rounds_committed ? m->commit_seconds / (double)m->rounds_committed : 0.0;
    log_info("metrics: shards held %d (ready %d); rounds committed %llu (no-op %llu), commit mean %.3f s max %.3f s; "
             "pushes %llu, gets %llu (tentative %llu); bytes in %llu out %llu; conflicts %llu; lease changes %llu; rejections %llu; "
             "loads %llu (failed %llu); snapshots %llu; connections %llu",
             held, ready, (unsigned long long)m->rounds_committed, (unsigned long long)m->noop_commits, mean,
             m->commit_seconds_max, (unsigned long long)m->pushes, (unsigned long long)m->gets,
             (unsigned long long)m->tentative_gets,             (unsigned long long)m->bytes_in, (unsigned long long)m->bytes_out, (unsigned long long)m->conflicts,
             (unsigned long long)m->lease_changes, (unsigned long long)m->rejections, (unsigned long long)m->loads,
             (unsigned long long)m->load_failures, (unsigned long long)m->snapshots,
             (unsigned long long)m->connections);
}

static void on_metrics_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    metrics_log(arg);
}

int metrics_start(ss_ctx *ss)
{
    ss->metrics_timer = event_new(ss->base, -1, EV_PERSIST, on_metrics_timer, ss);
    if (ss->metrics_timer == NULL)
        return -1;
    struct timeval tv = { .tv_sec = METRICS_PERIOD_S, .tv_usec = 0 };
    return evtimer_add(ss->metrics_timer, &tv);
}
