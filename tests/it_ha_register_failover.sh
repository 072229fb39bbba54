#!/bin/sh
# it_ha_register_failover.sh: a worker whose registration waits for a replica (--min-replicas 1) when the
# master dies registers again once Redis answers, instead of exiting. The WAIT breaks with the connection,
# and until the replica is master a Redis Cluster does not answer for that slot at all ("cannot connect to
# cluster node", at once); the first re-registration failed and the worker exited. Now it is asked again
# with backoff for up to the connect timeout (worker/diloco/control.c, register_again).
# A Redis Cluster of 3 masters with a replica each (node timeout 2 s). The replica of the master holding the
# run's control keys is SIGSTOPped before the worker starts, so the worker's registration waits for it; the
# master is killed -9, the replica resumes 1 s later and takes over (the killed node comes back as its
# replica). The worker registers again on the new master, trains its 4 rounds and ends.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
RUN=regfo
start_redis_cluster 1
URL="redis://$(echo $CLUSTER_PORTS | sed 's/\([0-9][0-9]*\)/127.0.0.1:\1/g; s/ /,/g')"
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 1 --min-replicas 1
start_server s1 --lease-ttl-ms 3000
slot=$(redis-cli -p "$PORT" cluster keyslot "{$RUN}")
victim=$(cluster_slot_port "$slot")
rep=""
for p in $CLUSTER_PORTS; do
  redis-cli -p "$p" info replication | grep -q "^master_port:$victim" && rep=$p
done
[ -n "$rep" ] || fail "no replica follows 127.0.0.1:$victim"
wait_until 20 "redis-cli -p $victim info replication | grep -q 'slave0:.*state=online'" "the replica to be online"

kill -STOP "$(cat "$TMP/node-$rep/redis.pid")"
start_worker a --sync-every 10 --steps 40 --step-delay-ms 20 --heartbeat-interval 0.5
wait_until 10 'grep -q "registered as a" "$TMP/worker-a.log"' "a's registration"
sleep 0.5
grep -q '"event":"step"' "$TMP/a.jsonl" 2>/dev/null && fail "a trained before its registration was on the replica"
kill -9 "$(cat "$TMP/node-$victim/redis.pid")"
sleep 1
kill -CONT "$(cat "$TMP/node-$rep/redis.pid")"
say "killed the master of {$RUN} (127.0.0.1:$victim) while a's registration waited for its replica ($rep)"
for p in $CLUSTER_PORTS; do [ "$p" != "$victim" ] && PORT=$p && RCLI="redis-cli -c -p $p" && break; done
wait_until 30 "redis-cli -p $rep role | head -n 1 | grep -q master" "the replica to take over"
eval redis-server $(cat "$TMP/node-$victim/args") > /dev/null || fail "restarting node $victim"
wait_workers a
grep -q "registering again" "$TMP/worker-a.log" || fail "a did not register again: $(grep -h -m3 WARN "$TMP/worker-a.log")"
n=$(grep -c "registered as a" "$TMP/worker-a.log")
[ "$n" -ge 2 ] || fail "a registered $n time(s)"
[ "$(shard_versions $RUN)" = "4 4" ] || fail "versions $(shard_versions $RUN), not 4 4"
say "a registered again ($n registrations) and trained its 4 rounds; versions $(shard_versions $RUN)"
