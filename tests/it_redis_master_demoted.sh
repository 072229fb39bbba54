#!/bin/sh
# it_redis_master_demoted.sh: the Redis a worker's plain redis:// URL names is made a replica under it (a manual
# failover: its replica promoted, REPLICAOF to it), so every write of the worker is refused READONLY. The worker
# stays up, its heartbeat says so with the new master and what to do, and it waits without hammering the replica;
# once the node leads again (REPLICAOF NO ONE) it trains on. Before, its barrier wait (the hub had this round's
# close, and dl_barrier was refused at once) and its listening threads reconnected without a pause: some 4,600
# connections a second to the replica, and the only word was "waits for 1 member(s): w1 (last heartbeat 10 s ago)",
# naming itself.
# test: light (it waits for processes more than it computes)
. "$(dirname "$0")/lib.sh"
start_redis
RUN=dem
init_run $RUN --trainer quadratic --numel 2000 --shards 2 --workers 1
RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir "$TMP" \
  --logfile "$TMP/replica.log" --pidfile "$TMP/replica.pid" --replicaof 127.0.0.1 "$PORT" \
  --repl-diskless-sync-delay 0 > /dev/null || fail "replica"
wait_until 10 "[ -s $TMP/replica.pid ]" "the replica's pid file"
PIDS="$PIDS $(cat "$TMP/replica.pid")"
wait_until 20 "[ \"\$($REDIS_CLI -p $RPORT EXISTS 'dl:{$RUN}:config')\" = 1 ]" "the replica to have the run"
start_server s1
start_worker w1 --sync-every 5 --steps 1000000 --step-delay-ms 20 --heartbeat-interval 1
wait_until 30 "[ \"\$($RCLI HGET 'dl:{$RUN}:state' commits)\" -ge 4 ] 2>/dev/null" "the run to commit"

$REDIS_CLI -p "$RPORT" REPLICAOF NO ONE > /dev/null
$REDIS_CLI -p "$PORT" REPLICAOF 127.0.0.1 "$RPORT" > /dev/null
say "the worker's Redis is a replica of 127.0.0.1:$RPORT now"
wait_until 20 "grep -q 'heartbeat refused: READONLY.*point the URL at the master.*its master is 127.0.0.1:$RPORT' $TMP/worker-w1.log" \
  "the worker to say its heartbeat is refused by a replica, and which master"
a=$($RCLI INFO stats | sed -n 's/^total_connections_received:\([0-9]*\).*/\1/p')
sleep 5 # (a rate: how often the worker connects to the replica)
b=$($RCLI INFO stats | sed -n 's/^total_connections_received:\([0-9]*\).*/\1/p')
n=$((b - a))
[ "$n" -le 200 ] || fail "$n connections to the replica in 5 s (the worker reconnects without a pause)"
alive "$WRK_w1" || fail "the worker exited: $(tail -n 3 "$TMP/worker-w1.log")"
say "$n connections in 5 s; the node leads again"

$REDIS_CLI -p "$PORT" REPLICAOF NO ONE > /dev/null
c=$($RCLI HGET "dl:{$RUN}:state" commits)
wait_until 60 "[ \"\$($RCLI HGET 'dl:{$RUN}:state' commits)\" -ge $((c + 4)) ]" "the run to commit again"
alive "$WRK_w1" || fail "the worker exited"
say "OK: the worker waited through the demotion and trains on"
