#!/bin/sh
# it_stop_frozen_command.sh: a stop (SIGTERM) that finds the worker inside a command to a frozen Redis ends
# that command at once, so the close begins at once. it_close_frozen_redis freezes Redis between two syncs and
# times the close; here Redis is frozen (SIGSTOP: connections are accepted, nothing is answered) while the
# worker syncs every 20 steps of 1 ms, so within a sync of the freeze it blocks in a command to Redis (the
# confirm of its last round, dl_arrive, dl_submit, a lane's reconnect) or on a shard-server's reply, which
# waits for Redis too. It gets SIGTERM a second later. Such a command used to wait out the control
# connection's 10 s timeout (REDIS_TIMEOUT_MS) before the close even started (10.2-16.9 s here); now the
# connection watches the stop (rconn_watch_stop, worker/diloco/control.c). Four runs: sync with one
# fragment, sync Streaming with 2 fragments in flight (their rounds' own control connections, the lanes),
# async (dl_submit), and sync with Redis frozen 6 s before the stop (the heartbeat reconnecting). Asserts each worker exits within 4 s of SIGTERM (about 0.5 s) and says it stopped on the
# signal; where the stop cut a sync short, the log says why ("stopped during a sync: Redis connection error:
# interrupted by a stop" for dl_submit, or which push or get it cut short when a shard-server waited for Redis).
# test: light (it waits more than it computes: 2 s of CPU in 13 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
start_redis
REDIS_PID=$(cat "$TMP/redis.pid")
trap 'kill -CONT $REDIS_PID 2>/dev/null; cleanup' EXIT

# stop_frozen NAME "INIT FLAGS" "WORKER FLAGS" [FROZEN_S]: one run, with its own run name, SIGTERM FROZEN_S
# (default 1) seconds after the freeze; Redis is running again after
stop_frozen() {
  RUN=$1
  init_run "$RUN" --trainer quadratic --numel 20000 --shards 4 --workers 1 $2
  start_server "s_$RUN"
  start_worker "w_$RUN" --sync-every 20 --steps 1000000 --heartbeat-interval 1 --step-delay-ms 1 $3
  eval "pid=\$WRK_w_$RUN"
  wait_until 30 "grep -q 'committed version 3' $TMP/server-s_$RUN.log" "$RUN: three rounds committed"
  kill -STOP "$REDIS_PID"
  sleep "${4:-1}"
  alive "$pid" || fail "$RUN: the worker exited before the stop"
  term_and_time "$pid" "$RUN: the worker to exit"
  kill -CONT "$REDIS_PID"
  log=$TMP/worker-w_$RUN.log
  secs=$TERM_SECS
  say "$RUN: the worker exited $secs s after SIGTERM, Redis frozen; $(grep -o 'stopped during a sync: .*' "$log")"
  grep -q 'stopped after .*(signal)' "$log" || fail "$RUN: the worker did not say it stopped on the signal"
  awk -v s="$secs" 'BEGIN { exit !(s < 4) }' || slow="$slow $RUN: $secs s;"
  kill "$(eval echo \$SRV_s_$RUN)" 2>/dev/null
}
slow="" # the runs whose worker took 4 s or more (all three are measured before the test fails)

stop_frozen sync1 "--fragments 1" ""
stop_frozen stream "--fragments 2" "--fragments-in-flight 2 --fragment-alpha 0.5"
stop_frozen async "--fragments 1 --async" ""
# Redis frozen 6 s: the heartbeat's beat (5 s) timed out and it is reconnecting, in the handshake (PING) that a
# frozen Redis accepts and never answers; heartbeat_stop ends it (rconn_connect_retry's stop). 5.3 s before.
stop_frozen long "--fragments 1" "" 6
[ -z "$slow" ] || fail "the worker took 4 s or more to exit after SIGTERM:$slow want < 4"
for r in sync1 async; do
  grep -q 'stopped during a sync: ' "$TMP/worker-w_$r.log" || fail "$r: no line says what the stop cut short"
done
