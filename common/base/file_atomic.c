/*
 * file_atomic.c: file_write_atomic (file_atomic.h). The folder is synced after the rename so that the
 * new name survives a power loss too; a failure there is not reported (the data itself is synced).
 */
#include "base/file_atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

#define WRITE_MAX (1u << 30) /* bytes per write() call */

static int fsync_dir_of(const char *path)
{
    char *dup = strdup(path);
    if (!dup) return -1;
    char *slash = strrchr(dup, '/');
    const char *dir = slash ? (slash == dup ? "/" : (*slash = '\0', dup)) : ".";
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    int rc = fd < 0 ? -1 : fsync(fd);
    if (fd >= 0) close(fd);
    free(dup);
    return rc;
}

static int write_all(int fd, const char *p, size_t left, const char *tmp, char *err, size_t errlen)
{
    while (left > 0) {
        ssize_t w = write(fd, p, left > WRITE_MAX ? WRITE_MAX : left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            err_set(err, errlen, "writing %s: %s", tmp, w < 0 ? strerror(errno) : "short write");
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    return 0;
}

int file_write_atomic(const char *path, const file_chunk *chunks, int nchunks, char *err, size_t errlen)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        err_set(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    for (int i = 0; i < nchunks; i++)
        if (write_all(fd, chunks[i].p, chunks[i].len, tmp, err, errlen) != 0) goto fail;
    if (fsync(fd) < 0) {
        err_set(err, errlen, "fsync %s: %s", tmp, strerror(errno));
        goto fail;
    }
    if (close(fd) < 0) {
        fd = -1;
        err_set(err, errlen, "closing %s: %s", tmp, strerror(errno));
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) < 0) {
        err_set(err, errlen, "rename %s -> %s: %s", tmp, path, strerror(errno));
        goto fail;
    }
    fsync_dir_of(path);
    return 0;
fail:
    if (fd >= 0) close(fd);
    unlink(tmp);
    return -1;
}
