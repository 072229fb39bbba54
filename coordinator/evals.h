/* evals.h: the evaluator's stream dl:{R}:evals (worker/evaluator.h) as the coordinator shows it.
 *
 * `coordinator status`, /status (and with it the dashboard's validation-loss chart) and /metrics read
 * the newest entries next to dl_status; the stream holds one entry per evaluated version. */
#ifndef DILOCO_EVALS_H
#define DILOCO_EVALS_H
#include <stddef.h>
#include <jansson.h>

#include "redis/rconn.h"

#define EVALS_SHOWN 500 /* entries the status document carries (the chart's points) */

/* The newest `count` entries, oldest first: [{version, loss, tokens, time}]. An empty array when
 * nothing was evaluated; NULL + err when Redis fails. */
json_t *evals_fetch(rconn *rc, const char *run, int count, char *err, size_t errlen);
/* dl_status's document plus "evals" (evals_fetch of EVALS_SHOWN): 0, or -1 + err. */
int evals_attach(rconn *rc, const char *run, json_t *raw, char *err, size_t errlen);
#endif
