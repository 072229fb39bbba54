#!/bin/sh
# it_stream_in_flight_evicted.sh: a Streaming worker with 2 fragments in flight (--fragments-in-flight 2)
# evicted while its rounds wait at their barriers recovers. w3 trains fast (20 ms a step, a fragment every
# 10 steps) and w1, w2 slowly (100 ms), so w3's rounds of both fragments wait at their barriers; w3 is
# SIGSTOPped there past the heartbeat timeout, evicted (its arrivals dropped: w1 and w2 close the rounds
# without it) and continued. Its rounds in flight find it evicted and only say so (they do not register from
# their threads: worker/diloco/round.c, dl_defer_register); the training thread, once every round in flight
# has ended, registers again, once, and fetches everything. Checks: as w3 stops, it is at fragment 1's
# barrier while fragment 0's round is still open (2 in flight); it registered again exactly once after the
# stop, its rounds saying they left that to the training thread; its new incarnation takes part in later
# rounds of both fragments; every round closes (versions 4 and 3 after w1's and w2's 70 steps); then the same
# with IN_FLIGHT=2 for the mid-interval eviction of it_stream_evicted_midstep.sh (the heartbeat finds it
# between boundaries).
# test: light (it waits more than it computes: 5 s of CPU in 20 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=flightevict; H=20; STEPS=70
start_redis
stream_evict_run $RUN
for w in w1 w2; do
  start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 0.2 --step-delay-ms 100 --fragments-in-flight 2 --fragment-alpha 0.5
done
start_worker w3 --sync-every $H --steps 0 --heartbeat-interval 0.2 --step-delay-ms 20 --fragments-in-flight 2 --fragment-alpha 0.5
# (looking every 20 ms: w1 and w2 close fragment 0's round 0 about 0.6 s after w3's arrival, and w3 must be
# stopped before that)
wait_until 15 '[ "$($RCLI HEXISTS "dl:{$RUN}:f1:r0" a:w3)" = 1 ]' "w3 to arrive at fragment 1's round 0" 0.02
kill -STOP "$WRK_w3"
[ "$(round 0)" = 0 ] && [ "$($RCLI HEXISTS "dl:{$RUN}:f0:r0" a:w3)" = 1 ] ||
  fail "w3 arrived at fragment 1's round 0 without fragment 0's round 0 in flight (round 0 is at $(round 0)): not 2 in flight"
say "w3 stopped with its rounds of both fragments at their barriers (closed: fragment 0 $(round 0), fragment 1 $(round 1))"
wait_until 5 '[ "$($RCLI HEXISTS "dl:{$RUN}:workers" w3)" = 0 ]' "w3 to be evicted"
kill -CONT "$WRK_w3"
wait_workers w1 w2
wait_until 10 '[ "$(shard_versions $RUN)" = "4 3" ]' "fragment 0 at version 4 and fragment 1 at 3 (now $(shard_versions $RUN))"
kill -TERM "$WRK_w3"
wait "$WRK_w3" || fail "w3 exited with status $? after SIGTERM"
n=$(grep -c "registered as w3" "$TMP/worker-w3.log")
[ "$n" -eq 2 ] || fail "w3 registered $n times, expected twice (at start, once after the eviction): $(grep -i regist "$TMP/worker-w3.log")"
grep -q "registering again once the rounds in flight have ended" "$TMP/worker-w3.log" ||
  fail "w3's rounds in flight did not leave registering again to its training thread: $(grep -i evict "$TMP/worker-w3.log")"
assert_back_in_both $RUN w3
say "w3: $(grep -h 'evicted\|registering again once' "$TMP/worker-w3.log" | sed 's/.*WARN //' | cut -c1-140 | head -3 | tr '\n' '|')"
IN_FLIGHT=2 sh "$(dirname "$0")/it_stream_evicted_midstep.sh" > "$TMP/midstep.log" 2>&1 ||
  fail "mid-interval eviction with 2 fragments in flight: $(tail -5 "$TMP/midstep.log")"
say "mid-interval eviction with 2 fragments in flight: $(tail -1 "$TMP/midstep.log")"
