/*
 * rconn.h: synchronous hiredis connections to Redis, opened from a parsed redis_url.
 *
 * Every binary talks to the control plane through these: connect with a timeout, authenticate
 * (ACL user + password, or password only), select the database, and set the command timeout so a
 * dead Redis never hangs a caller. rconn_connect_retry() is what long-running processes use at start
 * and after losing Redis.
 *
 * hiredis 0.14 writes with write(), so a connection the server closed raises SIGPIPE: every process
 * using rconn must ignore SIGPIPE (signal(SIGPIPE, SIG_IGN) in main); errors then come back as
 * a NULL reply that rconn_reply_error() explains.
 */
#ifndef DILOCO_RCONN_H
#define DILOCO_RCONN_H

#include <stddef.h>
#include <hiredis/hiredis.h>

#include "url.h"

/* NULL + err on failure. timeout_ms bounds the connect and, afterwards, every command. */
redisContext *rconn_connect(const redis_url *u, int timeout_ms, char *err, size_t errlen);

/* Retries with exponential backoff (100 ms .. 5 s, jittered) until connected, max_attempts tries
 * (0 = forever) or *stop becomes non-zero (stop may be NULL). Logs each failure at WARN. */
redisContext *rconn_connect_retry(const redis_url *u, int timeout_ms, int max_attempts, const volatile int *stop,
                                  char *err, size_t errlen);

/* -1 + err if r is NULL (connection error, from c->errstr) or a Redis error reply; else 0. */
int rconn_reply_error(redisContext *c, redisReply *r, char *err, size_t errlen);

#endif
