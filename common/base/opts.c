/*
 * opts.c: the table-driven option parser (opts.h). One pass over argv: each token is matched against
 * the table by long name (`--name`, `--name=value`) or short alias (`-x`), its value checked against the
 * option's kind and bounds, then stored. opts_parse prints nothing (errors go to the caller's err
 * buffer); opts_parse_cmd is the one place that prints what a command says about its command line.
 */
#include "base/opts.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"

static const opt_spec *find_long(const opt_spec *specs, const char *name, size_t len)
{
    for (const opt_spec *s = specs; s->name != NULL; s++)
        if (strlen(s->name) == len && strncmp(s->name, name, len) == 0) return s;
    return NULL;
}

static const opt_spec *find_alias(const opt_spec *specs, char c)
{
    for (const opt_spec *s = specs; s->name != NULL; s++)
        if (s->alias != 0 && s->alias == c) return s;
    return NULL;
}

static int takes_value(const opt_spec *s)
{
    return s->kind != OPT_FLAG && s->kind != OPT_CLEAR;
}

/* Index of v in "a|b|c", or -1. */
static int choice_index(const char *choices, const char *v)
{
    size_t vl = strlen(v);
    int idx = 0;
    for (const char *p = choices;; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == vl && strncmp(p, v, len) == 0) return idx;
        if (bar == NULL) return -1;
        p = bar + 1;
    }
}

/* "a, b or c" from "a|b|c". */
static void choices_text(const char *choices, char *out, size_t cap)
{
    size_t n = 0;
    const char *last = strrchr(choices, '|');
    for (const char *p = choices; *p != '\0' && n + 5 < cap; p++) {
        if (*p != '|') {
            out[n++] = *p;
        } else if (p == last) {
            memcpy(out + n, " or ", 4);
            n += 4;
        } else {
            memcpy(out + n, ", ", 2);
            n += 2;
        }
    }
    out[n] = '\0';
}

static void wants_text(const opt_spec *s, char *out, size_t cap)
{
    if (s->wants != NULL) {
        snprintf(out, cap, "%s", s->wants);
        return;
    }
    switch (s->kind) {
    case OPT_INT:
    case OPT_LLONG: snprintf(out, cap, "an integer in [%lld, %lld]", s->lo, s->hi); break;
    case OPT_DOUBLE:
        if (s->max >= DBL_MAX && s->min <= -DBL_MAX)
            snprintf(out, cap, "a number");
        else if (s->max >= DBL_MAX)
            snprintf(out, cap, "a number >= %g", s->min);
        else
            snprintf(out, cap, "a number in [%g, %g]", s->min, s->max);
        break;
    case OPT_CHOICE: {
        char list[256];
        choices_text(s->choices, list, sizeof list);
        snprintf(out, cap, "%s", list);
        break;
    }
    case OPT_STRING:
        if (s->cap > 0) {
            snprintf(out, cap, "a value of at most %zu characters", s->cap - 1);
            break;
        }
        /* fall through */
    default: snprintf(out, cap, "a value"); break;
    }
}

/* Check v against s and store it: 0, or -1 with err filled. */
static int store(const opt_spec *s, const char *v, char *err, size_t errlen)
{
    long long ll;
    double d;
    int ok = 1;
    switch (s->kind) {
    case OPT_FLAG: *(int *)s->dest = 1; break;
    case OPT_CLEAR: *(int *)s->dest = 0; break;
    case OPT_INT:
    case OPT_LLONG:
        ok = parse_int(v, s->lo, s->hi, &ll) == 0;
        if (ok && s->kind == OPT_INT)
            *(int *)s->dest = (int)ll;
        else if (ok)
            *(long long *)s->dest = ll;
        break;
    case OPT_DOUBLE:
        ok = parse_double(v, &d) == 0 && d >= s->min && d <= s->max;
        if (ok) *(double *)s->dest = d;
        break;
    case OPT_STRING:
        if (s->cap == 0)
            *(const char **)s->dest = v;
        else if ((ok = strlen(v) < s->cap))
            memcpy(s->dest, v, strlen(v) + 1);
        break;
    case OPT_CHOICE: {
        int idx = choice_index(s->choices, v);
        ok = idx >= 0;
        if (ok) *(int *)s->dest = idx;
        break;
    }
    case OPT_CUSTOM: ok = s->parse(v, s->dest) == 0; break;
    }
    if (!ok) {
        char wants[320];
        wants_text(s, wants, sizeof wants);
        err_set(err, errlen, "--%s wants %s, got '%s' (see --help)", s->name, wants, v);
        return -1;
    }
    if (s->given != NULL) *s->given = 1;
    return 0;
}

