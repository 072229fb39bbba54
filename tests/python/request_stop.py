#!/usr/bin/python3
"""request_stop.py URL RUN REDIS_PID NUMEL SEED: a host whose stop reaches libdiloco only through
diloco_request_stop, from another thread, while its sync retries a Redis that is gone.

The package passes its own stop flag as diloco_options.stop (set by its signal handlers and stop()), so the
session's reconnects used to watch that flag alone: a host that calls diloco_request_stop (a watchdog, a C
host with a flag of its own) waited for Redis to come back. This joins a quadratic run, syncs once, kills
Redis (REDIS_PID, SIGKILL), and 0.5 s later calls the library's diloco_request_stop directly, not stop(): the
package's flag stays 0. The step whose sync is retrying must end within 3 s of that call, raising Stopped
(diloco_stop_requested says the session was asked; before, a DiLoCoError that said it stopped). Prints one
"ok ..." line with the figures."""
import os
import signal
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rediloco  # noqa: E402
from quad_worker import QuadAdamW, gradient, problem  # noqa: E402

url, run, redis_pid, numel, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
H = 5
model = torch.nn.Module()
model.x = torch.nn.Parameter(torch.zeros(numel))
a, c = problem(seed, "rs", numel)
inner = QuadAdamW(model.parameters())
with rediloco.DiLoCo(url, run, model, inner, sync_every=H, worker_id="rs", heartbeat_interval=0.5) as dl:
    for _ in range(H):  # the first sync, with Redis up
        gradient(model.x, a, c)
        inner.step()
    assert dl.last_sync is not None, "no sync in the first %d steps" % H
    os.kill(redis_pid, signal.SIGKILL)
    asked = []
    timer = threading.Timer(0.5, lambda: (asked.append(time.monotonic()), dl._lib.diloco_request_stop(dl._d)))
    timer.start()
    t0 = time.monotonic()
    try:
        for _ in range(10 * H):
            gradient(model.x, a, c)
            inner.step()
        sys.exit("FAIL: %d more steps with Redis gone and a stop requested" % (10 * H))
    except (rediloco.DiLoCoError, rediloco.Stopped) as e:
        ended = time.monotonic()
        timer.cancel()
        if not asked:
            sys.exit("FAIL: the sync failed before the stop was asked for: %s" % e)
        took = ended - asked[0]
        if took > 3.0 or not isinstance(e, rediloco.Stopped):
            sys.exit("FAIL: the step ended %.2f s after diloco_request_stop (want < 3 s, Stopped): %s: %s"
                     % (took, type(e).__name__, e))
        print("ok: the step ended %.2f s after diloco_request_stop, %.2f s after Redis was killed: Stopped(%s)"
              % (took, ended - t0, str(e)[:160]))
    dl._stop_reason = "test over"  # the close then gives Redis its closing timeout, not a wait for it
