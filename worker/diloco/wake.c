/* wake.c: the barrier's wake-up, listened for while we arrive, so that learning of the close costs no
 * round trip of its own (issue 28, docs/compression.md "Latency").
 *
 * A barrier's close pushes the token "f:r" to the wake list of every participant (lua/20_membership.lua,
 * barrier_try_close). The wait used to start after dl_arrive's reply, and after each BLPOP it read
 * dl_barrier: with Redis an RTT away, a worker that was not the last to arrive paid one RTT for the
 * arrive, one for the BLPOP and one for the read. Now barrier.c starts the BLPOP (on the blocking
 * connection, from a thread) before it sends dl_arrive on the control connection: the token of the
 * close reaches us half an RTT after the last arrival reaches Redis, in parallel with our own arrive,
 * and a token "f:r" for the round we wait on is proof of the close (the only writer of that token is the
 * close of round r of fragment f, in the same Lua call). Any other outcome (a timeout, a token of another
 * fragment, a repair token) leaves the decision to barrier.c's usual wait, which reads dl_barrier as before.
 * Tokens of our own earlier rounds of the fragment (the last arriver's, which nobody used to pop) are
 * dropped on the way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/keys.h"
#include "internal.h"
#include "wake.h"

void wake_key(const struct diloco *d, char *key, size_t cap)
{
    char name[112];
    int n = snprintf(name, sizeof name, "wake:%s", d->worker_id);
    if (d->grp && d->grp_rank > 0 && n > 0 && (size_t)n < sizeof name)
        snprintf(name + n, sizeof name - (size_t)n, ":%d", d->grp_rank); /* a group's rank: its own list */
    key_run(key, cap, d->o.run, name);
}

static void *wake_main(void *p)
{
    wake_wait *w = p;
    diloco *d = w->d;
    char err[256], key[KEY_MAX];
    wake_key(d, key, sizeof key);
    if (!d->blk || rconn_broken(d->blk)) {
        if (d->blk) rconn_free(d->blk);
        d->blk = rconn_connect(&d->url, d->o.wait_poll_ms + 10000, err, sizeof err);
    }
    while (d->blk) {
        redisReply *r = rconn_command(d->blk, "BLPOP %s %.3f", key, d->o.wait_poll_ms / 1000.0);
        int f = -1, n = 0;
        long long round = -1;
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING)
            n = sscanf(r->element[1]->str, "%d:%lld", &f, &round);
        int cancel = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                     r->element[1]->type == REDIS_REPLY_STRING && strcmp(r->element[1]->str, WAKE_CANCEL) == 0;
        if (r) freeReplyObject(r);
        if (cancel || n != 2 || f != w->frag) break;
        if (round == w->round) {
            w->closed = 1;
            break;
        }
        if (round > w->round) break; /* (not ours to decide: barrier.c's wait reads the barrier) */
    }
    return NULL;
}

int wake_start(diloco *d, int f, int64_t round, wake_wait *w)
{
    *w = (wake_wait){.d = d, .frag = f, .round = round};
    w->started = pthread_create(&w->thread, NULL, wake_main, w) == 0;
    return w->started ? 0 : -1;
}

int wake_finish(wake_wait *w)
{
    if (!w->started) return 0;
    pthread_join(w->thread, NULL);
    w->started = 0;
    return w->closed;
}

void wake_cancel(wake_wait *w)
{
    if (!w->started) return;
    diloco *d = w->d;
    char key[KEY_MAX];
    wake_key(d, key, sizeof key);
    redisReply *r = dl_command(d, NULL, 0, "RPUSH %s %s", key, WAKE_CANCEL);
    if (r) freeReplyObject(r);
    wake_finish(w);
}
