#!/usr/bin/python3
"""replica_wait.py URL RUN WORKER_ID CONNECT_TIMEOUT: a PyTorch worker of a quadratic run pointed at URL, with
DiLoCo(connect_timeout=CONNECT_TIMEOUT); 4 steps, one sync every 2. Prints "done" when its session closed
cleanly, else "raised <type>: <message>" (exit 1): tests/it_redis_replica_url.sh points it at a read-only
replica, which refuses its registration (READONLY) until the replica is promoted."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import rediloco  # noqa: E402

URL, RUN, WID, TIMEOUT = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
m = torch.nn.Module()
m.x = torch.nn.Parameter(torch.zeros(int(os.environ.get("NUMEL", "2000"))))
inner = torch.optim.SGD(m.parameters(), lr=0.01)
try:
    with rediloco.DiLoCo(URL, RUN, m, inner, sync_every=2, worker_id=WID, connect_timeout=TIMEOUT) as dl:
        for _ in range(4):
            m.x.grad = m.x.detach() - 1.0
            inner.step()
            inner.zero_grad()
            dl.report(0.0)
except Exception as e:  # noqa: BLE001 - what it raised is what the test reads
    print("raised %s: %s" % (type(e).__name__, e), flush=True)
    sys.exit(1)
print("done", flush=True)
