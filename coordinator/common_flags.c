/* common_flags.c: what every coordinator subcommand shares: connecting (the --redis/--redis-file/--run
 * values, parsed through COORD_COMMON_OPTS in coordinator.h). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "coordinator.h"
#include "format/keys.h"
#include "redis/rconn.h"

int coord_connect(coord_common *c, rconn **out)
{
    char err[512], text[REDIS_URL_MAX];
    *out = NULL;
    if (redis_url_pick(c->redis_url, c->redis_file, text, sizeof text, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator: %s (see --help)\n", err);
        return 2;
    }
    if (!c->run) {
        fprintf(stderr, "coordinator: --run NAME is required (see --help)\n");
        return 2;
    }
    if (key_check_run_name(c->run, err, sizeof err) < 0 || redis_url_parse(text, &c->url, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator: %s (see --help)\n", err);
        return 2;
    }
    *out = rconn_connect_retry(&c->url, 10000, c->connect_timeout_ms, c->stop, NULL, err, sizeof err);
    if (!*out) fprintf(stderr, "coordinator: %s\n", err);
    return *out ? 0 : 1;
}
