/* dp_error.c: the data-plane error table (see dp_error.h). The order of the rows is the enum's. */
#include "format/dp_error.h"

#include <string.h>

static const dp_err_info table[DP_ERR_COUNT] = {
    [DP_BADARG] = {"BADARG", DP_ACT_FAIL, 1, "a field of the request is out of range (no such shard, tokens missing)"},
    [DP_BADOP] = {"BADOP", DP_ACT_FAIL, 1, "unknown operation (expected hello, auth, push or get)"},
    [DP_BADRUN] = {"BADRUN", DP_ACT_FAIL, 1, "hello names a run this server does not serve"},
    [DP_BADFRAME] = {"BADFRAME", DP_ACT_FAIL, 1, "the blob header does not decode"},
    [DP_BADSIZE] = {"BADSIZE", DP_ACT_FAIL, 1, "element count or frame size does not fit the shard"},
    [DP_BADDTYPE] = {"BADDTYPE", DP_ACT_FAIL, 1, "a pseudo-gradient in a dtype no codec knows"},
    [DP_BADCODEC] = {"BADCODEC", DP_ACT_FAIL, 1,
                     "a pseudo-gradient in another codec than the run's (coordinator init --compress)"},
    [DP_CHECKSUM] = {"CHECKSUM", DP_ACT_FAIL, 1, "the payload does not match its header's xxh3"},
    [DP_NAN] = {"NAN", DP_ACT_FAIL, 1, "an element is NaN or infinite"},
    [DP_AUTH] = {"AUTH", DP_ACT_FAIL, 1,
                 "the handshake failed (wrong run secret, request before the handshake); "
                 "the connection is closed"},
    [DP_UNKNOWN_WORKER] = {"UNKNOWN_WORKER", DP_ACT_REREGISTER, 1,
                           "the worker is not a live member with that incarnation: register again"},
    [DP_STALE] = {"STALE", DP_ACT_REFETCH, 1, "the round is not the shard's open round: fetch the parameters"},
    [DP_NOTREADY] = {"NOTREADY", DP_ACT_RETRY, 0, "the shard is still loading: retry"},
    [DP_REDIS] = {"REDIS", DP_ACT_RETRY, 0, "the server cannot reach Redis right now: retry"},
    [DP_BUSY] = {"BUSY", DP_ACT_RETRY, 0, "the server is at a limit (memory, queue) right now: retry"},
    [DP_CORRUPT] = {"CORRUPT", DP_ACT_REPAIR, 0,
                    "the shard's durable state failed its checksum: wait for coordinator repair"},
};

const dp_err_info *dp_err_row(dp_err e)
{
    return &table[e];
}

const char *dp_err_code(dp_err e)
{
    return table[e].code;
}

const dp_err_info *dp_err_lookup(const char *code)
{
    for (int i = 0; i < DP_ERR_COUNT; i++)
        if (strcmp(table[i].code, code) == 0) return &table[i];
    return NULL;
}
