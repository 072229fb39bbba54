#!/bin/sh
# it_redis_seeds_plain.sh: a redis:// URL with several nodes that are not Redis Cluster nodes is refused.
# Several nodes in a redis:// URL are a Cluster's seeds: every connection used the seed that answered first.
# Given two plain Redis servers (a typo, or a list meant for Sentinel), `coordinator status` found the run
# in 4 of 6 tries and said NORUN in the other 2, and `coordinator init`, the workers and the shard-servers
# could each land on another server (operator walkthrough, 3 December). Now the node reached must be a
# Cluster node (common/redis/rconn.c check_seeds_cluster), else every process says what to write instead,
# at once and for good (no retries), exit 1.
# test: light
. "$(dirname "$0")/lib.sh"
RUN=seeds
start_redis
init_run $RUN --trainer quadratic --numel 1000 --shards 1 --workers 1
P2=$(free_port)
redis-server --port "$P2" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir "$TMP" \
  --logfile "$TMP/redis2.log" --pidfile "$TMP/redis2.pid" > /dev/null || fail "second redis-server"
wait_until 10 "$REDIS_CLI -p $P2 ping 2>/dev/null | grep -q PONG" "the second Redis"
PIDS="$PIDS $(cat "$TMP/redis2.pid")" # (killed on exit)
SEEDS="redis://127.0.0.1:$P2,127.0.0.1:$PORT"
want="the Redis URL names 2 nodes, the form of a Redis Cluster's seeds, but 127.0.0.1:[0-9]* is not a Cluster node (cluster support disabled): name one Redis server alone (redis://HOST:PORT)"
for i in 1 2 3 4 5; do
  bin/coordinator status --redis "$SEEDS" --run $RUN > "$TMP/status.log" 2>&1 && fail "status with two plain seeds succeeded (try $i)"
  grep -q "$want" "$TMP/status.log" || fail "status did not say why (try $i): $(cat "$TMP/status.log")"
done
say "coordinator status: refused with the way out, 5 of 5 tries"
t0=$(date +%s)
bin/shard-server --redis "$SEEDS" --run $RUN > "$TMP/server-s.log" 2>&1 && fail "the shard-server started"
grep -q "$want" "$TMP/server-s.log" || fail "the shard-server did not say why: $(tail -n 3 "$TMP/server-s.log")"
bin/worker --redis "$SEEDS" --run $RUN --steps 5 > "$TMP/worker-w.log" 2>&1 && fail "the worker started"
grep -q "$want" "$TMP/worker-w.log" || fail "the worker did not say why: $(tail -n 3 "$TMP/worker-w.log")"
[ $(($(date +%s) - t0)) -le 10 ] || fail "the refusals were retried ($(($(date +%s) - t0)) s)"
bin/coordinator init --redis "$SEEDS" --run other --trainer quadratic --numel 100 > "$TMP/init.log" 2>&1 &&
  fail "init with two plain seeds succeeded"
grep -q "$want" "$TMP/init.log" || fail "init did not say why: $(cat "$TMP/init.log")"
[ -z "$($REDIS_CLI -p $P2 keys '*')" ] || fail "something was written in the second Redis: $($REDIS_CLI -p $P2 keys '*')"
say "shard-server, worker and init: refused at once with the same message; nothing written"
echo "PASS"
