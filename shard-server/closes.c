/*
 * closes.c: what the shard-server knows of each fragment's open sync barrier (ss_closes in ss.h): the
 * closes it heard announced (subscribe.c hears them), the round dl_barrier last found open and when, and
 * the closes it found by reading the barrier without having heard them (missed).
 *
 * A worker sends its gets of round r+1 while it arrives at barrier r (worker/diloco/sync.c); a get that
 * finds the barrier open waits parked for its close instead of being answered `wait` (commit.c), and a
 * later get of the same fragment waits without asking Redis again while the barrier is known open. The
 * announcement is only an accelerator: a barrier is known open for CLOSES_RECHECK_MS at most, then the
 * gets waiting on it read it again (subscribe_tick), so a lost message costs a tick or two, never the
 * round. If closes are found missed and none was ever heard (a Lua library without the PUBLISH, an ACL
 * that refuses the channel), the server stops parking and answers `wait` as before. Plain data: calls no
 * other file of the shard-server.
 */
#include "ss.h"

#include <stdlib.h>

#include "base/log.h"
#include "base/util.h"

/* How long a barrier found open is trusted to be: the gets waiting on it read it again afterwards. */
#define CLOSES_RECHECK_MS 1000
/* Closes found missed, with none ever heard, after which gets are answered `wait` again. */
#define CLOSES_MISSED_GIVE_UP 2

int closes_init(ss_ctx *ss)
{
    ss_closes *c = &ss->closes;
    int n = ss->rc.nfragments > 0 ? ss->rc.nfragments : 1;
    c->heard = malloc((size_t)n * sizeof *c->heard);
    c->open_round = malloc((size_t)n * sizeof *c->open_round);
    c->open_ms = calloc((size_t)n, sizeof *c->open_ms);
    c->heard_no = calloc((size_t)n, sizeof *c->heard_no);
    if (c->heard == NULL || c->open_round == NULL || c->open_ms == NULL || c->heard_no == NULL) {
        closes_free(ss);
        return -1;
    }
    c->nfrag = n;
    for (int f = 0; f < n; f++) c->heard[f] = c->open_round[f] = -1;
    return 0;
}

void closes_free(ss_ctx *ss)
{
    ss_closes *c = &ss->closes;
    free(c->heard);
    free(c->open_round);
    free(c->open_ms);
    free(c->heard_no);
    c->heard = c->open_round = NULL;
    c->open_ms = c->heard_no = NULL;
    c->nfrag = 0;
}

static int valid(const ss_closes *c, int f)
{
    return f >= 0 && f < c->nfrag;
}

void closes_heard(ss_ctx *ss, int f, int64_t r)
{
    ss_closes *c = &ss->closes;
    if (!valid(c, f)) return;
    ss->m.closes_heard++;
    if (r > c->heard[f]) {
        c->heard[f] = r;
        c->heard_no[f] = ss->m.closes_heard;
    }
}

int closes_heard_since(const ss_ctx *ss, int f, int64_t r, uint64_t seen)
{
    const ss_closes *c = &ss->closes;
    return valid(c, f) && c->heard[f] >= r && c->heard_no[f] > seen;
}

int closes_parking(const ss_ctx *ss)
{
    return ss->closes.subscribed && !(ss->m.closes_missed >= CLOSES_MISSED_GIVE_UP && ss->m.closes_heard == 0);
}

void closes_found_open(ss_ctx *ss, int f, int64_t r)
{
    ss_closes *c = &ss->closes;
    if (!valid(c, f)) return;
    c->open_round[f] = r;
    c->open_ms[f] = now_ms();
}

void closes_found_closed(ss_ctx *ss, int f, int64_t r)
{
    ss_closes *c = &ss->closes;
    if (!valid(c, f) || c->open_round[f] != r || c->heard[f] >= r) return;
    c->open_round[f] = -1; /* counted once */
    ss->m.closes_missed++;
    if (ss->m.closes_heard == 0 && ss->m.closes_missed == CLOSES_MISSED_GIVE_UP)
        log_warn("the closes of sync barriers are not announced on %s (none heard, %d found closed by reading the "
                 "barrier): gets are answered `wait` again until one is. Does the Redis user of the workers and "
                 "shard-servers have +publish and the channel (deploy/redis/users.acl), and is the Functions library "
                 "this server's (coordinator init)?",
                 c->channel, CLOSES_MISSED_GIVE_UP);
    else
        log_debug("fragment %d: the close of round %lld was found by reading the barrier, not heard", f, (long long)r);
}

int closes_known_open(const ss_ctx *ss, int f, int64_t r)
{
    const ss_closes *c = &ss->closes;
    return valid(c, f) && closes_parking(ss) && c->open_round[f] == r && c->heard[f] < r &&
           now_ms() - c->open_ms[f] < CLOSES_RECHECK_MS;
}

void closes_forget_open(ss_ctx *ss)
{
    ss_closes *c = &ss->closes;
    for (int f = 0; f < c->nfrag; f++) c->open_round[f] = -1;
}
