#!/usr/bin/env python3
"""tree_cpu.py OUT CMD [ARGS...]: runs CMD, exits with its status, and writes to OUT the CPU seconds of CMD and
of every process it started, user + system and system alone ("CPU SYS"), for tests/run.sh's report.

A test starts servers and workers in the background and kills them at its end without waiting for them,
and a daemonized redis-server leaves its parent at once: their CPU time would be nobody's (orphans go to
init, which reaps them). So this process makes itself the child subreaper of everything CMD starts
(prctl PR_SET_CHILD_SUBREAPER): orphans come to it, it reaps every child as it ends, and the kernel adds
each reaped child's time to this process's RUSAGE_CHILDREN. After CMD ends it reaps for up to a second
more (what CMD's cleanup killed is still dying); a process still running after that is not counted.
Standard library only."""
import ctypes
import errno
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def reap_until(deadline):
    """reaps ended children until none is left or the deadline passes"""
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.02)


def main():
    if len(sys.argv) < 3:
        sys.stderr.write("usage: tree_cpu.py OUT CMD [ARGS...]\n")
        return 2
    out, cmd = sys.argv[1], sys.argv[2:]
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    child = subprocess.Popen(cmd)
    status = None
    while status is None:  # reaps orphans as they end, until CMD itself does
        try:
            pid, st = os.wait()
        except InterruptedError:
            continue
        except OSError as e:
            if e.errno == errno.ECHILD:
                break
            raise
        if pid == child.pid:
            status = os.waitstatus_to_exitcode(st)
    reap_until(time.monotonic() + 1.0)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w") as f:
        f.write("%.0f %.0f\n" % (ru.ru_utime + ru.ru_stime, ru.ru_stime))
    if status is None:
        return 1
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main())
