#!/bin/sh
# it_sync_membership.sh: elastic membership in sync mode.
#  A. a worker that joins mid-run never blocks the open round (it joins at the next one), starts from
#     that round's result, and then takes part in later rounds;
#  B. min_workers is respected: with --min-workers 2, when one of two workers dies the survivor waits
#     (no round closes with one worker) until a new worker joins, then the run goes on.
. "$(dirname "$0")/lib.sh"
round() { $RCLI HGET "dl:{$RUN}:state" round:0; }
start_redis

# ---- A: joining
RUN=join
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 2
start_server a1 --lease-ttl-ms 2000
for w in w1 w2; do start_worker $w --sync-every 20 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 10; done
wait_until 20 '[ "$(round)" -ge 2 ]' "two rounds in run A"
start_worker w3 --sync-every 20 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 100   # 2 s per round
wait_until 10 '$RCLI HEXISTS "dl:{$RUN}:workers" w3 | grep -q 1' "w3 to register"
# the round that was open when w3 registered: it joined the next one (the join event says which)
joined=$($RCLI XRANGE "dl:{$RUN}:events" - + | awk '/^join$/ {getline; getline; w = $0} w == "w3" && /^joined$/ {getline; print; exit}')
r=$((joined - 1))
wait_until 3 '[ "$(round)" -gt $r ]' "round $r to close without waiting for the joiner (it trains 2 s)"
$RCLI HGET "dl:{$RUN}:f0:r$r" participants | grep -q w3 && fail "the joiner was counted in the round it joined"
# it waited for that round to close and started from its result, with the others (training from round
# r's parameters would miss round r and then make round r+1 wait for it)
wait_until 5 'grep -q "joined run" "$TMP/worker-w3.log"' "w3 to fetch its parameters"
grep -q "joined run $RUN at version $joined " "$TMP/worker-w3.log" ||
  fail "the joiner did not start from version $joined: $(grep 'joined run' "$TMP/worker-w3.log")"
took_part() { for x in $(seq "$r" "$(round)"); do $RCLI HGET "dl:{$RUN}:f0:r$x" participants; done | grep -q "w3:"; }
wait_until 30 took_part "w3 to take part in a round"
say "A: round $r closed without the joiner; it took part later"
kill -9 "$WRK_w1" "$WRK_w2" "$WRK_w3" "$SRV_a1"

# ---- B: min_workers
RUN=minw
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 2 --min-workers 2 --heartbeat-timeout 2
start_server b1 --lease-ttl-ms 2000
for w in v1 v2; do start_worker $w --sync-every 20 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 10; done
wait_until 20 '[ "$(round)" -ge 2 ]' "two rounds in run B"
kill -9 "$WRK_v2"
wait_until 10 '$RCLI HEXISTS "dl:{$RUN}:workers" v2 | grep -q 0' "v2 to be evicted"
r=$(round); sleep 3
[ "$(round)" -le $((r + 1)) ] || fail "rounds kept closing with one worker below --min-workers 2 ($r -> $(round))"
stuck=$(round)
start_worker v3 --sync-every 20 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 10
wait_until 20 '[ "$(round)" -ge $((stuck + 2)) ]' "the run to go on once a second worker joined"
say "B: waited at round $stuck with one worker, went on with two"
