#!/bin/sh
# it_python_dylu.sh: Dynamic Local Updates reach a PyTorch worker. In a run with --dylu
# --dylu-base-sync-every 40, a PyTorch worker (DiLoCo(..., dylu=True), 40 ms per step) and a C worker
# (10 ms per step): the run assigns the PyTorch worker H = 10 (a quarter of the fastest worker's speed),
# dl.sync_every reports it, and the worker syncs every ~10 steps from then on.
# test: light (it waits more than it computes: 2 s of CPU in 10 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=pydylu
start_redis
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 2 --dylu --dylu-base-sync-every 40
start_server s1 --lease-ttl-ms 2000
start_worker fast --dylu --sync-every 40 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 10
$PYTHON tests/python/quad_worker.py "$URL" $RUN slow 100000 40 --numel 20000 --seed 0 --dylu --step-delay 0.04 \
  --heartbeat 0.5 --sync-log "$TMP/slow.syncs" > "$TMP/py-slow.log" 2>&1 &
PIDS="$PIDS $!"
# steps between the PyTorch worker's last two syncs, and the H the package reports at the last one
gap() { tail -n 2 "$TMP/slow.syncs" 2>/dev/null | sed 's/.*"step": \([0-9]*\).*/\1/' | awk 'NR==1 {a=$1} NR==2 {print $1 - a}'; }
h() { tail -n 1 "$TMP/slow.syncs" 2>/dev/null | sed 's/.*"h": \([0-9]*\).*/\1/'; }
wait_until 60 'near "$(gap)" 10 && near "$(h)" 10' "the PyTorch worker to sync every ~10 steps"
say "the PyTorch worker follows DyLU: dl.sync_every $(h), $(gap) steps between its last two syncs"
