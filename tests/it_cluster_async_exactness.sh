#!/bin/sh
# it_cluster_async_exactness.sh: async Streaming DiLoCo on a 3-master Redis Cluster. The processes are given a
# node that does not hold the run's control keys (they follow MOVED); 3 workers of different speeds, 2 fragments
# of 3 shards, the lookahead and token weighting on. Meanwhile shard 0's slot migrates to another master (ASK,
# then MOVED) and a shard-server is killed -9 (a new one takes its shards). The shards end bit-identical to
# tests/tools/ref_async's replay of the order dl_submit placed (and not to the replay without the lookahead):
# dl_submit, the async owners' reads of each place and the commits route to the right master throughout.
# (it_cluster_sync_exactness is the sync run on a cluster; it_async_stream_exactness this run on one Redis.)
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
RUN=acluster; H=10
start_redis_cluster
init_run $RUN --async --trainer quadratic --numel 40000 --shards 6 --workers 3 --fragments 2 --async-lookahead 0.5 \
  --weight-by tokens --weight-ref-tokens 10
for p in $CLUSTER_PORTS; do
  [ -z "$(redis-cli -p "$p" --scan --pattern "dl:{$RUN}:config")" ] && URL="redis://127.0.0.1:$p" && break
done
start_server s1 --lease-ttl-ms 2000
start_server s2 --lease-ttl-ms 2000
for i in 1 2 3; do start_worker w$i --sync-every $H --steps 150 --heartbeat-interval 1 --step-delay-ms $((5 * i)); done
cluster_migrate_start "{$RUN:0}"
wait_until 60 '[ "$($RCLI HGET "dl:{$RUN}:shards" 0:version)" -ge 4 ]' "shard 0 at version 4"
cluster_migrate_finish
say "slot $MIG_SLOT of shard 0 moved from $MIG_SRC to $MIG_DST at version $($RCLI HGET "dl:{$RUN}:shards" 0:version)"
kill -9 "$SRV_s1"
start_server s3 --lease-ttl-ms 2000
say "s1 killed at version $($RCLI HGET "dl:{$RUN}:shards" 0:version); s3 started"
wait_workers w1 w2 w3
[ -n "$(redis-cli -p "$MIG_DST" --scan --pattern "dl:{$RUN:0}:*")" ] || fail "shard 0's blobs are not on node $MIG_DST"
ref_async_check $RUN $H "(on a cluster, a slot migrated, a server killed)" --async-lookahead 0
