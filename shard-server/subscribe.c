/*
 * subscribe.c: the shard-server hears the closes of the run's sync barriers (issue 28: a round's get
 * waits for the close at the shard-server, not for the worker to learn of it).
 *
 * The Lua function that closes barrier r of fragment f PUBLISHes "f:r" on dl:{R}:closes
 * (lua/20_membership.lua, barrier_try_close); this server holds a link subscribed to it (made by ctx.c,
 * in the route group of the other links, so it follows a Sentinel failover; a PUBLISH reaches every node
 * of a Cluster, so any node will do). A close heard:
 *   - is noted (closes.c), so a dl_barrier already in flight that answers `open` is asked again (commit.c);
 *   - starts the commit of every shard of f at version r that has a pseudo-gradient of round r or gets
 *     parked on it (through ss->dispatch: op_get starts it), as a get of round r+1 would: the commits run
 *     while the workers' gets are still on their way, or answer those already parked.
 * The message is only an accelerator. A subscription confirmed again (a reconnect) and the park timer's
 * tick judge again every get parked on a barrier that is no longer known open (closes.c: found open less
 * than a second ago), which reads the barrier: a lost message costs a tick or two.
 *
 * The same channel says "lease:<server id>" when that server gave shards back (lua/50_servers.lua: it has
 * more than its fair share now that a server joined, or it is shutting down): we beat at once (lease.c)
 * and may take them, instead of at our next beat, up to ttl/3 later, while they have no owner. A lost
 * message costs that wait.
 */
#include "ss.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "format/keys.h"

/* Whether a get parked on s waits for a close. */
static int has_close_waiter(const ss_shard *s)
{
    for (const ss_req *r = s->parked; r != NULL; r = r->next)
        if (r->waits_close) return 1;
    return 0;
}

/* The shards of fragment f (every fragment: f < 0) whose gets wait for a close and no longer know the
 * barrier open: judged again (op_get reads the barrier, or takes the version if it committed). */
static void recheck(ss_ctx *ss, int f)
{
    for (int k = 0; k < ss->nshards; k++) {
        ss_shard *s = &ss->shards[k];
        if ((f >= 0 && s->frag != f) || s->state != SH_READY || s->committing || !has_close_waiter(s)) continue;
        if (closes_known_open(ss, s->frag, s->version)) continue;
        park_redispatch(ss, s);
    }
}

/* Round r of fragment f closed: start its commits here now. */
static void on_close(ss_ctx *ss, int f, int64_t r)
{
    closes_heard(ss, f, r);
    for (int k = 0; k < ss->nshards; k++) {
        ss_shard *s = &ss->shards[k];
        if (s->frag != f || s->state != SH_READY || s->version != r || s->committing) continue;
        if (s->parked != NULL)
            park_redispatch(ss, s); /* the gets of r+1 start the commit (op_get) */
        else if (delta_has_round(s, r))
            commit_start(ss, s);
    }
}

static void on_message(redisReply *r, void *priv)
{
    ss_ctx *ss = priv;
    ss_closes *c = &ss->closes;
    if (r == NULL) { /* the connection is gone: the link reconnects and on_ready subscribes again */
        if (c->subscribed && !ss->stopping) /* (at shutdown the connection goes with everything else) */
            log_info("barrier closes: subscription to %s lost; gets are answered `wait` meanwhile", c->channel);
        c->subscribed = 0;
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_STRING) return;
    const char *kind = r->element[0]->str;
    if (strcmp(kind, "subscribe") == 0) {
        c->subscribed = 1;
        log_info("barrier closes: subscribed to %s", c->channel);
        closes_forget_open(ss); /* closes may have gone unheard while we were not subscribed */
        recheck(ss, -1);
        return;
    }
    int f;
    long long round;
    char extra;
    if (strcmp(kind, "message") == 0 && r->element[2]->type == REDIS_REPLY_STRING &&
        strncmp(r->element[2]->str, "lease:", 6) == 0) {
        if (strcmp(r->element[2]->str + 6, ss->id) != 0) lease_beat_now(ss); /* shards given back: take ours */
        return;
    }
    if (strcmp(kind, "message") != 0 || r->element[2]->type != REDIS_REPLY_STRING ||
        sscanf(r->element[2]->str, "%d:%lld%c", &f, &round, &extra) != 2) {
        log_debug("barrier closes: ignoring a message that is not f:r");
        return;
    }
    on_close(ss, f, round);
}

static void on_ready(void *arg)
{
    ss_ctx *ss = arg;
    if (rlink_cmd_subscribe(&ss->closes.link, ss->closes.channel, on_message, ss) != 0)
        log_warn("barrier closes: cannot subscribe to %s; gets are answered `wait` meanwhile", ss->closes.channel);
}

int subscribe_start(ss_ctx *ss)
{
    key_run(ss->closes.channel, sizeof ss->closes.channel, ss->opts.run, "closes");
    if (closes_init(ss) != 0) return -1;
    ss->closes.link.on_ready = on_ready;
    ss->closes.link.on_ready_arg = ss;
    if (ss->closes.link.ready) on_ready(ss);
    return 0;
}

void subscribe_tick(ss_ctx *ss)
{
    if (ss->closes.nfrag > 0) recheck(ss, -1);
}
