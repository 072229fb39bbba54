#!/bin/sh
# it_close_frozen_redis.sh: a worker asked to stop (SIGTERM) while Redis is frozen (SIGSTOP: connections are
# accepted, nothing is answered, as when its packets are dropped) closes promptly. A sync Streaming run of 2
# fragments with --fragments-in-flight 2, so the worker's wake hub (worker/diloco/wake.c) sits in a BLPOP the
# whole time. Redis is frozen once two rounds are committed; the worker gets SIGTERM half a second later.
# Its close used to wait for Redis in turn: the confirm of the last round (the control connection's 10 s
# timeout), the hub's stop (an RPUSH to our wake list on that connection, then the hub's BLPOP, 11 s) and the
# heartbeat's beat (5 s, then its reconnect, 5 s): 15.5 s here. Now the hub's and the heartbeat's
# connections are interrupted (rconn_interrupt: shutdown(2) of their sockets) and, once stopping, a command
# on the control connection waits 1 s. Asserts the time from the worker's "stopped after" line to its exit
# is under 4 s (about 1 s).
# test: light (it waits more than it computes: 3 s of CPU in 9 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
start_redis
REDIS_PID=$(cat "$TMP/redis.pid")
trap 'kill -CONT $REDIS_PID 2>/dev/null; cleanup' EXIT
RUN=frozen
init_run $RUN --trainer quadratic --numel 20000 --shards 4 --fragments 2 --workers 1
start_server s0
start_worker w1 --sync-every 3000 --steps 1000000 --heartbeat-interval 1 --step-delay-ms 1 --fragments-in-flight 2 --fragment-alpha 0.5
wait_until 30 "grep -q 'committed version 2' $TMP/server-s0.log" "two rounds committed"
kill -STOP "$REDIS_PID"
sleep 0.5
kill -TERM "$WRK_w1"
wait_until 30 "! alive $WRK_w1" "w1 to exit"
t_exit=$(date +%s.%N)
kill -CONT "$REDIS_PID"
stopped=$(sed -n 's/^\([0-9T:.-]*\)Z .*stopped after .*(signal).*/\1/p' "$TMP/worker-w1.log")
[ -n "$stopped" ] || fail "w1 did not say it stopped on the signal"
t_stop=$(date -u -d "$stopped" +%s.%N)
secs=$(awk -v a="$t_exit" -v b="$t_stop" 'BEGIN { printf "%.2f", a - b }')
say "w1 closed $secs s after it stopped, Redis frozen"
awk -v s="$secs" 'BEGIN { exit !(s < 4) }' || fail "w1 took $secs s to close while Redis was frozen, want < 4"
