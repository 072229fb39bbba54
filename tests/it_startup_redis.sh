#!/bin/sh
# it_startup_redis.sh: how the long-running binaries meet Redis at start.
#  A. nothing listens yet: a worker with --connect-timeout 2 gives up after about 2 s with a clear message;
#     a worker and a shard-server with the default wait come up and train once Redis starts (from its
#     RDB, the run already in it) a few seconds later, printing at most one line per few seconds;
#  B. a wrong password (WRONGPASS) is final: the worker, the shard-server and `coordinator serve` exit
#     at once, without retrying, saying what Redis refused; a user without the permission to call the
#     functions (NOPERM) too; and a shard-server whose password is changed while it runs stops.
# test: light (it waits more than it computes: 2 s of CPU in 13 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=startup
round() { $RCLI HGET "dl:{$RUN}:state" round:0; }
restart_redis() { # the same port and data directory as start_redis --dir "$TMP" (the run is in its RDB)
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir "$TMP" \
    --logfile "$TMP/redis.log" --pidfile "$TMP/redis.pid" >/dev/null || fail "redis-server did not restart"
}
# exits_quickly NAME PID LOG SECONDS PATTERN: the process ended within SECONDS with a non-zero status,
# its log matches PATTERN and shows no retry
exits_quickly() {
  end=$(( $(date +%s) + $4 ))
  while alive "$2"; do [ "$(date +%s)" -lt "$end" ] || fail "$1 still runs ${4}s after a refused login: $(tail -n 3 "$3")"; sleep 0.1; done
  wait "$2" && fail "$1 exited with status 0 after a refused login"
  grep -q "$5" "$3" || fail "$1 did not say what Redis refused ($5): $(tail -n 3 "$3")"
  grep -q "retrying" "$3" && fail "$1 retried a refused login: $(grep retrying "$3" | head -n 2)"
  say "$1: $(grep -m1 "$5" "$3" | cut -c1-160)"
}

start_redis --dir "$TMP"
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 1
$RCLI SAVE > /dev/null || fail "SAVE"
$RCLI SHUTDOWN NOSAVE > /dev/null 2>&1
wait_until 10 '! $RCLI ping > /dev/null 2>&1' "Redis to stop"

# ---- A: Redis not up yet
t0=$(date +%s)
start_worker w0 --sync-every 20 --steps 20 --connect-timeout 2
wait "$WRK_w0" && fail "w0 ran without Redis"
took=$(( $(date +%s) - t0 ))
[ "$took" -ge 2 ] && [ "$took" -le 8 ] || fail "--connect-timeout 2 gave up after ${took}s"
grep -q "gave up after" "$TMP/worker-w0.log" || fail "w0 did not say it gave up: $(tail -n 2 "$TMP/worker-w0.log")"
start_server s1 --lease-ttl-ms 2000
start_worker w1 --sync-every 20 --steps 60 --heartbeat-interval 0.5 --step-delay-ms 10
sleep 4
alive "$WRK_w1" || fail "the worker gave up on Redis within 4 s: $(tail -n 3 "$TMP/worker-w1.log")"
alive "$SRV_s1" || fail "the shard-server gave up on Redis within 4 s: $(tail -n 3 "$TMP/server-s1.log")"
for f in worker-w1 server-s1; do
  n=$(grep -c "retrying" "$TMP/$f.log")
  [ "$n" -le 2 ] || fail "$f printed $n retry lines in 4 s: $(grep retrying "$TMP/$f.log" | head -n 3)"
done
restart_redis
wait "$WRK_w1" || fail "the worker did not train once Redis came up: $(tail -n 5 "$TMP/worker-w1.log")"
[ "$(round)" -ge 3 ] || fail "only $(round) rounds closed"
grep -q "connected to Redis" "$TMP/worker-w1.log" || fail "the worker did not report its late connection"
say "A: --connect-timeout 2 gave up after ${took}s; a worker and a server started 4 s before Redis trained $(round) rounds"
kill "$SRV_s1"

# ---- B: refusals are final
$RCLI ACL SETUSER alice on '>right' '~*' '&*' '+@all' > /dev/null || fail "ACL SETUSER alice"
$RCLI ACL SETUSER bob on '>pw' '~*' '-@all' '+hgetall' '+ping' > /dev/null || fail "ACL SETUSER bob"
BAD="redis://alice:wrong@127.0.0.1:$PORT"
bin/worker --redis "$BAD" --run $RUN --worker-id w2 --quiet > "$TMP/refused-worker.log" 2>&1 &
p=$!; PIDS="$PIDS $p"
exits_quickly worker $p "$TMP/refused-worker.log" 5 WRONGPASS
bin/shard-server --redis "$BAD" --run $RUN > "$TMP/refused-server.log" 2>&1 &
p=$!; PIDS="$PIDS $p"
exits_quickly shard-server $p "$TMP/refused-server.log" 5 WRONGPASS
bin/coordinator serve --redis "$BAD" --run $RUN > "$TMP/refused-serve.log" 2>&1 &
p=$!; PIDS="$PIDS $p"
exits_quickly "coordinator serve" $p "$TMP/refused-serve.log" 5 WRONGPASS
bin/shard-server --redis "redis://bob:pw@127.0.0.1:$PORT" --run $RUN > "$TMP/noperm-server.log" 2>&1 &
p=$!; PIDS="$PIDS $p"
exits_quickly "shard-server (NOPERM)" $p "$TMP/noperm-server.log" 5 "refuses this user: NOPERM"
# a password changed under a running shard-server: its connections' new logins are refused, it stops
bin/shard-server --redis "redis://alice:right@127.0.0.1:$PORT" --run $RUN --id s2 > "$TMP/server-s2.log" 2>&1 &
p=$!; PIDS="$PIDS $p"
wait_until 10 'grep -q "shard-server s2 up" "$TMP/server-s2.log"' "s2 to start"
$RCLI ACL SETUSER alice resetpass '>changed' > /dev/null || fail "ACL SETUSER alice resetpass"
$RCLI CLIENT KILL USER alice > /dev/null || fail "CLIENT KILL USER alice"
end=$(( $(date +%s) + 5 ))
while alive $p; do [ "$(date +%s)" -lt "$end" ] || fail "s2 still runs 5 s after its password changed"; sleep 0.1; done
wait $p && fail "s2 exited with status 0 after its password changed"
grep -q "refuses this user: WRONGPASS" "$TMP/server-s2.log" || fail "s2 did not say why it stopped: $(tail -n 3 "$TMP/server-s2.log")"
say "B: a refused login ends every binary at once, at start and (shard-server) later"
