#!/bin/sh
# it_sync_dropped_rejoin.sh: a worker dropped from a round registers again at once instead of training one
# more round as a dead incarnation. Three workers; w1 and w2 train slowly (2.5 s a round), w3 fast, so w3
# waits at every barrier. In round 1, once w3 has arrived, it is SIGSTOPped past the heartbeat timeout: the
# reaper evicts it, its arrival leaves the open barrier, and round 1 closes with w1 and w2. Then SIGCONT.
# w3 wakes in its barrier wait and finds round 1 closed without it. Before the fix it took the round's
# parameters, trained H more steps as the evicted incarnation, and registered again only at its next sync,
# where its push was refused: H steps lost. Now it registers again right there, waits as a joiner for the
# open round to close and trains from the round it joined.
# Checks: the corner happened as arranged (w3 arrived, was evicted while round 1 was open, round 1 closed
# without it); w3 trained 0 inner steps between the sync that lost round 1 and the first round it took part
# in again (from its sync log); that round is the one its new incarnation joined; shard digests, commits and
# the final digests equal tests/tools/ref_quadratic with w3 away from round 1 until it rejoined (--away).
# test: light (it waits more than it computes: 3 s of CPU in 12 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=dropped; NUMEL=4000; SEED=5; ROUNDS=4; H=10; A=1
rejoin_run 250
round() { $RCLI HGET "dl:{$RUN}:state" round:0; }
arrived() { $RCLI HEXISTS "dl:{$RUN}:f0:r$1" "a:$2"; }
start_worker w3 --sync-every $H --steps 0 --heartbeat-interval 0.2

wait_until 15 '[ "$(round)" -ge $A ]' "round 0 to close"
wait_until 3 '[ "$(arrived $A w3)" = 1 ]' "w3 to arrive at round $A"
kill -STOP "$WRK_w3"
[ "$(round)" -eq $A ] && [ "$(arrived $A w1)$(arrived $A w2)" = 00 ] ||
  fail "w1 or w2 arrived at round $A before w3 was stopped (the machine is too slow for this arrangement)"
say "w3 arrived at round $A and was stopped"
wait_until 5 '[ "$($RCLI HEXISTS "dl:{$RUN}:workers" w3)" = 0 ]' "w3 to be evicted"
[ "$(round)" -eq $A ] || fail "round $A closed before w3 was evicted (the machine is too slow for this arrangement)"
wait_until 6 '[ "$(round)" -gt $A ]' "round $A to close without w3"
$RCLI HGET "dl:{$RUN}:f0:r$A" participants | grep -q w3 && fail "round $A closed with w3"
kill -CONT "$WRK_w3"
say "w3 evicted; round $A closed with $($RCLI HGET "dl:{$RUN}:f0:r$A" participants); w3 continued"

wait_workers w1 w2
wait_until 10 '[ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS" ]' "every shard at version $ROUNDS"
kill -TERM "$WRK_w3"
wait "$WRK_w3" || fail "w3 exited with status $? after SIGTERM"
[ "$(round)" -eq $ROUNDS ] || fail "the run closed $(round) rounds, expected $ROUNDS"

rejoin_check w3 $A
rejoin_dead_steps w3 "$(sync_field w3 "\"round\":$A," step)"
grep -q "closed without us" "$TMP/worker-w3.log" || fail "w3 did not log that round $A closed without it"
REF_SHARDS=2 assert_rejoin_reference w3 "--away w3=$A-$((REJOIN_ROUND - 1))"
say "digests equal the reference with w3 away from rounds $A..$((REJOIN_ROUND - 1))"
