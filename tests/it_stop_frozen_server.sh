#!/bin/sh
# it_stop_frozen_server.sh: a stop (SIGTERM) that finds the worker pushing to a frozen shard-server ends
# the push at once. The server is frozen (SIGSTOP: its connections stay open, nothing is read) between two
# rounds; the next round's push of 16 MB (8 M parameters in bf16, one shard) fills the socket's buffers and
# waits for the server to read. That wait used to last the data plane's net_timeout_ms (60 s) before the
# close could begin; now the worker's frame I/O watches the stop (frame_watch_stop, worker/diloco/conn.c)
# and ends after 100 ms without progress. Asserts the worker exits within 4 s of SIGTERM and says what the
# stop cut short. (it_stop_frozen_command does the same for a frozen Redis.)
. "$(dirname "$0")/lib.sh"
start_redis
RUN=frozensrv
init_run "$RUN" --trainer quadratic --numel 8000000 --shards 1 --workers 1
start_server s1
SRV_PID=$SRV_s1 # its own s1: a pgrep by command line also finds the s1 of a test running beside it
trap 'kill -CONT $SRV_PID 2>/dev/null; cleanup' EXIT
start_worker w1 --sync-every 5 --steps 1000000 --heartbeat-interval 1 --step-delay-ms 1
pid=$WRK_w1
wait_until 60 "grep -q 'committed version 2' $TMP/server-s1.log" "two rounds committed"
kill -STOP "$SRV_PID"
sleep 2 # the next round's push is under way, into a server that reads nothing
alive "$pid" || fail "the worker exited before the stop"
term_and_time "$pid" "the worker to exit"
kill -CONT "$SRV_PID"
secs=$TERM_SECS
log=$TMP/worker-w1.log
say "the worker exited $secs s after SIGTERM, its shard-server frozen; $(grep -o 'stopped during a sync: .*' "$log" | head -1)"
grep -q 'stopped after .*(signal)' "$log" || fail "the worker did not say it stopped on the signal"
# cut short either while the push's bytes waited for the frozen server to read ("no progress") or, where
# they fitted in the sockets' buffers, while the push waited for its reply ("no reply from the owner")
grep -Eq 'stopped during a sync: .*(no progress|no reply from the owner)' "$log" ||
  fail "the stop cut no push or get to the frozen server short (was s1 frozen?): $(grep 'stopped' "$log")"
awk -v s="$secs" 'BEGIN { exit !(s < 4) }' || fail "the worker took $secs s to exit after SIGTERM (want < 4 s)"
say "PASS: a stop ends a push to a frozen shard-server at once ($secs s)"
