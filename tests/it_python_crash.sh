#!/bin/sh
# it_python_crash.sh: a PyTorch worker kill -9'd mid-run is evicted and the run goes on, as for a C
# worker; started again under the same id it rejoins and takes part in rounds again. One C quadratic
# worker (c1) and one PyTorch worker (p2, tests/python/quad_worker.py), --heartbeat-timeout 2.
. "$(dirname "$0")/lib.sh"
RUN=pycrash; NUMEL=20000
round() { $RCLI HGET "dl:{$RUN}:state" round:0; }
participants() { $RCLI HGET "dl:{$RUN}:f0:r$1" participants; }
start_py() {
  $PYTHON tests/python/quad_worker.py "$URL" $RUN p2 100000 10 --numel $NUMEL --seed 0 --step-delay 0.01 \
    --heartbeat 0.5 > "$TMP/py-p2-$1.log" 2>&1 &
  PY=$!; PIDS="$PIDS $PY"
}
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 2 --workers 2 --heartbeat-timeout 2
start_server s1 --lease-ttl-ms 2000
start_worker c1 --sync-every 10 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 10
start_py 1
wait_until 30 '[ "$(round)" -ge 3 ]' "three rounds with both workers"
participants 1 | grep -q p2 || fail "round 1 closed without the PyTorch worker: $(participants 1)"
wait_until 10 'grep -q "\"event\":\"sync\"" "$TMP/c1.jsonl"' "c1's first sync"
kill -9 "$PY"
killed_at=$(round)
say "kill -9 of the PyTorch worker at round $killed_at"
wait_until 15 '$RCLI HEXISTS "dl:{$RUN}:workers" p2 | grep -q 0' "p2 to be evicted"
$RCLI XRANGE "dl:{$RUN}:events" - + | grep -q '^evict' || fail "no eviction event"
after=$(round)
wait_until 20 '[ "$(round)" -ge $((after + 3)) ]' "the run to go on with c1 alone"
say "evicted; rounds $after..$(round) closed without it"
start_py 2
wait_until 20 '$RCLI HEXISTS "dl:{$RUN}:workers" p2 | grep -q 1' "p2 to register again"
back=$(round)
took_part() { for x in $(seq "$back" "$(round)"); do participants "$x"; done | grep -q "p2:"; }
wait_until 30 took_part "p2 to take part in a round after rejoining"
alive "$WRK_c1" || fail "the C worker died"
vs=$(shard_versions $RUN); set -- $vs
[ "$1" -ge $((back + 1)) ] || fail "shard versions $vs"
say "the restarted PyTorch worker rejoined at round $back and syncs again (versions $vs)"
