/* control.c: `coordinator control`, the terminal equivalent of POST /control/<action>.
 *
 *   coordinator control --redis URL --run R kick WORKER
 *   coordinator control --redis URL --run R set-lr LR
 *   coordinator control --redis URL --run R set-momentum MU
 *   coordinator control --redis URL --run R set-workers N
 *   coordinator control --redis URL --run R set-min-workers N
 *   coordinator control --redis URL --run R set-max-staleness K
 *   coordinator control --redis URL --run R shutdown
 *
 * Each builds the same JSON body the HTTP endpoint takes and runs it through control_run(), so the
 * validation and the one Redis Function call are the same code; the reply is printed as JSON. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/opts.h"
#include "base/util.h"
#include "coordinator.h"
#include "http.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: bin/coordinator control --redis URL --run NAME ACTION [ARG]\n"
               "\n" COORD_HELP "\n"
               "actions (each is one Redis Function call; the HTTP equivalent in brackets):\n"
               "  kick WORKER         evict a worker (it may register again)   [kick_worker]\n"
               "  set-lr LR           outer learning rate, > 0                 [update_optimizer]\n"
               "  set-momentum MU     outer momentum, in [0, 1)                [update_optimizer]\n"
               "  set-nesterov 0|1    Nesterov momentum off/on                 [update_optimizer]\n"
               "  set-workers N       expected workers per round, >= 1         [update_num_workers]\n"
               "  set-min-workers N   floor of the expected workers, 1 to them  [update_num_workers]\n"
               "  set-max-staleness K async: refuse submissions more than K versions old, 0: no\n"
               "                      limit (a rebase run: 1 to its --max-staleness) [update_staleness]\n"
               "  shutdown            stop the run: workers leave at their next heartbeat (a run shut\n"
               "                      down already: says so, exit 0)            [shutdown]\n"
               "\n"
               "Prints the JSON reply; exit status 0 on success, 1 if the action failed, 2 on usage errors.\n");
}

static json_t *number_arg(const char *s, const char *what)
{
    double d;
    if (parse_double(s, &d) < 0) {
        fprintf(stderr, "coordinator control: %s wants a number, got '%s'\n", what, s);
        return NULL;
    }
    return json_real(d);
}

/* set-lr's number > 0, set-momentum's in [0, 1) (dl_set's bounds, lua/60_operations.lua): a usage error
 * here, as a worker count's, not the server's refusal. */
static json_t *optimizer_arg(const char *s, const char *verb)
{
    json_t *v = number_arg(s, verb);
    if (!v) return NULL;
    double d = json_real_value(v);
    int lr = verb[4] == 'l';
    if (lr ? d > 0 : d >= 0 && d < 1) return v;
    fprintf(stderr, "coordinator control: %s wants a number %s, got '%s'\n", verb, lr ? "> 0" : "in [0, 1)", s);
    json_decref(v);
    return NULL;
}

/* An integer in [lo, 1000000] (a worker count's lo is 1, as update_num_workers and dl_set have it). */
static json_t *int_arg(const char *s, const char *what, long long lo)
{
    long long v;
    if (parse_int(s, lo, 1000000, &v) < 0) {
        fprintf(stderr, "coordinator control: %s wants an integer >= %lld, got '%s'\n", what, lo, s);
        return NULL;
    }
    return json_integer(v);
}

/* The common flags, and the positional arguments into pos (ACTION [ARG]). 0, or -1 with the exit
 * status: after --help (0), or after a message (a usage error). */
static int control_args(int argc, char **argv, coord_common *c, char **pos, int *npos, int *status)
{
    const opt_spec specs[] = {COORD_COMMON_OPTS(c), {0}};
    /* pos holds 16: the positional arguments (and unknown options, refused below) */
    int prc = argc > 16 ? 0 : opts_parse_cmd("coordinator control", usage, specs, argc, argv, 0, pos, npos);
    *status = OPTS_EXIT_USAGE;
    if (prc != 0) {
        *status = opts_exit_status(prc);
        return -1;
    }
    for (int k = 0; k < *npos; k++)
        if (pos[k][0] == '-' && pos[k][1] == '-') {
            fprintf(stderr, "coordinator control: unknown option %s (see --help)\n", pos[k]);
            return -1;
        }
    if (argc > 16 || *npos > 3) {
        fprintf(stderr, "coordinator control: too many arguments\n\n");
        usage(stderr);
        return -1;
    }
    if (*npos == 0) {
        fprintf(stderr, "coordinator control: which ACTION? kick, set-lr, set-momentum, set-nesterov, set-workers, "
                        "set-min-workers, set-max-staleness or shutdown (see --help)\n");
        return -1;
    }
    return 0;
}

