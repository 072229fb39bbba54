#!/bin/sh
# it_cluster_sync_crash.sh: it_sync_crash on a 3-master Redis Cluster (see it_cluster_sync_exactness).
# While the workers train, the harness kill -9s a random shard-server every 1 to 1.5 s and starts a
# new one (each new server discovers the cluster from its first MOVED reply), and every server also
# kills itself in 10% of its commits right after its log entry was written, before dl_commit. The
# shards' snapshots and log entries are spread over the masters. The final parameters must be
# bit-identical to the fault-free reference (the same digests as it_sync_crash).
# test: light (it waits more than it computes: 7 s of CPU in 26 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=crash; NUMEL=200000; SEED=11; ROUNDS=12; H=20
start_redis_cluster
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED --snapshot-every 3
# The processes are given a node that does not hold the run's control keys.
for p in $CLUSTER_PORTS; do
  [ -z "$(redis-cli -p "$p" --scan --pattern "dl:{$RUN}:config")" ] && URL="redis://127.0.0.1:$p" && break
done
for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --step-delay-ms 25; done

crash_storm w1 w2 w3
[ "$KILLS" -ge 5 ] || fail "only $KILLS kills happened: the test proved too little"
[ "$FAULTS" -ge 1 ] || fail "no server died between receiving pseudo-gradients and committing"
v="$ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS"
[ "$(shard_versions $RUN)" = "$v" ] || fail "versions: $(shard_versions $RUN)"
assert_matches_reference
[ "$(cluster_nodes_with "dl:{$RUN}:*")" -eq 1 ] || fail "the control keys are not on exactly one master"
snaps=$(cluster_nodes_with "dl:{$RUN:*}:snap:*")
[ "$snaps" -ge 2 ] || fail "the shard snapshots are on $snaps master(s), expected at least 2"
say "bit-identical to the fault-free reference after $ROUNDS rounds (snapshots on $snaps masters)"
