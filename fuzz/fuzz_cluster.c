/* fuzz_cluster.c: libFuzzer target of the Redis Cluster routing decoders (common/net/cluster.c): the input
 * is RESP bytes as a Redis node sends them, read with hiredis' own reader; every reply goes through
 * cluster_map_load (CLUSTER SLOTS) and cluster_reply_redirect (MOVED/ASK), and the raw bytes through
 * cluster_resp_slot (a RESP command's key slot).
 * Checks besides the sanitizers: slots, node indexes and ports stay in range.
 * hiredis 0.14's reader allocates an array of whatever size a reply announces ("*411111191" is 3 GB
 * of pointers) and has no limit to set; that is hiredis trusting its server, not our code, so inputs
 * announcing more than 4096 elements are skipped. */
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <stdlib.h>

#include "cluster.h"

static cluster_map map;

/* whether an array header ("*N" at the start of the input or of a line) announces more than 4096 */
static int huge_array(const uint8_t *d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (d[i] != '*' || (i > 0 && d[i - 1] != '\n')) continue;
        unsigned long long v = 0;
        for (size_t j = i + 1; j < n && d[j] >= '0' && d[j] <= '9' && v <= 4096; j++) v = v * 10 + (d[j] - '0');
        if (v > 4096) return 1;
    }
    return 0;
}

static void check_map(const cluster_map *m) {
    if (m->nnodes < 0 || m->nnodes > CLUSTER_MAX_NODES) abort();
    for (int i = 0; i < m->nnodes; i++)
        if (m->node[i].port < 1 || m->node[i].port > 65535) abort();
    for (int s = 0; s < CLUSTER_SLOTS; s += 97)
        if (cluster_map_owner(m, s) >= m->nnodes) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int slot = cluster_resp_slot((const char *)data, size);
    if (slot < -1 || slot >= CLUSTER_SLOTS) abort();
    if (huge_array(data, size)) return 0;
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
