#!/bin/sh
# it_async_redis_restart.sh: it_chaos_redis_restart for async mode. Redis with AOF (appendfsync always)
# is kill -9'd every 3 to 4 s while three async workers of different speeds train and two shard-servers
# apply their submissions (Delayed Nesterov, N = 3); each time it comes back on the same port with the
# same directory 1 s later. Nobody restarts a worker or a server. Afterwards: every worker finished its
# steps in one incarnation (one join each), no submission was lost or applied twice (each worker's
# submissions of shard 0 number STEPS / H), and the shard digests are bit-identical to the in-process
# replay of the order Redis recorded (tests/tools/ref_async).
# test: light (it waits more than it computes: 4 s of CPU in 29 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=arr; H=10; STEPS=600; KILLS_WANTED=5
mkdir -p "$TMP/rdir"
start_redis --appendonly yes --appendfsync always --dir "$TMP/rdir"
init_run $RUN --async --trainer quadratic --numel 40000 --shards 4 --workers 3 --dn-buffer-size 3 --snapshot-every 4 --heartbeat-timeout 10
start_server s1 --lease-ttl-ms 3000
start_server s2 --lease-ttl-ms 3000
i=0
for w in fast mid slow; do
  i=$((i + 1))
  start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms $((10 * i))
done

# kill_redis_and_restart: kill -9 Redis, bring it back 1 s later from its AOF on the same port
kill_redis_and_restart() {
  kill -9 "$(cat "$TMP/redis.pid")"
  sleep 1
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly yes --appendfsync always --dir "$TMP/rdir" \
    --daemonize yes --logfile "$TMP/redis.log" --pidfile "$TMP/redis.pid" > /dev/null || fail "redis-server did not restart"
  wait_until 10 '$RCLI ping 2>/dev/null | grep -q PONG' "Redis back after a kill"
}
kills=0
while [ $kills -lt $KILLS_WANTED ] && workers_running fast mid slow; do
  sleep "3.$((kills * 3 % 10))"
  workers_running fast mid slow || break
  kill_redis_and_restart
  kills=$((kills + 1))
done
say "$kills Redis kill -9s while the workers trained"
[ $kills -ge 3 ] || fail "only $kills Redis kills happened before the workers finished: the test proved too little"
wait_until 120 '! workers_running fast mid slow' "the workers to finish $STEPS steps after the Redis restarts (a hang?)"
wait_workers fast mid slow
alive "$SRV_s1" && alive "$SRV_s2" || fail "a shard-server died"

events() { $RCLI XRANGE "dl:{$RUN}:events" - +; }
joins=$(events | grep -c '^join$')
[ "$joins" = 3 ] || fail "$joins registrations, want 3 (a worker registered again: lost work)"
for w in fast mid slow; do
  subs=$(events | awk -v me=$w '/^worker$/ {getline; w = $0} /^type$/ {getline; t = $0}
                               /^shard$/ {getline; if (t == "submit" && w == me && $0 == "0") n++} END {print n + 0}')
  [ "$subs" = $((STEPS / H)) ] || fail "$w made $subs submissions of shard 0, want $((STEPS / H))"
done
build/tests/tools/ref_async --redis "$URL" --run $RUN --sync-every $H > "$TMP/ref.txt" 2> "$TMP/ref.log" ||
  fail "reference: $(cat "$TMP/ref.log")"
shard_digests $RUN > "$TMP/got.txt"
diff "$TMP/ref.txt" "$TMP/got.txt" > "$TMP/diff.txt" || fail "digests differ from the replayed order: $(cat "$TMP/diff.txt")"
say "bit-identical to the replay of $(sed 's/.*replayed //' "$TMP/ref.log") after $kills Redis restarts"
