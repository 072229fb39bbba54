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
               "  set-min-workers N   floor of the expected workers            [update_num_workers]\n"
               "  set-max-staleness K async: refuse submissions more than K versions old, 0: no\n"
               "                      limit (a rebase run: 1 to its --max-staleness) [update_staleness]\n"
               "  shutdown            stop the run: workers leave at their next heartbeat [shutdown]\n"
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

static json_t *int_arg(const char *s, const char *what)
{
    long long v;
    if (parse_int(s, 0, 1000000, &v) < 0) {
        fprintf(stderr, "coordinator control: %s wants an integer, got '%s'\n", what, s);
        return NULL;
    }
    return json_integer(v);
}

int cmd_control(int argc, char **argv)
{
    coord_common c = {0};
    const opt_spec specs[] = {COORD_COMMON_OPTS(&c), {0}};
    char *pos[16]; /* the positional arguments (and unknown options, refused below) */
    int npos = 0, prc = argc > 16 ? 0 : opts_parse_cmd("coordinator control", usage, specs, argc, argv, 0, pos, &npos);
    if (prc != 0) return opts_exit_status(prc);
    for (int k = 0; k < npos; k++)
        if (pos[k][0] == '-' && pos[k][1] == '-') {
            fprintf(stderr, "coordinator control: unknown option %s (see --help)\n", pos[k]);
            return OPTS_EXIT_USAGE;
        }
    if (argc > 16 || npos > 3) {
        fprintf(stderr, "coordinator control: too many arguments\n\n");
        usage(stderr);
        return OPTS_EXIT_USAGE;
    }
    if (npos == 0) {
        fprintf(stderr, "coordinator control: which ACTION? kick, set-lr, set-momentum, set-nesterov, set-workers, "
                        "set-min-workers, set-max-staleness or shutdown (see --help)\n");
        return OPTS_EXIT_USAGE;
    }
    const char *verb = pos[0], *action = NULL;
    json_t *body = json_object(), *v = NULL;
    int want = 1; /* positional arguments after the verb */
    if (!strcmp(verb, "kick")) {
        action = "kick_worker";
        if (npos == 2) json_object_set_new(body, "worker_id", json_string(pos[1]));
    } else if (!strcmp(verb, "set-lr")) {
        action = "update_optimizer";
        if (npos == 2 && !(v = number_arg(pos[1], verb))) goto usage_error;
        if (v) json_object_set_new(body, "lr", v);
    } else if (!strcmp(verb, "set-momentum")) {
        action = "update_optimizer";
        if (npos == 2 && !(v = number_arg(pos[1], verb))) goto usage_error;
        if (v) json_object_set_new(body, "momentum", v);
    } else if (!strcmp(verb, "set-nesterov")) {
        action = "update_optimizer";
        if (npos == 2) {
            if (strcmp(pos[1], "0") && strcmp(pos[1], "1")) {
                fprintf(stderr, "coordinator control: set-nesterov wants 0 or 1\n");
                goto usage_error;
            }
            json_object_set_new(body, "nesterov", json_boolean(pos[1][0] == '1'));
        }
    } else if (!strcmp(verb, "set-workers") || !strcmp(verb, "set-min-workers")) {
        action = "update_num_workers";
        if (npos == 2 && !(v = int_arg(pos[1], verb))) goto usage_error;
        if (v) json_object_set_new(body, verb[4] == 'w' ? "num_workers" : "min_workers", v);
    } else if (!strcmp(verb, "set-max-staleness")) {
        action = "update_staleness";
        if (npos == 2 && !(v = int_arg(pos[1], verb))) goto usage_error;
        if (v) json_object_set_new(body, "max_staleness", v);
    } else if (!strcmp(verb, "shutdown")) {
        action = "shutdown";
        want = 0;
    } else {
        fprintf(stderr, "coordinator control: unknown action '%s'\n\n", verb);
        usage(stderr);
        json_decref(body);
        return 2;
    }
    if (npos != want + 1) {
        fprintf(stderr, "coordinator control: %s takes %s\n", verb, want ? "one argument" : "no argument");
        json_decref(body);
        return 2;
    }
    rconn *rc;
    int st = coord_connect(&c, &rc);
    if (st != 0) {
        json_decref(body);
        return st;
    }
    json_t *reply = NULL;
    control_env env = {.run = c.run};
    int code = control_run(rc, &env, action, body, &reply);
    rconn_free(rc);
    json_decref(body);
    json_dumpf(reply, code == 200 ? stdout : stderr, JSON_COMPACT | JSON_REAL_PRECISION(15));
    fputc('\n', code == 200 ? stdout : stderr);
    json_decref(reply);
    return code == 200 ? 0 : 1;
usage_error:
    json_decref(body);
    return 2;
}
