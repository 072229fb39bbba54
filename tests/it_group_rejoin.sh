#!/bin/sh
# it_group_rejoin.sh: a process group evicted mid-interval stops training the interval as a dead incarnation
# at the same inner step on every rank, registers again as a joiner and waits for the open round to close, as
# a single process does (tests/it_sync_evicted_midstep.sh). Two bin/workers w1, w2 and a group g3 of 2 ranks
# (tests/tools/group_worker) train at the same pace (200 ms a step, H = 10: 2 s a round). Half a second into
# round 1 the group's process is SIGSTOPped (both ranks); the reaper evicts it and round 1 closes with w1 and
# w2. Then SIGCONT: each rank's heartbeat is told UNKNOWN_WORKER, and at the group's next CHECK (a small
# allgather every few steps, group.c; every step at this pace) every rank stops the interval at that step, the
# group registers again, waits for the open round to close and trains the next with the others. Before, the
# ranks trained the rest of the interval (to step 20) as the evicted incarnation and learnt it only at that
# sync (group.c's recover), their steps thrown away.
# Checks: the corner happened as arranged; both ranks logged the eviction at the same inner step, during round
# 1's interval (step < 20), within 1.5 s of SIGCONT, and report exactly one stale sync (that step); the next
# sync of each comes H steps later at the version after the round the group rejoined (nothing trained dead);
# the group's second incarnation is in no round before that one and in every round after, with both ranks'
# arrivals; shard digests, commits and every member's final digest equal tests/tools/ref_quadratic with g3
# away from round 1 until it rejoined, having trained only the steps of round 1 it did (--away-steps).
# test: light (it waits more than it computes: 3 s of CPU in 13 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=grejoin; NUMEL=4000; SEED=5; ROUNDS=5; H=10; A=1
rejoin_run 200
round() { $RCLI HGET "dl:{$RUN}:state" round:0; }
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g3 --ranks 2 --steps 100000 --sync-every $H \
  --heartbeat-ms 200 --step-delay-ms 200 > "$TMP/g3.out" 2> "$TMP/group-g3.log" &
G3=$!; PIDS="$PIDS $G3"

wait_until 15 '[ "$(round)" -ge $A ]' "round 0 to close"
sleep 0.5
kill -STOP $G3
[ "$(round)" -eq $A ] || fail "round $A closed before g3 was stopped (the machine is too slow for this arrangement)"
say "g3 stopped during round $A"
wait_until 5 '[ "$($RCLI HEXISTS "dl:{$RUN}:workers" g3)" = 0 ]' "g3 to be evicted"
t_cont=$(date +%s.%N)
kill -CONT $G3
say "g3 evicted during round $A (closed rounds: $(round)); g3 continued"
wait_until 5 '[ "$(grep -c "^sync rank . .* stale 1 " "$TMP/g3.out")" -ge 2 ]' "both ranks of g3 to register again"
# when the later rank logged the eviction (its line's time), not when this loop, polling every 0.2 s, saw the syncs
stamp=$(sed -n 's/^\([0-9T:.-]*\)Z .*the group was evicted .* during inner step.*/\1/p' "$TMP/group-g3.log" | sort | tail -n 1)
[ -n "$stamp" ] || fail "no dated eviction line in g3's log: $(grep evicted "$TMP/group-g3.log")"
t_back=$(date -u -d "$stamp" +%s.%N)

wait_workers w1 w2
wait_until 10 '[ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS" ]' "every shard at version $ROUNDS"
kill -TERM $G3
[ "$(round)" -eq $ROUNDS ] || fail "the run closed $(round) rounds, expected $ROUNDS"
$RCLI HGET "dl:{$RUN}:f0:r$A" participants | grep -q g3 && fail "round $A closed with g3"

# the same inner step on both ranks, during round A's interval, soon after SIGCONT
steps=$(sed -n 's/.*the group was evicted .* during inner step \([0-9]*\) of .*/\1/p' "$TMP/group-g3.log" | sort -u)
[ "$(grep -c 'the group was evicted' "$TMP/group-g3.log")" -eq 2 ] && [ "$(echo "$steps" | wc -l)" -eq 1 ] ||
  fail "the ranks did not stop at one step: $(grep 'evicted' "$TMP/group-g3.log")"
trained=$steps
[ "$trained" -gt 0 ] && [ "$trained" -lt $H ] || fail "g3 registered again after inner step $trained of round $A"
secs=$(awk -v a="$t_back" -v b="$t_cont" 'BEGIN {printf "%.1f", a - b}')
awk -v s="$secs" 'BEGIN {exit !(s < 1.5)}' || fail "g3 registered again $secs s after SIGCONT"
say "both ranks stopped after inner step $trained of $H of round $A, $secs s after SIGCONT"

rejoin_check g3 $A
for r in 0 1; do
  grep "^sync rank $r " "$TMP/g3.out" | awk '{print $5, $13, $NF}' > "$TMP/g3-$r.txt" # version stale step
  stale=$(awk '$2 == 1' "$TMP/g3-$r.txt")
  [ "$(echo "$stale" | wc -l)" -eq 1 ] || fail "g3 rank $r lost $(echo "$stale" | wc -l) rounds (want 1, round $A): $(cat "$TMP/g3-$r.txt")"
  back=$(echo "$stale" | awk '{print $3}')
  [ "$back" -eq $((A * H + trained)) ] || fail "g3 rank $r's stale sync is at step $back, not $((A * H + trained))"
  set -- $(awk 'seen {print $1, $3; exit} $2 == 1 {seen = 1}' "$TMP/g3-$r.txt")
  [ "$1" = $((REJOIN_ROUND + 1)) ] ||
    fail "g3 rank $r's first sync after it registered again is at version $1, not $((REJOIN_ROUND + 1)) (the round it joined)"
  [ "$2" -eq $((back + H)) ] || fail "g3 rank $r trained $(($2 - back - H)) inner steps as its evicted incarnation"
done
say "each rank lost round $A only; registered again as incarnation $REJOIN_INC, the group waited for round $((REJOIN_ROUND - 1)) to close and synced round $REJOIN_ROUND H steps later"
no_half_group $RUN g3 2 > "$TMP/half.txt" || fail "a half group in a round: $(cat "$TMP/half.txt")"

REF_SHARDS=2 REF_ARGS="--away g3=$A-$((REJOIN_ROUND - 1)) --away-steps g3=$trained" REF_WORKERS=w1,w2,g3 \
  assert_matches_reference
REF_WORKERS=w1,w2 assert_workers_end_at "$REF_DIGEST"
for r in 0 1; do
  got=$(grep "^sync rank $r version $ROUNDS " "$TMP/g3.out" | awk '{print $7}')
  [ "$got" = "$REF_DIGEST" ] || fail "g3 rank $r at version $ROUNDS has digest $got, reference $REF_DIGEST"
done
say "digests equal the reference with g3 away from rounds $A..$((REJOIN_ROUND - 1)) after $trained steps of round $A"
