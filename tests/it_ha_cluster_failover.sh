#!/bin/sh
# it_ha_cluster_failover.sh: a sync run (quadratic, 3 workers, 2 shard-servers, 8 shards, min_replicas 1)
# on a Redis Cluster of 3 masters with one replica each (node timeout 2 s), everyone given the URL of all
# six nodes (redis://h1,h2,...: the seeds). Mid-run the master that holds the run's control keys (and
# some shards' blobs) is kill -9'd: its replica takes over its slots, our processes follow the MOVED
# replies to it, and the killed node comes back 3 s later as a replica. No worker or server is
# restarted. Worker w1 is a process group of 2 ranks (tests/tools/group_worker: a multi-GPU node, each rank
# with its own connections following the MOVED replies). Every worker finishes (the group: both ranks at the
# same steps), every round commits exactly once per shard, and the final parameters are bit-identical to the
# fault-free reference.
. "$(dirname "$0")/lib.sh"
RUN=hac; NUMEL=200000; SEED=13; ROUNDS=22; H=20
start_redis_cluster 1
URL="redis://$(echo $CLUSTER_PORTS | sed 's/\([0-9][0-9]*\)/127.0.0.1:\1/g; s/ /,/g')"
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED --min-replicas 1
start_server s1 --lease-ttl-ms 3000
start_server s2 --lease-ttl-ms 3000
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id w1 --ranks 2 --steps $((ROUNDS * H)) --sync-every $H \
  --heartbeat-ms 1000 --step-delay-ms 10 > "$TMP/w1.out" 2> "$TMP/worker-w1.log" &
WRK_w1=$!; PIDS="$PIDS $!"
for w in w2 w3; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --step-delay-ms 10; done
round() { $RCLI HGET "dl:{$RUN}:state" round:0 2>/dev/null || echo 0; }
wait_until 60 '[ "$(round)" -ge 6 ]' "round 6"
slot=$(redis-cli -p "$PORT" cluster keyslot "{$RUN}")
victim=$(cluster_slot_port "$slot")
before=$(round)
kill -9 "$(cat "$TMP/node-$victim/redis.pid")"
t0=$(date +%s)
say "killed the master of {$RUN} (slot $slot), 127.0.0.1:$victim, at round $before"
# look at the cluster from a node that is alive
for p in $CLUSTER_PORTS; do [ "$p" != "$victim" ] && PORT=$p && RCLI="redis-cli -c -p $p" && break; done
CLUSTER_PORTS_ALIVE=$(echo $CLUSTER_PORTS | tr ' ' '\n' | grep -v "^$victim\$" | tr '\n' ' ')
promoted() { for p in $CLUSTER_PORTS_ALIVE; do redis-cli -p "$p" role 2>/dev/null | head -n 1 | grep -q master && \
  redis-cli -p "$p" cluster nodes | grep myself | grep -q -- "$(redis-cli -p "$PORT" cluster nodes | awk -v s="$slot" '
  $3 ~ /master/ && $3 !~ /fail/ {for (i = 9; i <= NF; i++) {split($i, r, "-"); if (r[2] == "") r[2] = r[1]; if (s + 0 >= r[1] + 0 && s + 0 <= r[2] + 0) print $1}}')" && return 0; done; return 1; }
wait_until 30 promoted "a replica to take over slot $slot"
say "a replica took over slot $slot after $(( $(date +%s) - t0 )) s"
sleep 3
eval redis-server $(cat "$TMP/node-$victim/args") >/dev/null || fail "restarting node $victim"
wait_until 30 "redis-cli -p $victim role 2>/dev/null | head -n 1 | grep -q slave" "node $victim back as a replica"
say "127.0.0.1:$victim is back as a replica"
wait_until 60 '[ "$(round)" -ge $((before + 3)) ]' "3 more rounds after the failover"
say "3 rounds closed after the kill within $(( $(date +%s) - t0 )) s"
wait_workers w1 w2 w3
for s in s1 s2; do eval "pid=\$SRV_$s"; alive "$pid" || fail "shard-server $s died"; done
v="$ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS"
[ "$(shard_versions $RUN)" = "$v" ] || fail "versions: $(shard_versions $RUN)"
n=$(grep -c 'registered as w1' "$TMP/worker-w1.log"); [ "$n" -eq 1 ] || fail "the group w1 registered $n times"
s0=$(grep '^sync rank 0 ' "$TMP/w1.out" | awk '{print $NF}' | tr '\n' ' '); s1=$(grep '^sync rank 1 ' "$TMP/w1.out" | awk '{print $NF}' | tr '\n' ' ')
[ "$s0" = "$s1" ] && [ "$(echo $s0 | wc -w)" -eq $ROUNDS ] || fail "the group's ranks synced at steps '$s0' and '$s1' ($ROUNDS rounds)"
awk '/^sync rank/ && $13 != 0 {bad = 1} END {exit bad}' "$TMP/w1.out" || fail "the group lost a round"
for w in w2 w3; do
  n=$(grep -c '"event":"join"' "$TMP/$w.jsonl"); [ "$n" -eq 1 ] || fail "$w joined $n times"
  grep '"event":"sync"' "$TMP/$w.jsonl" | grep -q '"stale":true' && fail "$w lost a round"
done
assert_matches_reference
say "bit-identical to the fault-free reference after $ROUNDS rounds and the failover of the master of {$RUN}"
