#!/bin/sh
# it_sync_dropped_confirm.sh: a worker whose confirm finds that its previous round was committed without it
# (it was dropped) registers again at once instead of training one more round as a dead incarnation.
# Three workers, one shard; w3 trains faster than w1 and w2 (1.5 s a round against 2.5 s), so that after
# SIGCONT its confirm comes well before round 1 closes. Round 0 closes with all three; the shard-server serves version 1 to w3 alone,
# tentatively, and dies before committing it (--fault-tentative-to w3). w3 trains round 1 from it and is
# SIGSTOPped meanwhile; the restarted server needs every participant's Δ again, w3 is evicted for its
# silence and dropped from round 0 (dl_drop), and version 1 is committed with w1 and w2 only. After SIGCONT,
# w3 ends round 1's training and its confirm (worker/diloco/sync.c, sync_confirm_durable) finds version 1
# committed with other parameters. Before the fix it reset to the global parameters and trained H more
# steps as the evicted incarnation, registering again only at the next sync, where its push was refused.
# Now it registers again right there and waits as a joiner for the open round to close.
# Checks: the corner happened as arranged (the server died as arranged, w3 was evicted and dropped from
# round 0, version 1 committed without it); w3 trained 0 inner steps between the sync whose confirm lost the
# round and the first round it took part in again; shard digests, commits and final digests equal
# tests/tools/ref_quadratic with w3 away from round 0 until it rejoined, having trained round 1 from the
# tentative version (--away-tentative).
. "$(dirname "$0")/lib.sh"
RUN=dropconf; NUMEL=4000; SEED=7; ROUNDS=4; H=10
start_redis
# min-workers 2: once w1 and w2 have left, w3 alone closes no round (the run stops at ROUNDS)
init_run $RUN --trainer quadratic --numel $NUMEL --shards 1 --workers 3 --min-workers 2 --seed $SEED \
  --heartbeat-timeout 0.8
start_server s0 --lease-ttl-ms 2000 --fault-tentative-to w3
for w in w1 w2; do
  start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 0.2 --step-delay-ms 250
done
start_worker w3 --sync-every $H --steps 0 --heartbeat-interval 0.2 --step-delay-ms 150
faulty=$SRV_s0
wait_until 15 '! alive $faulty' "the fault-injected server to die"
kill -STOP "$WRK_w3"
grep -q "fault injection: exiting before dl_commit (version 1 of shard 0 went to w3 alone" "$TMP/server-s0.log" ||
  fail "s0 did not die as arranged: $(tail -n 3 "$TMP/server-s0.log")"
grep -q '"round":1,' "$TMP/w3.jsonl" && fail "w3 synced round 1 before it was stopped (the machine is too slow)"
mv "$TMP/server-s0.log" "$TMP/server-s0-faulty.log"
say "s0 served version 1 to w3 tentatively and died; w3 stopped while training round 1"
start_server s0 --lease-ttl-ms 2000
wait_until 8 '[ "$($RCLI HGET "dl:{$RUN}:shards" 0:version)" -ge 1 ]' "version 1 to be committed without w3"
kill -CONT "$WRK_w3"
[ "$($RCLI HEXISTS "dl:{$RUN}:workers" w3)" = 0 ] || fail "version 1 was committed while w3 was still a member"
$RCLI HGET "dl:{$RUN}:f0:r0" dropped | grep -q w3 || fail "w3 was not dropped from round 0"
[ "$($RCLI HGET "dl:{$RUN}:shards" 0:version)" -eq 1 ] ||
  fail "round 1 closed before w3 continued (the machine is too slow for this arrangement)"
say "w3 evicted and dropped from round 0; version 1 committed without it; w3 continued"

wait_workers w1 w2
wait_until 10 '[ "$(shard_versions $RUN)" = "$ROUNDS" ]' "the shard at version $ROUNDS"
kill -TERM "$WRK_w3"
wait "$WRK_w3" || fail "w3 exited with status $? after SIGTERM"
[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -eq $ROUNDS ] || fail "the run closed $($RCLI HGET "dl:{$RUN}:state" round:0) rounds"

# w3's incarnations and the round each joined (its join events)
$RCLI XRANGE "dl:{$RUN}:events" - + > "$TMP/events.txt"
awk '/^join$/ {j = 1; next} j && /^worker$/ {getline; w = $0; next} j && /^inc$/ {getline; inc = $0; next}
  j && /^joined$/ {getline; if (w == "w3") print inc, $0; j = 0}' "$TMP/events.txt" > "$TMP/joins.txt"
[ "$(wc -l < "$TMP/joins.txt")" -eq 2 ] || fail "w3 joined $(wc -l < "$TMP/joins.txt") time(s), expected twice: $(cat "$TMP/joins.txt")"
set -- $(tail -n 1 "$TMP/joins.txt"); inc=$1; J=$2
[ "$J" -ge 2 ] && [ "$J" -lt $ROUNDS ] || fail "w3 joined round $J again: expected 2..$((ROUNDS - 1))"
for r in $(seq 0 $((J - 1))); do
  $RCLI HGET "dl:{$RUN}:f0:r$r" participants | grep -q "w3:$inc" && fail "round $r closed with w3's new incarnation"
done
for r in $(seq "$J" $((ROUNDS - 1))); do
  $RCLI HGET "dl:{$RUN}:f0:r$r" participants | grep -q "w3:$inc" || fail "round $r closed without w3:$inc"
done
# inner steps w3 trained as a dead incarnation: between the sync whose confirm lost round 0 (its first stale
# one) and the start of round J (H steps before its sync of round J)
sr=$(grep '"event":"sync"' "$TMP/w3.jsonl" | grep '"stale":true' | head -n 1 | sed 's/.*"step":\([0-9]*\).*/\1/')
sj=$(grep '"event":"sync"' "$TMP/w3.jsonl" | grep "\"round\":$J," | head -n 1 | sed 's/.*"step":\([0-9]*\).*/\1/')
[ -n "$sr" ] && [ -n "$sj" ] || fail "w3 logged no lost sync or none of round $J: $(grep '"event":"sync"' "$TMP/w3.jsonl")"
dead=$((sj - H - sr))
say "w3: its confirm lost round 0 at step $sr, registered again as incarnation $inc joining round $J; $dead inner steps trained in between"
[ "$dead" -eq 0 ] || fail "w3 trained $dead inner steps as its evicted incarnation before registering again"
grep -q "committed with other parameters" "$TMP/worker-w3.log" || fail "w3's confirm did not find round 0 committed without it"

REF_SHARDS=1 REF_ARGS="--away w3=0-$((J - 1)) --away-tentative"
assert_matches_reference
REF_WORKERS=w1,w2 assert_workers_end_at "$REF_DIGEST"
got=$(grep '"event":"sync"' "$TMP/w3.jsonl" | grep "\"round\":$((ROUNDS - 1))," | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/')
[ "$got" = "$REF_DIGEST" ] || fail "w3's sync of round $((ROUNDS - 1)) has digest $got, reference $REF_DIGEST"
say "digests equal the reference with w3 away from rounds 0..$((J - 1)) (round 1 trained from the tentative version)"
