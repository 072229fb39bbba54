#!/bin/sh
# it_sync_evicted_midstep.sh: a worker stopped mid-interval for longer than the heartbeat timeout stops
# training the interval as a dead incarnation at the first inner step after it continues. Three workers
# train at the same pace (200 ms a step, H = 10: 2 s a round). Half a second into round 1, w3 is
# SIGSTOPped; the reaper evicts it and round 1 closes with w1 and w2. Then SIGCONT: w3's heartbeat thread
# is told UNKNOWN_WORKER within one beat, and the next diloco_after_step sees its flag, registers again,
# waits as a joiner for the open round to close and trains from there. Before, w3 trained the rest of the
# interval (to step 20) as the evicted incarnation and learnt it only at that sync, its steps thrown away.
# Checks: the corner happened as arranged; w3's rejoin (a stale sync record) came during the interval
# (step < 20), within 1.5 s of SIGCONT; w3's second incarnation is in no round before the one it joined and
# in every round after, and its first sync there comes H steps after the rejoin (it trained nothing dead);
# shard digests, commits and the final digests equal tests/tools/ref_quadratic with w3 away from round 1
# until it rejoined, having trained only the steps of round 1 it did (--away-steps, from its log).
# test: light (it waits more than it computes: 3 s of CPU in 10 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=midstep; NUMEL=4000; SEED=5; ROUNDS=4; H=10; A=1
rejoin_run 200
round() { $RCLI HGET "dl:{$RUN}:state" round:0; }
start_worker w3 --sync-every $H --steps 0 --heartbeat-interval 0.2 --step-delay-ms 200

wait_until 15 '[ "$(round)" -ge $A ]' "round 0 to close"
sleep 0.5
kill -STOP "$WRK_w3"
[ "$(round)" -eq $A ] || fail "round $A closed before w3 was stopped (the machine is too slow for this arrangement)"
say "w3 stopped during round $A"
wait_until 5 '[ "$($RCLI HEXISTS "dl:{$RUN}:workers" w3)" = 0 ]' "w3 to be evicted"
t_cont=$(date +%s.%N)
kill -CONT "$WRK_w3"
say "w3 evicted during round $A (closed rounds: $(round)); w3 continued"
wait_until 5 'grep -q "during inner step" "$TMP/worker-w3.log"' "w3 to register again during the interval"
# when w3 said so (its log line's time), not when this loop, polling every 0.2 s on a loaded box, saw it
stamp=$(sed -n 's/^\([0-9T:.-]*\)Z .*during inner step.*/\1/p' "$TMP/worker-w3.log" | head -n 1)
[ -n "$stamp" ] || fail "no dated 'during inner step' line in w3's log: $(grep 'inner step' "$TMP/worker-w3.log")"
t_back=$(date -u -d "$stamp" +%s.%N)

wait_workers w1 w2
wait_until 10 '[ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS" ]' "every shard at version $ROUNDS"
kill -TERM "$WRK_w3"
wait "$WRK_w3" || fail "w3 exited with status $? after SIGTERM"
[ "$(round)" -eq $ROUNDS ] || fail "the run closed $(round) rounds, expected $ROUNDS"
$RCLI HGET "dl:{$RUN}:f0:r$A" participants | grep -q w3 && fail "round $A closed with w3"

# the rejoin: one stale sync record during round A's interval, soon after SIGCONT
back=$(sync_field w3 '"stale":true' step)
[ -n "$back" ] || fail "w3 logged no stale sync: $(grep '"event":"sync"' "$TMP/w3.jsonl")"
trained=$((back - A * H))
[ "$trained" -gt 0 ] && [ "$trained" -lt $H ] ||
  fail "w3 registered again after its step $back, not during round $A's interval (steps $((A * H + 1))..$(((A + 1) * H)))"
secs=$(awk -v a="$t_back" -v b="$t_cont" 'BEGIN {printf "%.1f", a - b}')
awk -v s="$secs" 'BEGIN {exit !(s < 1.5)}' || fail "w3 registered again $secs s after SIGCONT"
grep -q "during inner step $trained of $H; registering again now" "$TMP/worker-w3.log" ||
  fail "w3's warning does not name inner step $trained: $(grep 'evicted' "$TMP/worker-w3.log")"
say "w3 registered again after inner step $trained of $H of round $A (step $back), $secs s after SIGCONT"

rejoin_check w3 $A
rejoin_dead_steps w3 "$back"
REF_SHARDS=2 assert_rejoin_reference w3 "--away w3=$A-$((REJOIN_ROUND - 1)) --away-steps w3=$trained"
say "digests equal the reference with w3 away from rounds $A..$((REJOIN_ROUND - 1)) after $trained steps of round $A"
