/*
 * cluster.h: Redis Cluster routing, without I/O: key hash slots, the slot map, redirections.
 *
 * hiredis 0.14 knows nothing of Redis Cluster, so our two client paths route themselves: the
 * synchronous one (common/redis/rconn.c: workers, coordinator, tools) and the asynchronous one of the
 * shard-server (shard-server/link/). Both use this file to
 *   - find the key of a command and its hash slot (CRC16/XMODEM of the key, or of its hash tag: the
 *     part between the first '{' and the next '}' when non-empty, mod 16384);
 *   - keep a map slot -> master, filled from a CLUSTER SLOTS reply and patched by MOVED replies;
 *   - recognise "MOVED <slot> <host>:<port>" (the slot lives elsewhere for good: update the map,
 *     retry there) and "ASK <slot> <host>:<port>" (this one key is being migrated: send ASKING, then
 *     the command, to that node, once; the map is unchanged).
 * Our key layout keeps this simple: every control key of run R and every Redis Function call hashes
 * to the tag {R}; shard k's blobs hash to {R:k} and are plain GET/SET/DEL of one key.
 *
 * Node indexes in a map are stable (a node is added once and never removed), so callers keep one
 * connection per node index.
 */
#ifndef DILOCO_CLUSTER_H
#define DILOCO_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define CLUSTER_SLOTS 16384
#define CLUSTER_MAX_NODES 64
#define CLUSTER_MAX_HOPS 5 /* redirections followed for one command before giving up */

uint16_t cluster_crc16(const void *buf, size_t len);
/* Hash slot of a key (hash tags honoured). */
int cluster_key_slot(const char *key, size_t len);

/* Slot of the key a command works on, or -1 for a command without keys (FUNCTION, SCAN, CLUSTER,
 * PING, INFO, ...; they go to any node). FCALL/FCALL_RO/EVAL/EVALSHA: the first key, if numkeys > 0;
 * any other command: argv[1]. Commands over keys of several slots are not supported (we send none). */
int cluster_command_slot(int argc, const char **argv, const size_t *argvlen);
/* Same from a RESP-encoded command ("*N\r\n$L\r\n..."), as hiredis formats them; -1 if malformed. */
int cluster_resp_slot(const char *cmd, size_t len);

typedef struct cluster_node {
    char host[256];
    int port;
} cluster_node;

typedef struct cluster_map {
    int nnodes;
    cluster_node node[CLUSTER_MAX_NODES];
    int16_t owner[CLUSTER_SLOTS]; /* node index, -1 = unknown */
} cluster_map;

void cluster_map_init(cluster_map *m);
/* Index of host:port, added if new; -1 when the map is full. */
int cluster_map_node(cluster_map *m, const char *host, int port);
/* Slot owner, or -1 when unknown. */
int cluster_map_owner(const cluster_map *m, int slot);
/* Replace the slot owners by what a CLUSTER SLOTS reply says (masters only). An empty or "?" endpoint
 * means "the host we asked" (cluster-preferred-endpoint-type unknown-endpoint): default_host. 0, or -1
 * + err if the reply is not a CLUSTER SLOTS reply (the map is then unchanged). */
int cluster_map_load(cluster_map *m, const redisReply *slots, const char *default_host, char *err, size_t errlen);

typedef struct cluster_redirect {
    int ask; /* 1 ASK, 0 MOVED */
    int slot;
    char host[256]; /* empty endpoint in the reply: the host we asked */
    int port;
} cluster_redirect;

/* 1 and *out filled if msg (an error reply's text) is a MOVED or ASK redirection, else 0. */
int cluster_parse_redirect(const char *msg, const char *default_host, cluster_redirect *out);
/* Same for a reply: 1 if r is a MOVED/ASK error reply. */
int cluster_reply_redirect(const redisReply *r, const char *default_host, cluster_redirect *out);

/* What to tell a user when a node answers CLUSTERDOWN: from that node's CLUSTER NODES text (NULL when
 * it gave none), "the Redis Cluster is down (CLUSTERDOWN ...): node 127.0.0.1:7373 (master of slots
 * 5461-10922) is unreachable (fail); start it again, or fail its slots over to a replica, then check
 * with redis-cli --cluster check HOST:PORT". The nodes named are those flagged fail, fail? or with a
 * disconnected link; seed names the node asked, for the check command. */
void cluster_explain_down(const char *clusterdown, const char *cluster_nodes, const char *seed, char *out, size_t cap);

#endif
