#!/bin/sh
# it_ha_async_placement.sh: with --min-replicas 1 an async worker pushes its pseudo-gradient only once its
# places (dl_submit) are on a replica, and trains only once its registration (dl_register) is. A place lost in
# a failover is handed to another submission on the new master; the owner keeps our push for it unused (or,
# past it, acks it as "applied already") and our get returns once the shard is past it: the window is lost
# while its worker counts it as applied (seen in async storms on Redis with Sentinel: tests/chaos/chaos.py
# --redis-ha, the shards no longer equal to tests/tools/ref_async's replay; docs/PROTOCOL.md, "Durable means
# replicated").
# A Redis master with one replica; an async run of two workers (1 s intervals) and one shard-server. Right after
# worker a's sync the replica is SIGSTOPped for 8 s: a's next submission is recorded on the master, but its push
# never reaches the server (the server's pushes_total stays put), and a worker c started meanwhile does not
# train a step; both say what they wait for. After SIGCONT the run ends bit-identical to the replay.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
RUN=place; H=10
start_redis
RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir "$TMP" --replicaof 127.0.0.1 "$PORT" \
  --logfile "$TMP/replica.log" --pidfile "$TMP/replica.pid" > /dev/null || fail "the replica did not start"
wait_until 20 '[ -s "$TMP/replica.pid" ] && redis-cli -p $RPORT info replication | grep -q "master_link_status:up"' \
  "the replica to follow the master"
REPLICA=$(cat "$TMP/replica.pid"); PIDS="$PIDS $REPLICA"
init_run $RUN --async --trainer quadratic --numel 20000 --shards 2 --workers 3 --min-replicas 1
MPORT=$(free_port)
start_server s1 --metrics 127.0.0.1:$MPORT
wait_until 20 'curl -sf "http://127.0.0.1:$MPORT/metrics" > /dev/null' "the server's metrics endpoint"
pushes() { curl -sf "http://127.0.0.1:$MPORT/metrics" | awk '/^[a-z_]*pushes_total/ {print $2}'; }
submits() { $RCLI XRANGE "dl:{$RUN}:events" - + | grep -c '^submit$'; }
syncs() { cat "$TMP/$1.jsonl" 2>/dev/null | grep -c '"event":"sync"'; }
start_worker a --sync-every $H --steps 80 --step-delay-ms 100 --heartbeat-interval 0.5
start_worker b --sync-every $H --steps 80 --step-delay-ms 100 --heartbeat-interval 0.5
wait_until 30 '[ "$(syncs a)" -ge 2 ] && [ "$(syncs b)" -ge 2 ]' "both workers to sync twice"

n=$(syncs a)
wait_until 5 '[ "$(syncs a)" -gt $n ]' "a's next sync" 0.02
kill -STOP "$REPLICA"
t0=$(date +%s)
sleep 0.2
p0=$(pushes); s0=$(submits)
start_worker c --sync-every $H --steps 40 --step-delay-ms 100 --heartbeat-interval 0.5
wait_until 5 '[ "$(submits)" -gt $s0 ]' "a submission recorded with the replica stopped"
sleep 1
p1=$(pushes); s1=$(submits)
[ "$p1" = "$p0" ] || fail "$((p1 - p0)) pushes reached the server after a submission no replica had ($s0 -> $s1 submit events)"
say "replica stopped: $((s1 - s0)) submission(s) recorded on the master, none pushed (pushes_total $p0)"
wait_until 10 'grep -q "Redis replica(s) have our write after" "$TMP/worker-a.log" "$TMP/worker-b.log"' \
  "a worker to say it waits for the replica"
left=$((t0 + 8 - $(date +%s))); [ $left -gt 0 ] && sleep $left
grep -q '"event":"step"' "$TMP/c.jsonl" 2>/dev/null && fail "c trained before its registration was on the replica"
grep -q "Redis replica(s) have our write after" "$TMP/worker-c.log" || fail "c did not say it waits for the replica"
kill -CONT "$REPLICA"
say "c trained nothing in 8 s with the replica stopped: $(grep -m1 'have our write' "$TMP/worker-c.log" | sed 's/.*WARN //')"
wait_workers a b c
ref_async_check $RUN $H "(a replica stopped 8 s)" --async-lookahead 0.5
