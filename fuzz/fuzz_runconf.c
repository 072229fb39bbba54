/* fuzz_runconf.c: libFuzzer target of runconf_from_reply (common/format/runconf.c): a run's
 * configuration as every worker, shard-server and coordinator reads it from dl:{R}:config (HGETALL),
 * the input being RESP bytes read with hiredis' reader (arrays of more than 4096 elements skipped:
 * resp_guard.h).
 * Checks besides the sanitizers: an accepted config has 1..RUNCONF_MAX_SHARDS shards whose bounds
 * rise from 0 to numel, and fragments that cover the shards in order. */
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/runconf.h"
#include "redis/runconf_load.h"
#include "resp_guard.h"

static void check(const runconf *rc)
{
    if (rc->nshards < 1 || rc->nshards > RUNCONF_MAX_SHARDS || rc->shard_bounds[0] != 0 ||
        rc->shard_bounds[rc->nshards] != rc->numel || rc->nfragments < 1 || rc->frag_bounds[0] != 0 ||
        rc->frag_bounds[rc->nfragments] != rc->nshards)
        abort();
    for (int k = 0; k < rc->nshards; k++)
        if (rc->shard_bounds[k] > rc->shard_bounds[k + 1]) abort();
    for (int f = 0; f < rc->nfragments; f++)
        if (rc->frag_bounds[f] > rc->frag_bounds[f + 1]) abort();
    int f = runconf_fragment_of_shard(rc, rc->nshards - 1);
    if (f < 0 || f >= rc->nfragments) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (resp_huge_array(data, size)) return 0;
    redisReader *rd = redisReaderCreate();
    if (!rd) return 0;
    redisReaderFeed(rd, (const char *)data, size);
    void *reply;
    while (redisReaderGetReply(rd, &reply) == REDIS_OK && reply) {
        runconf rc;
        char err[256];
        memset(&rc, 0, sizeof rc);
        if (runconf_from_reply(reply, &rc, err, sizeof err) == 0) check(&rc);
        runconf_free(&rc);
        freeReplyObject(reply);
    }
    redisReaderFree(rd);
    return 0;
}