/* The action pos[0] names and its JSON body (from pos[1], checked here when it is the only argument);
 * *want = the positional arguments it takes after the verb. 0, or -1 after a message (a usage error). */
static int verb_body(char **pos, int npos, const char **action, int *want, json_t *body)
{
    const char *verb = pos[0];
    json_t *v = NULL;
    *want = 1;
    if (!strcmp(verb, "kick")) {
        *action = "kick_worker";
        if (npos == 2) json_object_set_new(body, "worker_id", json_string(pos[1]));
    } else if (!strcmp(verb, "set-lr") || !strcmp(verb, "set-momentum")) {
        *action = "update_optimizer";
        if (npos == 2 && !(v = optimizer_arg(pos[1], verb))) return -1;
        if (v) json_object_set_new(body, verb[4] == 'l' ? "lr" : "momentum", v);
    } else if (!strcmp(verb, "set-nesterov")) {
        *action = "update_optimizer";
        if (npos == 2 && strcmp(pos[1], "0") && strcmp(pos[1], "1")) {
            fprintf(stderr, "coordinator control: set-nesterov wants 0 or 1\n");
            return -1;
        }
        if (npos == 2) json_object_set_new(body, "nesterov", json_boolean(pos[1][0] == '1'));
    } else if (!strcmp(verb, "set-workers") || !strcmp(verb, "set-min-workers")) {
        *action = "update_num_workers";
        if (npos == 2 && !(v = int_arg(pos[1], verb, 1))) return -1;
        if (v) json_object_set_new(body, verb[4] == 'w' ? "num_workers" : "min_workers", v);
    } else if (!strcmp(verb, "set-max-staleness")) {
        *action = "update_staleness";
        if (npos == 2 && !(v = int_arg(pos[1], verb, 0))) return -1;
        if (v) json_object_set_new(body, "max_staleness", v);
    } else if (!strcmp(verb, "shutdown")) {
        *action = "shutdown";
        *want = 0;
    } else {
        fprintf(stderr, "coordinator control: unknown action '%s'\n\n", verb);
        usage(stderr);
        return -1;
    }
    return 0;
}

/* The action through control_run, its JSON reply printed: on stdout if it succeeded (exit 0), else on
 * stderr (exit 1); the exit status of coord_connect when Redis cannot be reached. */
static int run_action(coord_common *c, const char *action, json_t *body)
{
    rconn *rc;
    int st = coord_connect(c, &rc);
    if (st != 0) return st;
    json_t *reply = NULL;
    control_env env = {.run = c->run};
    int code = control_run(rc, &env, action, body, &reply);
    rconn_free(rc);
    json_dumpf(reply, code == 200 ? stdout : stderr, JSON_COMPACT | JSON_REAL_PRECISION(15));
    fputc('\n', code == 200 ? stdout : stderr);
    json_decref(reply);
    return code == 200 ? 0 : 1;
}

int cmd_control(int argc, char **argv)
{
    coord_common c = {0};
    char *pos[16];
    int npos = 0, want, status;
    if (control_args(argc, argv, &c, pos, &npos, &status) < 0) return status;
    const char *action = NULL;
    json_t *body = json_object();
    if (verb_body(pos, npos, &action, &want, body) < 0) {
        status = OPTS_EXIT_USAGE;
    } else if (npos != want + 1) {
        fprintf(stderr, "coordinator control: %s takes %s\n", pos[0], want ? "one argument" : "no argument");
        status = OPTS_EXIT_USAGE;
    } else {
        status = run_action(&c, action, body);
    }
    json_decref(body);
    return status;
}
