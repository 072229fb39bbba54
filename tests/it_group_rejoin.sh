#!/bin/sh
# it_group_rejoin.sh: a process group evicted mid-round registers again as a joiner and waits for the open
# round to close, as a single process does (group.c's recover, fetch_wait_joined). Two bin/workers w1, w2 and
# a group g3 of 2 ranks (tests/tools/group_worker) train at the same pace (200 ms a step, H = 10: 2 s a
# round). Half a second into round 1 the group's process is SIGSTOPped (both ranks); the reaper evicts it and
# round 1 closes with w1 and w2. Then SIGCONT: the ranks end their interval, find the group evicted at their
# sync and recover, about a second into round 2, which does not wait for the group registered again. Before,
# recover fetched round 2's start and the group trained round 2 for nothing: it arrived after round 2 closed
# and lost it as STALE too. Now it waits for round 2 to close and trains round 3 with the others.
# Checks: the corner happened as arranged; every rank reports exactly one stale sync (round 1), the next one
# at the version after the round the group rejoined; the group's second incarnation is in no round before
# that one and in every round after, with both ranks' arrivals; shard digests, commits and every member's
# final digest equal tests/tools/ref_quadratic with g3 away from round 1 until it rejoined.
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
kill -CONT $G3
say "g3 evicted during round $A (closed rounds: $(round)); g3 continued"

wait_workers w1 w2
wait_until 10 '[ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS" ]' "every shard at version $ROUNDS"
kill -TERM $G3
[ "$(round)" -eq $ROUNDS ] || fail "the run closed $(round) rounds, expected $ROUNDS"
$RCLI HGET "dl:{$RUN}:f0:r$A" participants | grep -q g3 && fail "round $A closed with g3"
grep -q "did not complete for the group" "$TMP/group-g3.log" || fail "g3 did not recover"

rejoin_check g3 $A
for r in 0 1; do
  grep "^sync rank $r " "$TMP/g3.out" | awk '{print $5, $13}' > "$TMP/g3-$r.txt"
  stale=$(awk '$2 == 1' "$TMP/g3-$r.txt" | wc -l)
  [ "$stale" -eq 1 ] || fail "g3 rank $r lost $stale rounds (want 1, round $A): $(cat "$TMP/g3-$r.txt")"
  next=$(awk 'seen {print $1; exit} $2 == 1 {seen = 1}' "$TMP/g3-$r.txt")
  [ "$next" = $((REJOIN_ROUND + 1)) ] ||
    fail "g3 rank $r's first sync after it recovered is at version $next, not $((REJOIN_ROUND + 1)) (the round it joined)"
done
say "each rank lost round $A only; registered again as incarnation $REJOIN_INC, the group waited for round $((REJOIN_ROUND - 1)) to close and synced round $REJOIN_ROUND"
no_half_group $RUN g3 2 > "$TMP/half.txt" || fail "a half group in a round: $(cat "$TMP/half.txt")"

REF_SHARDS=2 REF_ARGS="--away g3=$A-$((REJOIN_ROUND - 1))" REF_WORKERS=w1,w2,g3 assert_matches_reference
REF_WORKERS=w1,w2 assert_workers_end_at "$REF_DIGEST"
for r in 0 1; do
  got=$(grep "^sync rank $r version $ROUNDS " "$TMP/g3.out" | awk '{print $7}')
  [ "$got" = "$REF_DIGEST" ] || fail "g3 rank $r at version $ROUNDS has digest $got, reference $REF_DIGEST"
done
say "digests equal the reference with g3 away from rounds $A..$((REJOIN_ROUND - 1))"
