#!/bin/sh
# it_stream_rejoin.sh: a Streaming DiLoCo worker that registers again keeps the run's fragment order
# (worker/diloco/streaming.c, next_fragment). Three workers, 2 fragments, H = 20 (a fragment every 10 steps),
# 120 ms a step. w3 is SIGSTOPped in its second interval for longer than the heartbeat timeout, evicted while
# w1 and w2 go on (fragment 0's round closes without it), and continued: it loses its round as stale and
# registers again with the fragments' versions moved. A worker that counted its fragments in turn was then one
# fragment out of phase: its fragment in flight waited at a barrier for w1 and w2, whose own fragment in
# flight waited for it, and the run hung. Now it sends the fragment whose round is the lowest, so:
#   - w1 and w2 finish their 70 steps (7 fragment boundaries) and every round of both fragments closes;
#   - w3's new incarnation takes part in later rounds of both fragments.
. "$(dirname "$0")/lib.sh"
RUN=streamrejoin; H=20; F=2; STEPS=70
start_redis
init_run $RUN --trainer quadratic --numel 4000 --shards 2 --fragments $F --workers 3 --min-workers 2 --seed 3 \
  --heartbeat-timeout 0.8
start_server s1 --lease-ttl-ms 2000
round() { $RCLI HGET "dl:{$RUN}:state" round:$1; }
for w in w1 w2; do
  start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 0.2 --step-delay-ms 120
done
start_worker w3 --sync-every $H --steps 0 --heartbeat-interval 0.2 --step-delay-ms 120

wait_until 15 '[ "$(round 0)" -ge 1 ]' "fragment 0's round 0 to close"
sleep 0.4
kill -STOP "$WRK_w3"
say "w3 stopped in its second interval"
wait_until 5 '[ "$($RCLI HEXISTS "dl:{$RUN}:workers" w3)" = 0 ]' "w3 to be evicted"
kill -CONT "$WRK_w3"
say "w3 evicted (rounds closed: fragment 0 $(round 0), fragment 1 $(round 1)); w3 continued"

t0=$(date +%s)
wait_until 25 '! alive "$WRK_w1" && ! alive "$WRK_w2"' \
  "w1 and w2 to finish their $STEPS steps (rounds closed: fragment 0 $(round 0), fragment 1 $(round 1); a hang here is the fragments out of phase)"
wait "$WRK_w1" || fail "w1 exited with status $?"
wait "$WRK_w2" || fail "w2 exited with status $?"
wait_until 10 '[ "$(shard_versions $RUN)" = "4 3" ]' "fragment 0 at version 4 and fragment 1 at 3 (now $(shard_versions $RUN))"
say "w1 and w2 finished $(( $(date +%s) - t0 )) s after w3 continued; every round closed (versions $(shard_versions $RUN))"
kill -TERM "$WRK_w3"
wait "$WRK_w3" || fail "w3 exited with status $? after SIGTERM"

inc=$($RCLI XRANGE "dl:{$RUN}:events" - + | awk '/^join$/ {j = 1; next} j && /^worker$/ {getline; w = $0; next}
  j && /^inc$/ {getline; if (w == "w3") last = $0; j = 0} END {print last}')
joins=$($RCLI XRANGE "dl:{$RUN}:events" - + | awk '/^join$/ {j = 1; next} j && /^worker$/ {getline; if ($0 == "w3") n++; j = 0} END {print n + 0}')
[ "$joins" -eq 2 ] || fail "w3 joined $joins time(s), expected twice"
for f in 0 1; do
  in=0
  for r in $(seq 0 $(($(round $f) - 1))); do $RCLI HGET "dl:{$RUN}:f$f:r$r" participants | grep -q "w3:$inc" && in=$((in + 1)); done
  [ "$in" -ge 1 ] || fail "w3's incarnation $inc took part in no round of fragment $f"
  say "fragment $f: w3's second incarnation ($inc) took part in $in of its $(round $f) rounds"
done
