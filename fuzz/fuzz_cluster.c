/* fuzz_cluster.c: libFuzzer target of the Redis Cluster routing decoders (common/redis/cluster.c): the input
 * is RESP bytes as a Redis node sends them, read with hiredis' own reader; every reply goes through
 * cluster_map_load (CLUSTER SLOTS) and cluster_reply_redirect (MOVED/ASK), and the raw bytes through
 * cluster_resp_slot (a RESP command's key slot).
 * Checks besides the sanitizers: slots, node indexes and ports stay in range.
 * Inputs whose arrays announce more than 4096 elements are skipped (resp_guard.h). */
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <stdlib.h>

#include "redis/cluster.h"
#include "resp_guard.h"

static cluster_map map;

static void check_map(const cluster_map *m)
{
    if (m->nnodes < 0 || m->nnodes > CLUSTER_MAX_NODES) abort();
    for (int i = 0; i < m->nnodes; i++)
        if (m->node[i].port < 1 || m->node[i].port > 65535) abort();
    for (int s = 0; s < CLUSTER_SLOTS; s += 97)
        if (cluster_map_owner(m, s) >= m->nnodes) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int slot = cluster_resp_slot((const char *)data, size);
    if (slot < -1 || slot >= CLUSTER_SLOTS) abort();
    if (resp_huge_array(data, size)) return 0;
    redisReader *rd = redisReaderCreate();
    if (!rd) return 0;
    redisReaderFeed(rd, (const char *)data, size);
    void *reply;
    cluster_map_init(&map);
    while (redisReaderGetReply(rd, &reply) == REDIS_OK && reply) {
        redisReply *r = reply;
        char err[256];
        cluster_redirect red;
        (void)cluster_map_load(&map, r, "default", err, sizeof err);
        check_map(&map);
        if (cluster_reply_redirect(r, "default", &red) &&
            (red.slot < 0 || red.slot >= CLUSTER_SLOTS || red.port < 1 || red.port > 65535))
            abort();
        freeReplyObject(r);
    }
    redisReaderFree(rd);
    return 0;
}
