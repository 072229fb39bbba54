/*
 * opts.h: the command-line option parser every ReDiLoCo binary uses.
 *
 * A binary describes its options as a table of opt_spec (long name, optional short alias, kind,
 * bounds, where the value goes) and calls opts_parse once. Values are accepted as `--name=value`
 * or `--name value`; a value is checked against its kind and bounds before anything is written, and
 * a bad one is reported as "--name wants <what>, got '<value>' (see --help)". Tokens the table does
 * not know either fail ("unknown option") or, when the caller passes a rest array, are kept in order
 * for a second parser (bin/worker hands the trainer's options on this way).
 *
 * A command's main calls opts_parse_cmd instead, so every binary answers --help and a bad option alike
 * and exits with the same status (opts_exit_status).
 */
#ifndef DILOCO_OPTS_H
#define DILOCO_OPTS_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    OPT_FLAG,   /* no value; dest int set to 1 (--name=0 and --name=1 also accepted) */
    OPT_CLEAR,  /* no value; dest int set to 0 (--no-x) */
    OPT_INT,    /* dest int, value in [lo, hi] */
    OPT_LLONG,  /* dest long long, value in [lo, hi] */
    OPT_DOUBLE, /* dest double, value in [min, max] */
    OPT_STRING, /* cap 0: dest const char * (points into argv); cap > 0: dest char[cap], copied */
    OPT_CHOICE, /* dest int: the index of the value in choices ("a|b|c") */
    OPT_CUSTOM, /* parse(value, dest) returns 0 or -1; wants says what it takes */
} opt_kind;

typedef struct {
    const char *name; /* long name without the dashes; NULL ends the table */
    char alias;       /* short alias (-x), 0 for none */
    opt_kind kind;
    void *dest;
    long long lo, hi;                            /* OPT_INT, OPT_LLONG bounds */
    double min, max;                             /* OPT_DOUBLE bounds */
    const char *choices;                         /* OPT_CHOICE */
    size_t cap;                                  /* OPT_STRING */
    int (*parse)(const char *value, void *dest); /* OPT_CUSTOM */
    const char *wants; /* what the error message says the option wants (default: from the kind) */
    int *given;        /* if set, set to 1 when the option appears */
} opt_spec;

/* Parse argv[first..argc). Returns 0 when all went well, 1 when -h/--help was given (the table need not
 * list it; the caller prints its usage), -1 on an error described in err (the message names the option,
 * what it wants, and ends with "(see --help)").
 * rest == NULL: an unknown option or a positional argument is an error. rest != NULL: both are appended
 * to rest (room for argc entries) in their order, *nrest counts them; an unknown option's value, when
 * given as a separate token, follows it there. */
int opts_parse(const opt_spec *specs, int argc, char **argv, int first, char **rest, int *nrest, char *err,
               size_t errlen);

/* opts_parse for a command's main (prog names it in messages, e.g. "coordinator serve"): -h/--help prints
 * usage(stdout); a bad option prints "PROG: <what is wrong> (see --help)" to stderr. Returns what
 * opts_parse returns: 0 go on, 1 after the usage, -1 after the error message. */
int opts_parse_cmd(const char *prog, void (*usage)(FILE *f), const opt_spec *specs, int argc, char **argv, int first,
                   char **rest, int *nrest);

#define OPTS_EXIT_USAGE 2 /* exit status of every binary on a usage error */

/* The most seconds a flag that becomes an int of milliseconds may take (INT_MAX ms is 24.8 days): a
 * larger value would not fit (converting it is undefined behaviour, and on x86 gave a negative time). */
#define OPTS_SECONDS_MAX 2000000.0

/* The exit status a command returns after opts_parse_cmd returned rc != 0: 0 after --help,
 * OPTS_EXIT_USAGE after a bad option. */
int opts_exit_status(int rc);

#ifdef __cplusplus
}
#endif
#endif
