/* tests/fd_limit.h: put this process at its descriptor limit and back, for the unit tests of what a process
 * out of descriptors (`ulimit -n`) does: the soft limit lowered to 64 and every free descriptor under it
 * taken (with /dev/null), so the next open(), socket() or accept() fails with EMFILE. Header-only: the test
 * programs are one file each. */
#ifndef TESTS_FD_LIMIT_H
#define TESTS_FD_LIMIT_H

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#define FD_LIMIT_LOW 64

typedef struct {
    struct rlimit old;
    int fds[FD_LIMIT_LOW];
    int n;
} fd_limit;

/* 0 when every descriptor under the lowered limit is taken, -1 when the limit could not be lowered. */
static inline int fd_limit_exhaust(fd_limit *l)
{
    l->n = 0;
    if (getrlimit(RLIMIT_NOFILE, &l->old) != 0) return -1;
    struct rlimit low = l->old;
    low.rlim_cur = FD_LIMIT_LOW;
    if (setrlimit(RLIMIT_NOFILE, &low) != 0) return -1;
    while (l->n < FD_LIMIT_LOW && (l->fds[l->n] = open("/dev/null", O_RDONLY)) >= 0) l->n++;
    return 0;
}

/* The descriptors closed and the old limit back: 0, or -1 when the limit could not be restored. */
static inline int fd_limit_restore(fd_limit *l)
{
    while (l->n > 0) close(l->fds[--l->n]);
    return setrlimit(RLIMIT_NOFILE, &l->old);
}

#endif
