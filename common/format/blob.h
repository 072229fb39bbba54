/*
 * blob.h: the blob format, shared by the data plane and durable storage.
 *
 * A blob is a msgpack map (the header) immediately followed by the raw little-endian payload.
 * It is what a worker and a shard-server exchange over TCP (inside a frame, see frame.h) and what
 * is stored as durable values in Redis. schemas/blob.md is the single source of truth for the keys;
 * tests/test_blob.c checks that this code writes exactly the documented keys.
 */
#ifndef DILOCO_BLOB_H
#define DILOCO_BLOB_H

#include <stddef.h>
#include <stdint.h>

#include "math/dtype.h" /* enum blob_dtype: the codecs a payload may be in */

#define BLOB_MAGIC "DLB"
#define BLOB_FORMAT 1
#define BLOB_HEADER_MAX 1024 /* an encoded header never exceeds this */


typedef struct blob_header {
    char op[16];    /* "push","pull","get","params","ack","err","moved","need","hello","snap","log",... */
    int dtype;      /* enum blob_dtype: the payload's codec; BLOB_NONE when there is no payload */
    uint64_t count; /* elements in the payload */
    uint64_t xxh;   /* XXH3_64bits of the payload bytes (0 when no payload) */
    int64_t shard, version, round, epoch, inc, frag; /* -1 when absent */
    char worker[64];                                 /* "" when absent */
    char run[80];   /* the run a durable blob belongs to ("" when absent: blobs written before it was kept) */
    char code[32];  /* error code for op "err": "STALE", "BADSIZE", "NAN", "CHECKSUM", ... */
    char text[512]; /* free text: error message, redirect "host:port", list of missing workers, ... */
    double lr, mu;  /* outer step parameters recorded with log entries; NAN when absent */
    int64_t flags;  /* bit flags (e.g. nesterov, first step; BLOB_GET_*, BLOB_PARAMS_*); 0 when absent */
    int64_t aux;    /* spare integer (e.g. participant count); -1 when absent */
} blob_header;

/* Data-plane flags (docs/PROTOCOL.md, "Tentative parameters"): a sync `get` may accept the parameters
 * of a version that is computed but not yet durable in Redis; such a `params` reply says so. */
#define BLOB_GET_TENTATIVE_OK 1
#define BLOB_PARAMS_TENTATIVE 1
/* --download update (docs/compression.md): a get may take the round's update instead of parameters (the
 * worker holds version v-1 and its momentum), or asks for the momentum with the parameters (payload θ
 * then momentum, count 2n). An `update` reply's flags: bit 0 nesterov, bit 1 first step (as a log
 * entry's), bit 3 tentative; aux the participants (0: a no-op round); text the digest of θ after it. */
#define BLOB_GET_UPDATE_OK 2
#define BLOB_GET_MOMENTUM 4
#define BLOB_PARAMS_MOMENTUM 2
#define BLOB_UPDATE_TENTATIVE 8

void blob_header_init(blob_header *h, const char *op); /* every field "absent" */
size_t blob_dtype_size(int dtype);                     /* 4, 2, or 0 (none, unknown, block-quantized) */
/* Payload bytes of count elements of dtype (codec_bytes); 0 for an unknown dtype or an overflow. */
size_t blob_payload_bytes(int dtype, uint64_t count);

/* Encode the header for this payload into buf (cap >= BLOB_HEADER_MAX is always enough). Sets h->xxh
 * from the payload and checks payload_len == count * dtype size. Returns the header length or -1. */
int blob_encode_header(blob_header *h, const void *payload, size_t payload_len, uint8_t *buf, size_t cap, char *err,
                       size_t errlen);

/* The same with h->xxh already set to the payload's XXH3_64bits (a sender that keeps the checksum of a
 * buffer it sends many times, like a shard's parameters, hashes it once). */
int blob_encode_header_hashed(blob_header *h, size_t payload_len, uint8_t *buf, size_t cap, char *err, size_t errlen);

/* Decode the header at the start of buf and set *header_len. Unknown keys are ignored (forward
 * compatibility); everything malformed is rejected with a message saying what. */
int blob_decode_header(const uint8_t *buf, size_t len, blob_header *h, size_t *header_len, char *err, size_t errlen);

/* Check a payload against its decoded header: exact length, then checksum. */
int blob_check_payload(const blob_header *h, const void *payload, size_t len, char *err, size_t errlen);

/* The same for a payload whose XXH3_64bits the caller computed (e.g. while receiving it). */
int blob_check_payload_hashed(const blob_header *h, size_t len, uint64_t xxh, char *err, size_t errlen);

/* A durable blob must be the one its Redis key names (docs/PROTOCOL.md, "Durable state"): its op is the
 * key's kind ("snap", "log") and its shard, version and epoch are the key's, and so is its run when the
 * header has one. Every reader of durable blobs (the shard-server's load, common/format/replay.c for repair,
 * evaluation and checkpoint export) calls this, so a valid blob copied to another key is refused with
 * the key named: "KEY holds the log entry of shard 2, version 4, epoch 1 (run R), not the one its key
 * names". -1 + err on a mismatch or a key that is not a blob's name. */
int blob_check_key(const blob_header *h, const char *key, char *err, size_t errlen);

/* Whole blob (header + payload in one malloc'd buffer the caller frees), for small values and tests. */
int blob_encode(blob_header *h, const void *payload, size_t payload_len, uint8_t **out, size_t *outlen, char *err,
                size_t errlen);
/* Decode a whole blob; *payload points into buf. */
int blob_decode(const uint8_t *buf, size_t len, blob_header *h, const uint8_t **payload, size_t *payload_len, char *err,
                size_t errlen);

#endif
