/*
 * rconn.h: synchronous Redis connections, opened from a parsed redis_url, that route by hash slot
 * when the server is a Redis Cluster.
 *
 * Every binary talks to Redis through these: connect with a timeout, authenticate (ACL user +
 * password, or password only), select the database, and set the command timeout so a dead Redis
 * never hangs a caller. rconn_connect_retry() is what long-running processes use at start and after
 * losing Redis.
 *
 * Redis Cluster (common/redis/cluster.h): an rconn starts as a connection to the URL's server. The first
 * MOVED or ASK reply tells it the server is a cluster node: it then reads the slot map (CLUSTER
 * SLOTS), opens a connection per master as needed (same credentials) and sends each command to the
 * master of its key's slot; MOVED patches the map, re-reads it and retries there, ASK sends ASKING
 * and the command to the named node once. So a plain Redis sees exactly the commands it saw before
 * (no probing), and any node of a cluster will do as the URL. Commands without a key go to the URL's
 * node. rconn_each_master() asks CLUSTER SLOTS itself, for work that every master must do
 * (FUNCTION LOAD, SCAN).
 *
 * A URL naming several servers (Sentinels, cluster seeds) is resolved to one at every connect
 * (sentinel.h), so reconnecting after a failover finds the new master. Behind Sentinel two more things
 * make that fast: rconn_connect_retry() waits for the Sentinels' failover announcement rather than its
 * backoff step, and a command without a reply for a second asks the Sentinels whether they name
 * another master now; if so the connection breaks at once (a stopped or partitioned master would
 * hold it until the timeout), if not the command waits on, up to the timeout.
 *
 * hiredis 0.14 writes with write(), so a connection the server closed would raise SIGPIPE: every
 * call here that can write holds SIGPIPE off in the calling thread (sigpipe.h), so rconn works in a
 * program that left SIGPIPE at its default (libdiloco's host). Errors come back as a NULL reply
 * that rconn_reply_error() explains, and rconn_broken() becomes true.
 */
#ifndef DILOCO_RCONN_H
#define DILOCO_RCONN_H

#include <stdarg.h>
#include <stddef.h>
#include <hiredis/hiredis.h>

#include "redis/url.h"

typedef struct rconn rconn;

/* NULL + err on failure. timeout_ms bounds the connect and, afterwards, every command. */
rconn *rconn_connect(const redis_url *u, int timeout_ms, char *err, size_t errlen);

/* Whether a Redis error reply (its text, starting with the error code) is final for a client: the
 * server refuses what the URL asks for (a wrong password or user: WRONGPASS, NOAUTH, the pre-6
 * "ERR invalid password"; a user without the permission: NOPERM; a database it does not have), so
 * trying again cannot help. The one place that decides it, for every binary. */
int rconn_error_final(const char *redis_error);

/* A Redis server refused a command as unknown (redis_error "ERR unknown command ..."): when the URL's
 * server is a Redis Sentinel (ROLE says "sentinel"), which knows none of the data commands, err says so and
 * which redis+sentinel:// URL to give instead, and 1 is returned; else 0 (err untouched). The one place
 * every process kind asks it (the library check, runconf_load.h; init's library load; control actions). */
int rconn_sentinel_error(rconn *c, const char *redis_error, char *err, size_t errlen);

/* Whether a Redis error reply means the node is no longer the master we want (a failover happened or
 * is under way: READONLY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN). Such a reply breaks the connection
 * (NULL reply, rconn_broken) like an I/O error: the caller reconnects, and the reconnect finds the
 * master again (redis_url_resolve, sentinel.h). The shard-server's links use it too. NOREPLICAS (a
 * master without the replicas min-replicas-to-write asks for: a new master whose replicas are still
 * being pointed at it, or an old one cut off from them) is not one of them: the command did not run,
 * and rconn sends it again on the same connection with a short backoff for up to 10 s before it
 * returns the error (a reconnect at that moment would find the same master, and a burst of them from
 * every process would load the Sentinels during a failover). */
int rconn_error_failover(const char *redis_error);
int rconn_error_noreplicas(const char *redis_error);
/* "ERR max number of clients reached": a Redis at its maxclients refuses the connection itself (its first reply,
 * whatever was asked, then it closes), unlike the other refusals rconn_error_hint explains, each of one command. */
int rconn_error_maxclients(const char *redis_error);
/* LOADING: a restarted Redis still reading its AOF or RDB; the command did not run. rconn sends it
 * again on the same connection, with backoff, until the data set is loaded (up to 2 minutes). */
int rconn_error_loading(const char *redis_error);

/* Connect, retrying with exponential backoff (100 ms .. 5 s, jittered) while Redis cannot be reached,
 * for up to wait_ms (0: one attempt; negative: until connected) or until *stop becomes non-zero (stop
 * may be NULL; it also ends an attempt whose handshake Redis does not answer, within 100 ms: a frozen Redis
 * accepts connections). A final refusal (rconn_error_final) ends it at once and sets *refused (may be NULL).
 * While it retries it logs one WARN line at the first failure, then at most one every 5 s. */
rconn *rconn_connect_retry(const redis_url *u, int timeout_ms, int wait_ms, const volatile int *stop, int *refused,
                           char *err, size_t errlen);

/* A stop as a function: stopped(arg) is looked at from the thread that runs the command or the connect, and
 * must be safe to call from any thread (atomic loads of flags). */
typedef int rconn_stop_fn(void *arg);

