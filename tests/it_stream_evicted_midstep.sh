#!/bin/sh
# it_stream_evicted_midstep.sh: in Streaming DiLoCo too, a worker stopped mid-interval for longer than the
# heartbeat timeout registers again at the first inner step after it continues (worker/diloco/after_step.c),
# instead of training on as a dead incarnation until a fragment's round tells it. Three workers, 2 fragments,
# H = 20 (a fragment every 10 steps), 120 ms a step. w3 is SIGSTOPped a third of the way into its second
# interval, evicted, and continued. Checks: w3's log says it registered again during an inner step of that
# interval, within 2 s of SIGCONT, and its stale sync record is at that step; its second incarnation takes
# part in later rounds of both fragments; every round of both fragments closes (versions 4 and 3 after w1's
# and w2's 70 steps). With IN_FLIGHT=D in the environment every worker runs with --fragments-in-flight D
# (it_stream_in_flight_evicted.sh: D = 2, both fragments' rounds in flight as w3 stops).
# test: light (it waits more than it computes: 2 s of CPU in 11 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
FLIGHT=${IN_FLIGHT:+--fragments-in-flight $IN_FLIGHT --fragment-alpha 0.5}
RUN=streamevict; H=20; F=2; STEPS=70
start_redis
stream_evict_run $RUN
for w in w1 w2; do
  start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 0.2 --step-delay-ms 120 $FLIGHT
done
start_worker w3 --sync-every $H --steps 0 --heartbeat-interval 0.2 --step-delay-ms 120 $FLIGHT

wait_until 15 '[ "$(round 0)" -ge 1 ]' "fragment 0's round 0 to close"
sleep 0.4
kill -STOP "$WRK_w3"
say "w3 stopped in its second interval"
wait_until 5 '[ "$($RCLI HEXISTS "dl:{$RUN}:workers" w3)" = 0 ]' "w3 to be evicted"
kill -CONT "$WRK_w3"
say "w3 evicted (rounds closed: fragment 0 $(round 0), fragment 1 $(round 1)); w3 continued"
wait_until 2 'grep -q "during inner step" "$TMP/worker-w3.log"' "w3 to register again during an inner step"
msg=$(grep "during inner step" "$TMP/worker-w3.log")
k=$(echo "$msg" | sed 's/.*during inner step \([0-9]*\) of \([0-9]*\);.*/\1/')
n=$(echo "$msg" | sed 's/.*during inner step \([0-9]*\) of \([0-9]*\);.*/\2/')
[ "$n" -eq $((H / F)) ] || fail "w3's interval is $n steps, not $((H / F)): $msg"

wait_workers w1 w2
wait_until 10 '[ "$(shard_versions $RUN)" = "4 3" ]' "fragment 0 at version 4 and fragment 1 at 3 (now $(shard_versions $RUN))"
kill -TERM "$WRK_w3"
wait "$WRK_w3" || fail "w3 exited with status $? after SIGTERM"

back=$(sync_field w3 '"stale":true' step)
[ -n "$back" ] && [ $(( (back - 1) % n + 1 )) -eq "$k" ] ||
  fail "w3's stale sync record is at step '$back', not at inner step $k of an interval: $(grep '"event":"sync"' "$TMP/w3.jsonl")"
assert_back_in_both $RUN w3
say "w3 registered again during inner step $k of $n (step $back), not at a fragment's round"
