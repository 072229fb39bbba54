/*
 * telemetry.h: bin/worker's --log, one JSON object a line (its steps and syncs), followed by name.
 *
 * A run lasts weeks and its logs are rotated under it (logrotate): moved away and made anew (`create`),
 * or cut to nothing in place (`copytruncate`). The file is opened for appending, so a truncated one goes
 * on from its start; and before each line the name is looked at again: once it names another file than
 * the one open, the lines go there (and a file deleted under us is made anew). No signal is needed for
 * either (SIGHUP stops no process: worker/main.c).
 */
#ifndef DILOCO_WORKER_TELEMETRY_H
#define DILOCO_WORKER_TELEMETRY_H

#include <jansson.h>
#include <stddef.h>

typedef struct telemetry telemetry;

/* Opens (creates, appends to) path. NULL with err when it cannot. */
telemetry *telemetry_open(const char *path, char *err, size_t errlen);
/* Writes obj as one line with its time ("t", unix seconds) and takes obj. A line that cannot be written (the
 * disk full) is lost, said once; tm NULL (no --log): obj is only freed. */
void telemetry_write(telemetry *tm, json_t *obj);
void telemetry_close(telemetry *tm);

#endif