/* rconn_connect_retry with the stop a function (stopped(arg) non-zero ends it, as *stop does there; NULL:
 * none), for a process whose stop is more than one flag (libdiloco: its host's flag or
 * diloco_request_stop's). */
rconn *rconn_connect_watched(const redis_url *u, int timeout_ms, int wait_ms, rconn_stop_fn *stopped, void *arg,
                             int *refused, char *err, size_t errlen);

void rconn_free(rconn *c);

/* End now a command blocked on c in another thread (shutdown(2) of its sockets: its read sees the
 * connection closed, so it returns NULL and c is broken) and any later one: for a thread that must stop
 * while Redis does not answer (frozen, or its packets dropped), which the command timeout would make wait
 * for. Thread-safe against that command (a node the command opens after the call is not interrupted);
 * the caller keeps c allocated meanwhile. */
void rconn_interrupt(rconn *c);

/* A stop that ends c's commands, for a process that must exit promptly while Redis does not answer
 * (frozen, its packets dropped): stopped(arg) is looked at by the thread that runs a command on c, every
 * 100 ms while it waits for a reply, and at its start. A command that began before the stop ends as soon
 * as it is seen (NULL, c broken: "interrupted by a stop"); one that begins after it waits at most
 * closing_ms (a close's best-effort commands). No other thread touches c for it, so it needs no lock. */
void rconn_watch_stop(rconn *c, rconn_stop_fn *stopped, void *arg, int closing_ms);

/* Change the command timeout (of every connection, and of those opened later); -1 on failure. */
int rconn_set_timeout(rconn *c, int timeout_ms);

/* Like redisCommand / redisvCommand / redisCommandArgv, routed (see above). NULL: I/O error or
 * timeout, after which rconn_broken(c) is true: free c and connect again. */
redisReply *rconn_command(rconn *c, const char *fmt, ...);
redisReply *rconn_vcommand(rconn *c, const char *fmt, va_list ap);
redisReply *rconn_command_argv(rconn *c, int argc, const char **argv, const size_t *argvlen);

/* WAIT replicas timeout_ms on the connection to the master of key's slot (the one that ran this
 * thread's last write to key): how many replicas have every write sent on it so far, or -1 (an error
 * reply, or the connection broke). The command timeout must exceed timeout_ms. */
int rconn_wait_replicas(rconn *c, const char *key, int replicas, int timeout_ms);

int rconn_broken(const rconn *c);
/* Whether c broke on a failover reply (rconn_error_failover: READONLY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN): Redis
 * answered, as a node that does not lead (a replica: the URL names one, or a failover is under way), rather than
 * not at all. A reconnect to a plain redis:// URL lands on the same node: the caller waits, as for a Redis that
 * does not answer, rather than giving up (a worker's registration at start, say). */
int rconn_broken_not_master(const rconn *c);
/* For an idle connection (no command in flight): wait up to ms for the URL's server to close it (it
 * died or restarted); 1 then, and rconn_broken(c) is true; 0 when ms passed quietly. Lets a thread
 * that talks to Redis now and then reconnect (and follow a failover) at once rather than at its next
 * command. */
int rconn_wait_closed(rconn *c, int ms);
const char *rconn_errstr(const rconn *c); /* why it broke ("" while fine) */
int rconn_is_cluster(const rconn *c);
/* "host:port" (or the socket path) of the server the URL led to (the master, behind Sentinel). */
const char *rconn_server(const rconn *c, char *buf, size_t cap);

/* A Redis that misbehaves refuses commands it did not run, for as long as the operator leaves it so: out of
 * memory (OOM), writes stopped after a failed RDB save (MISCONF), a script running too long (BUSY), maxclients
 * reached, a replica (READONLY, MASTERDOWN), loading (LOADING), too few replicas (NOREPLICAS). The hint of
 * such a refusal (what is wrong and what to do, for a message), or NULL for any other reply. */
const char *rconn_error_hint(const char *redis_error);
/* Whether the refusal is one of those, or a failover's (rconn_error_failover): the command did not run, and
 * the same command may succeed once Redis is put right, so a long-running process tries again rather than
 * giving up (a worker's registration, say). */
int rconn_error_transient(const char *redis_error);
/* redis_error with its hint (rconn_error_hint) after it, into out: what every message about a refused
 * command says. With a hint, only Redis's first sentence is kept (its code first, findable), at most 120
 * characters: one line says what is wrong and what to do. */
void rconn_explain_error(const char *redis_error, char *out, size_t cap);

/* -1 + err if r is NULL (connection error, explained from c) or a Redis error reply (explained:
 * rconn_explain_error); else 0. */
int rconn_reply_error(const rconn *c, redisReply *r, char *err, size_t errlen);

/* Call fn with the raw connection of the one server, or of every master of a cluster (the slot map
 * is read first), for keyless work each of them must do. addr names the node for messages. Stops at
 * the first failure: its -1 (err filled by fn or by the connect). */
typedef int rconn_node_fn(redisContext *node, const char *addr, void *arg, char *err, size_t errlen);
int rconn_each_master(rconn *c, rconn_node_fn *fn, void *arg, char *err, size_t errlen);

/* For rconn_node_fn's: fn on every key of one node that matches pattern (SCAN MATCH, 1000 at a time, so a
 * large keyspace is not blocked). -1 + err when a SCAN fails or fn returns -1. */
typedef int rconn_key_fn(redisContext *node, const char *key, void *arg);
int rconn_scan_node(redisContext *node, const char *addr, const char *pattern, rconn_key_fn *fn, void *arg, char *err,
                    size_t errlen);

#endif