/* A flag or a clear: no value, except that a flag takes `--name=0` or `--name=1`. */
static int store_switch(const opt_spec *s, const char *inline_value, char *err, size_t errlen)
{
    int zero = inline_value != NULL && strcmp(inline_value, "0") == 0;
    int one = inline_value != NULL && strcmp(inline_value, "1") == 0;
    if (inline_value != NULL && (s->kind != OPT_FLAG || (!zero && !one))) {
        err_set(err, errlen, "--%s %s, got '%s' (see --help)", s->name,
                s->kind == OPT_FLAG ? "wants nothing, 0 or 1" : "takes no value", inline_value);
        return -1;
    }
    store(s, NULL, err, errlen);
    if (zero) *(int *)s->dest = 0;
    return 0;
}

/* Keep an unknown token (and its value when it is a separate token) for a second parser. */
static int keep_rest(int argc, char **argv, int *i, char **rest, int *nrest, char *err, size_t errlen)
{
    const char *a = argv[*i];
    if (rest == NULL) {
        if (a[0] == '-' && a[1] != '\0')
            err_set(err, errlen, "unknown option %s (see --help)", a);
        else
            err_set(err, errlen, "unexpected argument '%s' (see --help)", a);
        return -1;
    }
    rest[(*nrest)++] = argv[*i];
    if (a[0] == '-' && strchr(a, '=') == NULL && *i + 1 < argc && argv[*i + 1][0] != '-') rest[(*nrest)++] = argv[++*i];
    return 0;
}

int opts_parse(const opt_spec *specs, int argc, char **argv, int first, char **rest, int *nrest, char *err,
               size_t errlen)
{
    int dummy = 0;
    if (nrest == NULL) nrest = &dummy;
    *nrest = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        const opt_spec *s = NULL;
        const char *inline_value = NULL;
        if (strcmp(a, "--") == 0) {
            for (i++; i < argc; i++)
                if (keep_rest(argc, argv, &i, rest, nrest, err, errlen) != 0) return -1;
            break;
        }
        if (a[0] == '-' && a[1] == '-' && a[2] != '\0') {
            const char *eq = strchr(a + 2, '=');
            s = find_long(specs, a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
            if (s == NULL && strcmp(a + 2, "help") == 0) return 1;
            inline_value = eq ? eq + 1 : NULL;
        } else if (a[0] == '-' && a[1] != '\0' && a[2] == '\0') {
            s = find_alias(specs, a[1]);
            if (s == NULL && a[1] == 'h') return 1;
        }
        if (s == NULL) {
            if (keep_rest(argc, argv, &i, rest, nrest, err, errlen) != 0) return -1;
            continue;
        }
        if (!takes_value(s)) {
            if (store_switch(s, inline_value, err, errlen) != 0) return -1;
            continue;
        }
        if (inline_value == NULL) {
            if (i + 1 >= argc) {
                char wants[320];
                wants_text(s, wants, sizeof wants);
                err_set(err, errlen, "--%s wants %s, got nothing (see --help)", s->name, wants);
                return -1;
            }
            inline_value = argv[++i];
        }
        if (store(s, inline_value, err, errlen) != 0) return -1;
    }
    return 0;
}

int opts_parse_cmd(const char *prog, void (*usage)(FILE *f), const opt_spec *specs, int argc, char **argv, int first,
                   char **rest, int *nrest)
{
    char err[512];
    int rc = opts_parse(specs, argc, argv, first, rest, nrest, err, sizeof err);
    if (rc == 1) usage(stdout);
    if (rc < 0) fprintf(stderr, "%s: %s\n", prog, err);
    return rc;
}

int opts_exit_status(int rc)
{
    return rc > 0 ? 0 : OPTS_EXIT_USAGE;
}
