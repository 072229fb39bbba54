#!/bin/sh
# it_cluster_down_message.sh: a Redis Cluster whose master and its replica are both down (cluster_state
# fail: every node answers CLUSTERDOWN) is explained, not just quoted: `coordinator status`, a worker and
# a shard-server say that the Redis Cluster is down, which node is unreachable (with its slots) and what
# to do (issue 25: status printed only the CLUSTERDOWN error). A worker that was training when the cluster
# went down says it in its "still trying" line (it named only the shard-server's "moved" before).
# test: light (it waits more than it computes: 4 s of CPU in 13 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=cd
start_redis_cluster 1
init_run $RUN --trainer quadratic --numel 1000 --shards 2 --workers 1
# a master other than the URL's node, and its replica
set -- $CLUSTER_PORTS; shift
for p; do redis-cli -p "$p" role | head -n 1 | grep -q master && { M=$p; break; }; done
[ -n "${M:-}" ] || fail "no second master"
id=$(redis-cli -p "$M" cluster myid)
R=""
for p in $CLUSTER_PORTS; do redis-cli -p "$p" cluster nodes | grep myself | grep -q " $id " && R=$p; done
[ -n "$R" ] || fail "no replica of $M"
# a worker that trains while the cluster goes down: its sync waits on a shard-server that lost its lease,
# and its "still trying" line must name the cause (the cluster), not only the shard-server's "moved"
start_server s0 --connect-timeout 3
start_worker w1 --sync-every 5 --steps 100000 --step-delay-ms 20 --sync-timeout 60 --connect-timeout 60
wait_until 30 "[ \"\$(redis-cli -p $PORT -c hget 'dl:{$RUN}:shards' 0:version)\" -ge 1 ] 2>/dev/null" "a first round"
kill -9 "$(cat "$TMP/node-$M/redis.pid")" "$(cat "$TMP/node-$R/redis.pid")"
wait_until 30 "redis-cli -p $PORT cluster info | grep -q '^cluster_state:fail'" "cluster_state:fail"
say "killed master $M and its replica $R: the cluster is down"
want="the Redis Cluster is down (CLUSTERDOWN.*node 127.0.0.1:$M (master of slots [0-9].*) is unreachable.*start .* again, or fail .* slots over to a replica, then check with redis-cli --cluster check 127.0.0.1:$PORT"
wait_until 40 "grep -q 'still trying after.*the owners cannot be read from Redis: .*the Redis Cluster is down' $TMP/worker-w1.log" \
  "the training worker to name the cluster in its still-trying line (see $TMP/worker-w1.log)"
grep 'still trying after' "$TMP/worker-w1.log" | grep 'the Redis Cluster is down' | tail -n 1 | grep -q "$want" ||
  fail "the worker's still-trying line: $(grep 'still trying' "$TMP/worker-w1.log" | tail -n 1)"
say "training worker: $(grep 'still trying' "$TMP/worker-w1.log" | tail -n 1 | cut -c1-200)..."
kill "$WRK_w1" "$SRV_s0" 2> /dev/null
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status.txt" 2>&1 && fail "status succeeded"
grep -q "$want" "$TMP/status.txt" || fail "status says: $(cat "$TMP/status.txt")"
say "status: $(cat "$TMP/status.txt")"
timeout 20 bin/worker --redis "$URL" --run $RUN --steps 1 --connect-timeout 3 > "$TMP/worker.txt" 2>&1
grep -q "$want" "$TMP/worker.txt" || fail "the worker says: $(tail -n 3 "$TMP/worker.txt")"
start_server s1 --connect-timeout 3
wait_until 20 "grep -q 'the Redis Cluster is down' $TMP/server-s1.log" "the shard-server to say it"
grep -q "$want" "$TMP/server-s1.log" || fail "the shard-server says: $(tail -n 3 "$TMP/server-s1.log")"
say "OK"
