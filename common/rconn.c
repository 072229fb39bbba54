/*
 * rconn.c: the connection helpers declared in rconn.h, on the hiredis 0.14 blocking API.
 */
#include "rconn.h"
#include "log.h"
#include "util.h"

#include <sys/time.h>

#define RETRY_BASE_MS 100
#define RETRY_CAP_MS 5000

static struct timeval timeval_from_ms(int ms)
{
    if (ms <= 0)
        ms = 1;
    struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
    return tv;
}

int rconn_reply_error(redisContext *c, redisReply *r, char *err, size_t errlen)
{
    if (r == NULL) {
        err_set(err, errlen, "Redis connection error: %s", c && c->errstr[0] ? c->errstr : "no reply");
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        err_set(err, errlen, "%s", r->str ? r->str : "Redis error");
        return -1;
    }
    return 0;
}

/* Run one command whose only interesting outcome is error or not. */
static int run_simple(redisContext *c, const char *what, char *err, size_t errlen, redisReply *r)
{
    char why[512];
    int rc = rconn_reply_error(c, r, why, sizeof why);
    if (rc != 0)
        err_set(err, errlen, "%s failed: %s", what, why);
    if (r != NULL)
        freeReplyObject(r);
    return rc;
}

static int authenticate(redisContext *c, const redis_url *u, char *err, size_t errlen)
{
    if (u->user[0] != '\0')
        return run_simple(c, "AUTH (check the user and password in the Redis URL)", err, errlen,
                          redisCommand(c, "AUTH %s %s", u->user, u->pass));
    if (u->pass[0] != '\0')
        return run_simple(c, "AUTH (check the password in the Redis URL)", err, errlen,
                          redisCommand(c, "AUTH %s", u->pass));
    return 0;
}

redisContext *rconn_connect(const redis_url *u, int timeout_ms, char *err, size_t errlen)
{
    struct timeval tv = timeval_from_ms(timeout_ms);
    char where[600];
    redisContext *c;
    if (redis_url_format(u, where, sizeof where) != 0)
        where[0] = '\0';
    if (u->is_unix)
        c = redisConnectUnixWithTimeout(u->path, tv);
    else
        c = redisConnectWithTimeout(u->host, u->port, tv);
    if (c == NULL) {
        err_set(err, errlen, "cannot connect to %s: out of memory", where);
        return NULL;
    }
    if (c->err) {
        err_set(err, errlen, "cannot connect to %s: %s", where, c->errstr);
        goto error;
    }
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        err_set(err, errlen, "cannot set the command timeout on %s: %s", where, c->errstr);
        goto error;
    }
    if (authenticate(c, u, err, errlen) != 0)
        goto error;
    /* SELECT 0 is skipped so the same URL also works against a Redis Cluster node. */
    if (u->db != 0 && run_simple(c, "SELECT (check the database number in the Redis URL)", err, errlen,
                                 redisCommand(c, "SELECT %d", u->db)) != 0)
        goto error;
    return c;

error:
    redisFree(c);
    return NULL;
}

redisContext *rconn_connect_retry(const redis_url *u, int timeout_ms, int max_attempts, const volatile int *stop,
                                  char *err, size_t errlen)
{
    char where[600];
    char why[512] = "";
    if (redis_url_format(u, where, sizeof where) != 0)
        where[0] = '\0';
    for (unsigned attempt = 0; max_attempts == 0 || attempt < (unsigned)max_attempts; attempt++) {
        if (stop != NULL && *stop) {
            err_set(err, errlen, "stopped while connecting to %s (last error: %s)", where, why);
            return NULL;
        }
        redisContext *c = rconn_connect(u, timeout_ms, why, sizeof why);
        if (c != NULL) {
            if (attempt > 0)
                log_info("connected to Redis at %s after %u failed attempts", where, attempt);
            return c;
        }
        if (max_attempts != 0 && attempt + 1 >= (unsigned)max_attempts)
            break;
        unsigned wait = backoff_ms(attempt, RETRY_BASE_MS, RETRY_CAP_MS);
        /* why already names the URL (without password). */
        log_warn("%s; retrying in %u ms (is redis-server running, and are the URL and credentials right?)", why,
                 wait);
        /* Sleep in slices so a stop request is honoured promptly. */
        for (unsigned slept = 0; slept < wait && !(stop != NULL && *stop); slept += 50)
            sleep_ms(wait - slept < 50 ? wait - slept : 50);
    }
    err_set(err, errlen, "cannot connect to Redis at %s after %d attempts: %s", where, max_attempts, why);
    return NULL;
}
