/* rcli.c: the integration tests' Redis command line: `redis-cli -p PORT CMD ARGS...` for one command, with
 * redis-cli's output when that goes to a pipe or a file, at a third of its start-up cost. tests/lib.sh's $RCLI.
 *
 * Why: the tests poll Redis from the shell (wait_until's conditions, round, at_barrier, shard digests), about
 * 5,400 commands a suite (strace of a whole `sh tests/run.sh`). Debian's redis-cli loads 17 shared libraries
 * (OpenSSL, libstdc++, libsystemd and theirs) at every start: 17 ms of a core a call, against 5.7 for this
 * program and 4 for /bin/true (100 calls timed here); perf put a third of it_group_sharded's CPU in redis-cli,
 * most of it in the dynamic linker. This program links hiredis statically and nothing else.
 *
 * What it does itself, exactly as redis-cli 7.0 does when its output is not a terminal (raw output; checked
 * side by side by tests/it_rcli.sh): options -h HOST, -p PORT, -n DB, then one command; the reply printed
 * raw (a string, a status or an error as it is, an integer in decimal, nil as nothing, an array's elements
 * one a line, nested arrays flattened) and a newline; an error reply printed on stdout with a second newline,
 * and exit status 0 all the same; no connection: "Could not connect to Redis at HOST:PORT: ..." on stderr,
 * status 1; the connection lost before the reply: "Error: ..." on stderr, status 1.
 *
 * Everything else it hands to redis-cli itself (exec, same arguments): other options (-c, --cluster, -a,
 * -x, -r, --scan...), REDISCLI_AUTH in the environment, no command (commands on stdin), and the commands redis-cli treats apart (SHUTDOWN,
 * which closes the connection; SUBSCRIBE and MONITOR, which stream; HELLO, which changes the protocol;
 * redis-cli's own HELP, CONNECT, QUIT...). So a test may use $RCLI for anything redis-cli does. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

/* the commands redis-cli handles apart from "send, print the reply" */
static const char *const REDIS_CLI_OWN[] = {"shutdown", "subscribe", "psubscribe", "ssubscribe", "monitor", "sync",
                                            "psync", "hello", "help", "?", "connect", "quit", "exit", "clear",
                                            "restart", "multi", "exec", "select", "auth", NULL};

typedef struct rcli_args {
    const char *host;
    int port, db;
    int cmd; /* index in argv of the command's first word (argc: none) */
} rcli_args;

/* 1 when rcli does the call itself; 0 when redis-cli should (an option or a command we do not handle) */
static int parse_args(int argc, char **argv, rcli_args *a)
{
    *a = (rcli_args){.host = "127.0.0.1", .port = 6379, .db = 0, .cmd = argc};
    if (getenv("REDISCLI_AUTH") != NULL) return 0; /* (redis-cli authenticates with it) */
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i += 2) {
        if (i + 1 >= argc) return 0;
        char *end;
        if (!strcmp(argv[i], "-h")) {
            a->host = argv[i + 1];
        } else if (!strcmp(argv[i], "-p") || !strcmp(argv[i], "-n")) {
            long v = strtol(argv[i + 1], &end, 10);
            if (*end != '\0' || end == argv[i + 1]) return 0; /* (redis-cli says what is wrong) */
            if (argv[i][1] == 'p') a->port = (int)v; else a->db = (int)v;
        } else {
            return 0;
        }
    }
    if (i >= argc) return 0;
    for (const char *const *c = REDIS_CLI_OWN; *c; c++)
        if (!strcasecmp(argv[i], *c)) return 0;
    a->cmd = i;
    return 1;
}

/* redis-cli's cliFormatReplyRaw: the reply without a newline at its end */
static void print_raw(const redisReply *r, FILE *out)
{
    switch (r->type) {
    case REDIS_REPLY_ERROR:
        fwrite(r->str, 1, r->len, out);
        fputc('\n', out);
        break;
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_STRING:
        fwrite(r->str, 1, r->len, out);
        break;
    case REDIS_REPLY_INTEGER:
        fprintf(out, "%lld", r->integer);
        break;
    case REDIS_REPLY_ARRAY:
        for (size_t i = 0; i < r->elements; i++) {
            if (i > 0) fputc('\n', out);
            print_raw(r->element[i], out);
        }
        break;
    default: /* nil */
        break;
    }
}

static int run_command(const rcli_args *a, int argc, char **argv)
{
    redisContext *c = redisConnect(a->host, a->port);
    if (c == NULL || c->err) {
        fprintf(stderr, "Could not connect to Redis at %s:%d: %s\n", a->host, a->port,
                c ? c->errstr : "out of memory");
        return 1;
    }
    if (a->db != 0) {
        redisReply *r = redisCommand(c, "SELECT %d", a->db);
        int ok = r && r->type != REDIS_REPLY_ERROR;
        if (r) freeReplyObject(r);
        if (!ok) {
            fprintf(stderr, "Could not connect to Redis at %s:%d: cannot select database %d\n", a->host, a->port,
                    a->db);
            return 1;
        }
    }
    redisReply *r = redisCommandArgv(c, argc - a->cmd, (const char **)(argv + a->cmd), NULL);
    if (r == NULL) {
        fprintf(stderr, "Error: %s\n", c->errstr);
        redisFree(c);
        return 1;
    }
    print_raw(r, stdout);
    fputc('\n', stdout);
    freeReplyObject(r);
    redisFree(c);
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    rcli_args a;
    if (!parse_args(argc, argv, &a)) {
        argv[0] = "redis-cli";
        execvp("redis-cli", argv);
        fprintf(stderr, "rcli: cannot run redis-cli: %s\n", strerror(errno));
        return 1;
    }
    return run_command(&a, argc, argv);
}
