#!/bin/sh
# it_cluster_down_message.sh: a Redis Cluster whose master and its replica are both down (cluster_state
# fail: every node answers CLUSTERDOWN) is explained, not just quoted: `coordinator status`, a worker and
# a shard-server say that the Redis Cluster is down, which node is unreachable (with its slots) and what
# to do (issue 25: status printed only the CLUSTERDOWN error).
. "$(dirname "$0")/lib.sh"
RUN=cd
start_redis_cluster 1
init_run $RUN --trainer quadratic --numel 1000 --shards 2
# a master other than the URL's node, and its replica
set -- $CLUSTER_PORTS; shift
for p; do redis-cli -p "$p" role | head -n 1 | grep -q master && { M=$p; break; }; done
[ -n "${M:-}" ] || fail "no second master"
id=$(redis-cli -p "$M" cluster myid)
R=""
for p in $CLUSTER_PORTS; do redis-cli -p "$p" cluster nodes | grep myself | grep -q " $id " && R=$p; done
[ -n "$R" ] || fail "no replica of $M"
kill -9 "$(cat "$TMP/node-$M/redis.pid")" "$(cat "$TMP/node-$R/redis.pid")"
wait_until 30 "redis-cli -p $PORT cluster info | grep -q '^cluster_state:fail'" "cluster_state:fail"
say "killed master $M and its replica $R: the cluster is down"
want="the Redis Cluster is down (CLUSTERDOWN.*node 127.0.0.1:$M (master of slots [0-9].*) is unreachable.*start .* again, or fail .* slots over to a replica, then check with redis-cli --cluster check 127.0.0.1:$PORT"
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status.txt" 2>&1 && fail "status succeeded"
grep -q "$want" "$TMP/status.txt" || fail "status says: $(cat "$TMP/status.txt")"
say "status: $(cat "$TMP/status.txt")"
timeout 20 bin/worker --redis "$URL" --run $RUN --steps 1 --connect-timeout 3 > "$TMP/worker.txt" 2>&1
grep -q "$want" "$TMP/worker.txt" || fail "the worker says: $(tail -n 3 "$TMP/worker.txt")"
start_server s1 --connect-timeout 3
wait_until 20 "grep -q 'the Redis Cluster is down' $TMP/server-s1.log" "the shard-server to say it"
grep -q "$want" "$TMP/server-s1.log" || fail "the shard-server says: $(tail -n 3 "$TMP/server-s1.log")"
say "OK"
