/* auth.h: proving knowledge of the run's secret on the data plane, without sending it.
 *
 * `coordinator init` stores a random secret in dl:{R}:config; whoever Redis lets read it may train.
 * A shard-server answers a worker's `hello` with a `challenge` (a fresh random nonce); the worker
 * answers `auth` with HMAC-SHA256(secret, nonce \n worker \n run) in hex; only then does the server
 * accept pushes and gets on that connection. The secret never crosses the wire and a recorded
 * answer is useless for another connection. (A run without a secret, made by hand, skips this.) */
#ifndef DILOCO_AUTH_H
#define DILOCO_AUTH_H
#include <stddef.h>

#define AUTH_NONCE_LEN 32 /* hex characters */
#define AUTH_MAC_LEN 64   /* hex characters of an HMAC-SHA256 */

/* A fresh random nonce (hex, NUL-terminated) from the kernel (getrandom: no descriptor needed). -1 if none
 * could be had. */
int auth_nonce(char out[AUTH_NONCE_LEN + 1]);
/* The answer to a challenge. */
void auth_answer(const char *secret, const char *nonce, const char *worker, const char *run,
                 char out[AUTH_MAC_LEN + 1]);
/* 0 if answer is right (compared in constant time), -1 otherwise. */
int auth_check(const char *secret, const char *nonce, const char *worker, const char *run, const char *answer);
/* Client side on a connected blocking socket: hello, then (if challenged) auth. Fills server_id (may
 * be NULL). -1 + err when refused. */
int auth_client_hello(int fd, const char *secret, const char *worker, const char *run, int timeout_ms, char *server_id,
                      size_t cap, char *err, size_t errlen);
#endif
