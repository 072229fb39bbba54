#!/bin/sh
# it_tentative_crossing.sh: the crossing of docs/PROTOCOL.md "Tentative parameters", made exact. Two
# workers, two shards, two shard-servers holding one shard each. In round 0, s0 serves version 1 of its
# shard tentatively to w1 alone and s1 serves version 1 of its shard to w2 alone (the other worker's get
# waits for a commit), and both die before dl_commit (--fault-tentative-to, shard-server/fault.c).
# Restarted, each new owner needs both pseudo-gradients again, but each worker already holds one shard and
# asks its owner nothing: w1 waits for s1's shard, whose owner waits for w2's Δ; w2 waits for s0's, whose
# owner waits for w1's. Before b0f5f80 both waited until the sync timeout ("waiting for the
# pseudo-gradients of" each other; it_codec_crash once in CI). Now a get that keeps waiting reads the
# commits and leases of the shards it holds tentatively and sends its kept Δ to their new owners.
# Checks: both servers died as arranged; a worker logged that resend for the shard it held; the run
# finishes well within the sync timeout with no failed or lost sync; shard digests, commits (each round
# once per shard) and the workers' final digests equal the fault-free reference (tests/tools/ref_quadratic).
. "$(dirname "$0")/lib.sh"
RUN=cross; NUMEL=20000; SEED=17; ROUNDS=3; H=10
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 2 --workers 2 --seed $SEED
owner() { $RCLI HGET "dl:{$RUN}:shards" "$1:owner"; }
start_server s0 --lease-ttl-ms 2000 --fault-tentative-to w1
wait_until 10 '[ "$(owner 0)" = s0 ] && [ "$(owner 1)" = s0 ]' "s0 to hold both shards"
start_server s1 --lease-ttl-ms 2000 --fault-tentative-to w2
# (which shard each holds does not matter: the fault names a worker, not a shard)
wait_until 10 '[ "$(owner 0)$(owner 1)" = s0s1 ] || [ "$(owner 0)$(owner 1)" = s1s0 ]' "s0 to give a shard to s1"
[ "$(owner 0)" = s0 ] && k_s0=0 k_s1=1 || k_s0=1 k_s1=0 # the shard each holds
# a sync timeout far beyond the bound below: without the resend, the crossing lasts this long
for w in w1 w2; do
  start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --sync-timeout 60
done
first0=$SRV_s0; first1=$SRV_s1
wait_until 15 '! alive $first0 && ! alive $first1' "both fault-injected servers to die"
t0=$(date +%s)
for s in s0:w1 s1:w2; do
  eval "k=\$k_${s%:*}"
  grep -q "fault injection: exiting before dl_commit (version 1 of shard $k went to ${s#*:} alone" \
    "$TMP/server-${s%:*}.log" || fail "${s%:*} did not die as arranged: $(tail -n 3 "$TMP/server-${s%:*}.log")"
  mv "$TMP/server-${s%:*}.log" "$TMP/server-${s%:*}-faulty.log"
done
# the same ids: each takes its lease back at once, under a new epoch
start_server s0 --lease-ttl-ms 2000
start_server s1 --lease-ttl-ms 2000
wait_until 15 '! workers_running w1 w2' \
  "the workers to finish (each waits for the other's pseudo-gradient: the crossing is not resolved)"
wait_workers w1 w2
say "the crossing resolved; the workers finished $(( $(date +%s) - t0 )) s after the servers died"
# whichever get resends first resolves the crossing (the other worker then gets its shard, and confirms
# the shard it holds at its next round); both may resend
resent=$(grep -h "shard [01]: the server that served version 1 before committing it is gone.*goes to the new owner" \
  "$TMP/worker-w1.log" "$TMP/worker-w2.log")
[ -n "$resent" ] || fail "no worker resent its Δ of the shard it held to the new owner"
echo "$resent"
for w in w1 w2; do
  bad="sync failed|round [0-9]+ of fragment [0-9]+ lost|continuing from the committed"
  ! grep -Eq "$bad" "$TMP/worker-$w.log" || fail "worker $w lost or failed a sync: $(grep -E "$bad" "$TMP/worker-$w.log" | head -n 3)"
  n=$(grep '"event":"sync"' "$TMP/$w.jsonl" | grep -c '"stale":false')
  [ "$n" -eq $ROUNDS ] || fail "worker $w: $n complete syncs, expected $ROUNDS"
done
[ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS" ] || fail "versions: $(shard_versions $RUN)"
REF_SHARDS=2 REF_WORKERS=w1,w2
assert_matches_reference
assert_workers_end_at "$REF_DIGEST"
say "bit-identical to the fault-free reference after $ROUNDS rounds: $REF_DIGEST"
