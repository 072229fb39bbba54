#!/bin/sh
# it_stream_join.sh: a worker that joins a Streaming DiLoCo run mid-way takes the run's fragment order
# (worker/diloco/streaming.c, next_fragment). Two workers, 2 fragments, H = 20 (a fragment every 10 steps),
# 100 ms a step; a third joins once fragment 0 has closed 2 rounds and fragment 1 one, while fragment 1's
# round is in flight. A joiner that counted its fragments from 0 sent fragment 0 while the others had
# fragment 1 in flight, each waited at its barrier for the other, and the run hung (it did, before).
# Now: every worker finishes, every round of both fragments closes, and the joiner takes part in rounds of
# both fragments (after at most a round or two lost as stale while it catches up with the rounds in flight;
# those rounds were not waiting for it, and its log says so without a "lost" warning).
# test: light (it waits more than it computes: 3 s of CPU in 13 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=streamjoin; H=20; F=2; STEPS=80
start_redis
init_run $RUN --trainer quadratic --numel 4000 --shards 2 --fragments $F --workers 2 --seed 3 --heartbeat-timeout 2
start_server s1 --lease-ttl-ms 2000
round() { $RCLI HGET "dl:{$RUN}:state" round:$1; }
for w in w1 w2; do start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 0.2 --step-delay-ms 100; done
wait_until 15 '[ "$(round 0)" -ge 2 ] && [ "$(round 1)" -ge 1 ]' "fragment 0 to close 2 rounds and fragment 1 one"
say "w3 joins with fragment 0 at round $(round 0) and fragment 1 at $(round 1)"
start_worker w3 --sync-every $H --steps $STEPS --heartbeat-interval 0.2 --step-delay-ms 100
wait_until 30 '! alive "$WRK_w1" && ! alive "$WRK_w2" && ! alive "$WRK_w3"' \
  "every worker to finish its $STEPS steps (a hang here is a joiner out of phase with the run's fragments)"
for w in w1 w2 w3; do eval "wait \$WRK_$w" || fail "$w exited with status $?"; done
v0=$(round 0); v1=$(round 1)
[ "$(shard_versions $RUN)" = "$v0 $v1" ] || fail "shard versions $(shard_versions $RUN), rounds closed $v0 $v1"
for f in 0 1; do
  in=$(rounds_with $RUN $f "w3:")
  [ "$in" -ge 2 ] || fail "w3 took part in $in round(s) of fragment $f"
  say "fragment $f: $(round $f) rounds closed, w3 in $in of them"
done
# a round the joiner volunteered for and missed (it joined for a later one) is said as that, not as a loss
lost=$(grep -c "WARN .*lost (stale)" "$TMP/worker-w3.log")
late=$(grep -c "closed without us (we joined for round" "$TMP/worker-w3.log")
[ "$lost" -eq 0 ] || fail "the joiner warned of $lost lost round(s): $(grep 'lost (stale)' "$TMP/worker-w3.log")"
say "the joiner missed $late round(s) it volunteered for, said as such (no 'lost' warning)"
