/*
 * telemetry.c: bin/worker's --log, followed by name through a rotation (telemetry.h).
 *
 * Before each line, stat() of the name against fstat() of the file open: a different file (a rotation's new
 * one) is opened and the old one closed. A name that names nothing (moved away, the new one not made yet)
 * keeps the old file: the lines until the new one appears belong with the rotated ones, and making the file
 * ourselves could race logrotate's own `create`; unless the old file was deleted (no link left: `rm`), whose
 * lines nobody could read and whose space would be freed only at our exit: then the name is made anew. A
 * stat is a microsecond; lines come at most once a step.
 */
#include "telemetry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/util.h"

struct telemetry {
    char *path;
    FILE *f;
    int told_write; /* a failed write said once */
    int told_open;  /* a failed reopen said once */
};

telemetry *telemetry_open(const char *path, char *err, size_t errlen)
{
    telemetry *tm = calloc(1, sizeof *tm);
    if (!tm || !(tm->path = strdup(path)) || !(tm->f = fopen(path, "a"))) {
        err_set(err, errlen, "cannot open log file %s: %s", path, strerror(errno));
        telemetry_close(tm);
        return NULL;
    }
    return tm;
}

/* The name names another file than ours, or ours was deleted: move to it (telemetry.c's comment). */
static void follow_name(telemetry *tm)
{
    struct stat named, open;
    if (fstat(fileno(tm->f), &open) != 0) return;
    if (stat(tm->path, &named) != 0) {
        if (open.st_nlink > 0) return; /* moved away: the new file is not there yet */
    } else if (named.st_dev == open.st_dev && named.st_ino == open.st_ino) {
        return;
    }
    FILE *f = fopen(tm->path, "a");
    if (!f) {
        if (!tm->told_open)
            log_warn("--log %s was rotated but cannot be opened again (%s): its lines go on to the rotated file",
                     tm->path, strerror(errno));
        tm->told_open = 1;
        return;
    }
    fclose(tm->f);
    tm->f = f;
    tm->told_open = 0;
    log_info("--log %s was rotated: writing to the new file", tm->path);
}

void telemetry_write(telemetry *tm, json_t *obj)
{
    if (!tm) {
        json_decref(obj);
        return;
    }
    follow_name(tm);
    json_object_set_new(obj, "t", json_real((double)wall_ms() / 1000.0));
    json_dumpf(obj, tm->f, JSON_COMPACT);
    fputc('\n', tm->f);
    if ((fflush(tm->f) != 0 || ferror(tm->f)) && !tm->told_write) {
        log_warn("cannot write the --log file: %s; its lines are lost from here on (training goes on: free space "
                 "there, or give --log another file)",
                 strerror(errno));
        tm->told_write = 1;
    }
    json_decref(obj);
}

void telemetry_close(telemetry *tm)
{
    if (!tm) return;
    if (tm->f) fclose(tm->f);
    free(tm->path);
    free(tm);
}
