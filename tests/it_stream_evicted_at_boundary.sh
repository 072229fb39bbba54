#!/bin/sh
# it_stream_evicted_at_boundary.sh: a sync Streaming worker that registers again at a boundary's settling does
# not average a zero pseudo-gradient into the next fragment's round. Three workers, 2 fragments of one shard,
# H = 20 (a fragment every 10 steps); w1 and w2 slow (250 ms a step), w3 fast (10 ms), so w3 waits at its
# second boundary for fragment 0's round 0. It is SIGSTOPped there, evicted (round 0 of fragment 0 closes
# without it), and continued: its round finds it evicted, and the training thread, at that boundary,
# registers again and fetches every fragment. The boundary then sends the next fragment, whose Δ is zero
# (the parameters were just fetched) for a round that does not expect the new incarnation (dl_register joined
# it to the next one): that round must be taken without it (worker/diloco/round.c, sync_round), not closed
# with a zero among its participants, which shrank the fragment's outer step to 2/3.
# Checks: the registration came at a boundary (its join's steps a multiple of 10); the round w3 settled an
# interval later lists only w1 and w2, and its shard's version is bit-identical to tests/tools/ref_quadratic
# of w1 and w2 alone (main's worker: 3 participants, another digest); every round closes; w3's new
# incarnation takes part in later rounds of both fragments.
# test: light (it waits more than it computes: 2 s of CPU in 13 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=boundaryevict; NUMEL=4000; SEED=3; H=20; I=10; STEPS=40
start_redis
stream_evict_run $RUN
for w in w1 w2; do
  start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 0.2 --step-delay-ms 250
done
start_worker w3 --sync-every $H --steps 0 --heartbeat-interval 0.2 --step-delay-ms 10
wait_until 15 '[ "$($RCLI HEXISTS "dl:{$RUN}:f0:r0" a:w3)" = 1 ]' "w3 to arrive at fragment 0's round 0"
sleep 0.3 # w3 trains its next 10 steps and waits for that round at its second boundary
kill -STOP "$WRK_w3"
[ "$(round 0)" = 0 ] || fail "fragment 0's round 0 closed before w3 was stopped (the machine is too slow for this arrangement)"
wait_until 5 '[ "$($RCLI HEXISTS "dl:{$RUN}:workers" w3)" = 0 ]' "w3 to be evicted"
kill -CONT "$WRK_w3"
say "w3 stopped at its boundary and evicted (closed rounds: fragment 0 $(round 0), fragment 1 $(round 1)); continued"
wait_workers w1 w2
wait_until 10 '[ "$(shard_versions $RUN)" = "2 2" ]' "both fragments at version 2 (now $(shard_versions $RUN))"
kill -TERM "$WRK_w3"
wait "$WRK_w3" || fail "w3 exited with status $? after SIGTERM"

# w3's second join: its incarnation and the steps it had trained
$RCLI XRANGE "dl:{$RUN}:events" - + | awk '/^join$/ {j = 1; next} j && /^worker$/ {getline; w = $0; next}
  j && /^inc$/ {getline; inc = $0; next} j && /^steps$/ {getline; if (w == "w3") print inc, $0; j = 0}' > "$TMP/joins.txt"
[ "$(wc -l < "$TMP/joins.txt")" -eq 2 ] || fail "w3 joined $(wc -l < "$TMP/joins.txt") time(s), expected twice: $(cat "$TMP/joins.txt")"
first=$(head -n 1 "$TMP/joins.txt" | cut -d' ' -f1)
$RCLI HGET "dl:{$RUN}:f0:r0" participants | grep -q "w3:$first" &&
  fail "fragment 0's round 0 closed with w3's first incarnation (the arrangement failed: evicted too late)"
set -- $(tail -n 1 "$TMP/joins.txt"); inc=$1; at=$2
[ "$at" -gt 0 ] && [ $((at % I)) -eq 0 ] ||
  fail "w3 registered again after $at steps, not at a boundary (the heartbeat found it mid-interval: another path)"

# the round w3 sent at that boundary, settled an interval later
rec=$(grep '"event":"sync"' "$TMP/w3.jsonl" | grep "\"step\":$((at + I))," | grep '"stale":false' | head -n 1)
[ -n "$rec" ] || fail "w3 has no sync record at step $((at + I)): $(grep '"event":"sync"' "$TMP/w3.jsonl")"
f=$(echo "$rec" | sed 's/.*"fragment":\([0-9]*\).*/\1/'); r=$(echo "$rec" | sed 's/.*"round":\([0-9]*\).*/\1/')
[ "$r" = 0 ] || fail "w3 sent round $r of fragment $f at its registration, not round 0 (the arrangement failed): $rec"
parts=$($RCLI HGET "dl:{$RUN}:f$f:r$r" participants)
say "w3 registered again as incarnation $inc at step $at; round $r of fragment $f, sent there, closed with $parts"
echo "$parts" | grep -q "w3:$inc" &&
  fail "round $r of fragment $f counts w3:$inc, whose pseudo-gradient was zero (it registered at that boundary): $parts"
build/tests/tools/ref_quadratic --numel $NUMEL --shards 2 --seed $SEED --workers w1,w2 --sync-every $H --steps $H \
  --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" --frag-bounds "$($RCLI HGET "dl:{$RUN}:config" frag_bounds)" \
  > "$TMP/ref.txt" 2>&1 || fail "reference: $(cat "$TMP/ref.txt")"
want=$(awk -v k="$f" '$1 == "shard" && $2 == k {print $3}' "$TMP/ref.txt")
got=$($RCLI HGET "dl:{$RUN}:shards" "$f:digests" | tr , '\n' | awk -F: '$1 == 1 {print $2}')
[ -n "$want" ] && [ "$got" = "$want" ] ||
  fail "shard $f at version 1 has digest $got, the reference of w1 and w2 alone $want"
say "shard $f at version 1 is bit-identical to the reference of w1 and w2 alone ($got)"
assert_back_in_both $RUN w3
