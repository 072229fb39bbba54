#!/bin/sh
# it_dylu.sh: Dynamic Local Updates. Three workers train at 1x, 2x and 4x speed (40, 20 and 10 ms per
# step) in a run with --dylu --dylu-base-sync-every 40. Within two heartbeats the run assigns them
# H = 10, 20 and 40 (H_w = max(1, floor(v_w / v_max * H))), visible in status, and each worker syncs
# at its own H from its next sync on, so all three reach the barrier at about the same time.
# Then --dylu on a run made without DyLU: nothing would assign an H, and the flag was silently moot; the
# worker now says so once (worker/diloco/state.c check_dylu), and the DyLU run's workers do not.
. "$(dirname "$0")/lib.sh"
RUN=dylu
start_redis
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 3 --dylu --dylu-base-sync-every 40
start_server s1 --lease-ttl-ms 2000
start_worker slow --dylu --sync-every 40 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 40
start_worker mid  --dylu --sync-every 40 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 20
start_worker fast --dylu --sync-every 40 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 10
wait_until 20 'near "$(dylu_h slow)" 10 && near "$(dylu_h mid)" 20 && near "$(dylu_h fast)" 40' "H to follow speed"
say "status shows H: slow $(dylu_h slow), mid $(dylu_h mid), fast $(dylu_h fast)"
# the workers sync at their own H once they adopted it: steps between the last two syncs
gap() { grep '"event":"sync"' "$TMP/$1.jsonl" | tail -n 2 | sed 's/.*"step":\([0-9]*\).*/\1/' | awk 'NR==1 {a=$1} NR==2 {print $1 - a}'; }
wait_until 30 'near "$(gap slow)" 10 && near "$(gap mid)" 20 && near "$(gap fast)" 40' "workers to sync at their H"
say "steps between syncs: slow $(gap slow), mid $(gap mid), fast $(gap fast)"
grep -q "was made without DyLU" "$TMP/worker-slow.log" && fail "a worker of the DyLU run was told it has none"
RUN=nodylu
init_run $RUN --trainer quadratic --numel 2000 --shards 1 --workers 1
start_server s2
start_worker plain --dylu --sync-every 15 --steps 30
wait_workers plain
grep -q "WARN --dylu (diloco_options.dylu): run 'nodylu' was made without DyLU (coordinator init --dylu), so nothing assigns this worker an H: it syncs every 15 steps, its own" \
  "$TMP/worker-plain.log" || fail "--dylu on a run without DyLU was not said: $(grep -E 'WARN' "$TMP/worker-plain.log")"
say "--dylu on a run without DyLU: said once, the worker trained at its own H"
