/* dp_error.h: the data-plane error codes, in one table.
 *
 * A shard-server refuses a request with an `err` reply whose `c` field (schemas/blob.md) is one of
 * these codes and whose `text` says what happened. The table says, for each code, what it means and
 * what a worker does about it; the shard-server names a code only through dp_err, and the worker
 * decides only through dp_err_lookup(...)->action, so the two ends cannot disagree. docs/PROTOCOL.md
 * ("Data-plane error codes") and schemas/blob.md list the same table whole (tests/test_dp_error.c
 * checks both). */
#ifndef DILOCO_DP_ERROR_H
#define DILOCO_DP_ERROR_H

typedef enum {
    DP_BADARG,         /* a field of the request is out of range (shard, tokens) */
    DP_BADOP,          /* an operation the server does not know */
    DP_BADRUN,         /* hello for another run */
    DP_BADFRAME,       /* the blob header does not decode */
    DP_BADSIZE,        /* element count or frame size does not fit the shard */
    DP_BADDTYPE,       /* a pseudo-gradient in a dtype no codec knows */
    DP_BADCODEC,       /* a pseudo-gradient in another codec than the run's */
    DP_CHECKSUM,       /* payload differs from its header's xxh3 */
    DP_NAN,            /* a NaN or infinite element */
    DP_AUTH,           /* the handshake failed (closed after the reply) */
    DP_UNKNOWN_WORKER, /* not a live member with that incarnation */
    DP_STALE,          /* the round is not the shard's open round */
    DP_NOTREADY,       /* the shard is still loading */
    DP_REDIS,          /* the server cannot reach Redis right now */
    DP_BUSY,           /* the server is at a limit (memory, queue) right now */
    DP_CORRUPT,        /* the shard's durable state failed its checksum */
    DP_ERR_COUNT
} dp_err;

/* What a worker does with a refusal. */
typedef enum {
    DP_ACT_FAIL,       /* a bug or misconfiguration on the worker's side: report and stop the sync */
    DP_ACT_RETRY,      /* transient on the server's side: retry after a pause */
    DP_ACT_REFETCH,    /* the round moved on: fetch the current parameters, start a new round */
    DP_ACT_REREGISTER, /* the worker is no member: register again */
    DP_ACT_REPAIR      /* wait for an operator's `coordinator repair` */
} dp_action;

typedef struct {
    const char *code; /* on the wire, < 32 bytes */
    dp_action action;
    int recorded; /* 1: counted as a rejection (dl_reject) since the request was at fault */
    const char *meaning;
} dp_err_info;

/* The row of e (e < DP_ERR_COUNT). */
const dp_err_info *dp_err_row(dp_err e);
/* The wire code of e. */
const char *dp_err_code(dp_err e);
/* The row of a code received on the wire; NULL for a code not in the table (a newer server). */
const dp_err_info *dp_err_lookup(const char *code);

#endif
