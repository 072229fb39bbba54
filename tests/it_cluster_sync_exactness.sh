#!/bin/sh
# it_cluster_sync_exactness.sh: it_sync_exactness on a 3-master Redis Cluster. The processes are given
# one node's URL and route by hash slot themselves (MOVED/ASK): the control keys of the run (tag {R})
# live on one master, the shard blobs (tags {R:k}) on several, and the Redis Functions are loaded on
# every master. 3 workers, 2 shard-servers, 8 shards, 5 sync rounds of the quadratic trainer: the
# final parameters are bit-identical to the in-process reference (the same digests the non-cluster
# test gets), every shard committed exactly once per round.
# Meanwhile the slot of shard 0 migrates to another master: from the start of training the source
# answers ASK for the keys it no longer (or not yet) has, and after round 2 the slot moves for good
# (MOVED). After the run the keys of shard 1 move while the source still owns the slot: `coordinator checkpoint save`
# (the synchronous client) reads every shard through ASK redirections.
. "$(dirname "$0")/lib.sh"
RUN=exact; NUMEL=200000; SEED=7; ROUNDS=5; H=20
start_redis_cluster
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED
for p in $CLUSTER_PORTS; do
  redis-cli -p "$p" FUNCTION LIST LIBRARYNAME diloco | grep -q dl_register || fail "library not loaded on node $p"
done
[ "$(cluster_nodes_with "dl:{$RUN}:*")" -eq 1 ] || fail "the control keys are not on exactly one master"
[ "$(cluster_nodes_with "dl:{$RUN:*}:snap:*")" -ge 2 ] || fail "the shard snapshots are not spread over masters"
# Every process connects to a node that does not hold the run's control keys (it must follow MOVED).
for p in $CLUSTER_PORTS; do
  [ -z "$(redis-cli -p "$p" --scan --pattern "dl:{$RUN}:config")" ] && URL="redis://127.0.0.1:$p" && break
done
say "control keys on one master, snapshots on $(cluster_nodes_with "dl:{$RUN:*}:snap:*"); processes use $URL"
start_server s1 --lease-ttl-ms 2000
start_server s2 --lease-ttl-ms 2000
cluster_migrate_start "{$RUN:0}"
slot0=$MIG_SLOT; src0=$MIG_SRC; dst0=$MIG_DST
for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --step-delay-ms 5; done
wait_until 60 '[ "$($RCLI HGET "dl:{$RUN}:shards" 0:version)" -ge 2 ]' "shard 0 at version 2"
cluster_migrate_finish
say "slot $slot0 of shard 0 moved from $src0 to $dst0 (ASK, then MOVED) at version $($RCLI HGET "dl:{$RUN}:shards" 0:version)"
wait_workers w1 w2 w3
[ "$(shard_versions $RUN)" = "5 5 5 5 5 5 5 5" ] || fail "shard versions: $(shard_versions $RUN)"
assert_matches_reference
want=$REF_DIGEST
assert_workers_end_at "$want"
[ -n "$(redis-cli -p "$dst0" --scan --pattern "dl:{$RUN:0}:*")" ] && [ -z "$(redis-cli -p "$src0" --scan --pattern "dl:{$RUN:0}:*")" ] \
  || fail "shard 0's blobs did not end on node $dst0 only"
cluster_migrate_start "{$RUN:1}"
cluster_migrate_keys
bin/coordinator checkpoint save --redis "$URL" --run $RUN --out "$TMP/ck.bin" > "$TMP/save.log" 2>&1 \
  || fail "checkpoint save while shard 1's slot migrates: $(cat "$TMP/save.log")"
bin/coordinator checkpoint show "$TMP/ck.bin" > "$TMP/show.txt" 2>&1 || fail "checkpoint show: $(cat "$TMP/show.txt")"
grep '^shard [0-9]' "$TMP/show.txt" | diff - "$TMP/got.txt" > "$TMP/diff.txt" || fail "checkpoint digests: $(cat "$TMP/diff.txt")"
cluster_migrate_finish
logs=$(cluster_nodes_with "dl:{$RUN:*}:log:*")
[ "$logs" -ge 2 ] || fail "the shard-servers' log entries are on $logs master(s), expected at least 2"
say "bit-identical to the reference after $ROUNDS rounds: $want (log entries on $logs masters)"
