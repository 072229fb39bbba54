#!/bin/sh
# it_corrupt_get_need.sh: a shard found corrupt in a get does not keep the worker's Δ from the owner's other
# shards (worker/diloco/fanout.c owner_run, sync.c get_round). Two workers, two shards, one shard-server
# that serves round 0's result tentatively to w1 alone and dies before committing it (--fault-tentative-to
# w1): w2 is left in its get of round 0. Shard 0's durable state (its version-0 snapshot) is then corrupted
# and a new server takes both shards over: shard 0 is corrupt; shard 1 loads, and its round 0 needs both
# workers' Δs again. w2's next pass meets both in one answer from the one owner: it must still send its Δ of
# shard 1 (the `need`), or shard 1's round waits for it while w2 waits for the repair, and w1's confirm of
# the round (which sends w1's Δ) waits for shard 1 for its whole CORRUPT_OTHERS_MS before it too reports the
# corrupt shard. Checks: shard 1 commits round 0 before any repair, both workers say shard 0 is corrupt
# and wait; then `coordinator repair --from-checkpoint` (a snapshot has no older version to roll back to)
# restores the run's start, and both workers train on from it.
. "$(dirname "$0")/lib.sh"
RUN=cgn; H=10
start_redis
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 2 --snapshot-every 100 --heartbeat-timeout 60
SH="dl:{$RUN}:shards"
CK="$TMP/ck.safetensors"
bin/coordinator checkpoint save --redis "$URL" --run $RUN --out "$CK" > "$TMP/save.log" 2>&1 ||
  fail "checkpoint save: $(cat "$TMP/save.log")"
start_server s0 --lease-ttl-ms 1000 --fault-tentative-to w1
wait_until 10 '[ "$($RCLI HGET $SH 0:owner)$($RCLI HGET $SH 1:owner)" = s0s0 ]' "s0 to hold both shards"
for w in w1 w2; do # (a sync timeout far beyond the waits below: a wait for a Δ never sent lasts this long)
  start_worker $w --sync-every $H --steps $((3 * H)) --heartbeat-interval 1 --sync-timeout 60
done
wait_until 15 '! alive $SRV_s0' "s0 to die as arranged"
grep -q "fault injection: exiting before dl_commit (version 1 of shard [01] went to w1 alone" "$TMP/server-s0.log" ||
  fail "s0 did not die as arranged: $(tail -n 3 "$TMP/server-s0.log")"
[ "$($RCLI HGET $SH 1:version)" = 0 ] || fail "shard 1 is at version $($RCLI HGET $SH 1:version), not 0"
r=$($RCLI HGET "$SH" 0:snap); r=${r##*,} # (VERSION.EPOCH, as tests/it_corrupt_repair.sh reads it)
BAD="dl:{$RUN:0}:snap:${r%.*}:${r#*.}"
[ "$($RCLI EXISTS "$BAD")" = 1 ] || fail "no snapshot blob $BAD (shard 0: $($RCLI HGETALL "$SH" | paste - - | grep '^0:'))"
$RCLI SETRANGE "$BAD" 400 XXXXXXXX > /dev/null
say "corrupted $BAD"
t0=$(date +%s)
start_server s1 --lease-ttl-ms 1000
wait_until 20 '[ "$($RCLI HGET $SH 0:corrupt)" = "$BAD" ]' "shard 0 marked corrupt"
wait_until 8 '[ "$($RCLI HGET $SH 1:version)" -ge 1 ]' \
  "shard 1 to commit round 0 (its new owner needs w2's Δ, which w2's get sends only if its pass goes past corrupt shard 0)"
say "shard 1 committed round 0 $(($(date +%s) - t0)) s after the new owner started, shard 0 corrupt"
for w in w1 w2; do
  wait_until 8 "grep -q \"shard 0's durable state is corrupt (key $BAD: .*); see coordinator repair\" $TMP/worker-$w.log" \
    "$w to say shard 0 is corrupt"
done
alive "$WRK_w1" && alive "$WRK_w2" || fail "a worker gave up"
bin/coordinator repair --redis "$URL" --run $RUN --from-checkpoint "$CK" > "$TMP/repair.txt" 2>&1 ||
  fail "repair --from-checkpoint: $(cat "$TMP/repair.txt")"
V=$($RCLI HGET "$SH" 0:version)
wait_workers w1 w2
# (each goes on from the repaired version with the steps it had left: they need not end on one version)
for w in w1 w2; do
  v=$(grep '"event":"sync"' "$TMP/$w.jsonl" | tail -n 1 | sed 's/.*"version":\([0-9]*\),.*/\1/')
  [ "${v:-0}" -gt "$V" ] || fail "$w did not sync after the repair to version $V (its last sync: ${v:-none})"
done
say "repaired from the checkpoint (version $V); both workers synced after it and ended their steps"
