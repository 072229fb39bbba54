#!/bin/sh
# it_close_pending_submission.sh: an async submission still pending when the worker closes is completed by the
# close (worker/diloco/async.c, async_complete_closing), so its window is applied once. One worker, one
# shard-server behind a data-plane proxy that refuses the worker's get of the submission whose pushes went
# out last: the pushes were acknowledged, the result never came, and the submission stays pending. Its owner
# applies a place only on a get of the version after it, and nobody else asks, so before, the window was
# lost (never doubled): the shards stayed one version short of the submissions (2 of 3 here).
#
# end:  the worker's steps end right after that failed sync (3 submissions of H steps).
# stop: SIGTERM right after the failed sync (H = 200 steps of 3 ms: the next sync, which would complete it
#       otherwise, is 0.6 s away); the close must still be prompt (< 4 s; a few ms here).
# Each asserts: one get refused, the completion logged, every shard at the version after the last submission,
# and the shards bit-identical to the replay of every submission once (tests/tools/ref_async).
. "$(dirname "$0")/lib.sh"
start_redis

# pending_at_close RUN H STEPS: the run, its server behind the proxy, the worker (STEPS steps; 0: until stopped)
pending_at_close() {
  RUN=$1
  init_run $RUN --async --trainer quadratic --numel 20000 --shards 4 --workers 1
  SPORT=$(free_port)
  drop_proxy w1 "$SPORT" --dataplane w1 --match get --after-pushes 3 --drops 1 --lose error
  start_server s0 --listen 127.0.0.1:$SPORT --advertise 127.0.0.1:$PPORT_w1
  steps=$3; [ "$steps" = 0 ] && steps=1000000
  start_worker w1 --sync-every "$2" --steps $steps --heartbeat-interval 1 --step-delay-ms 3
}

# applied_once RUN H: the checks above, once the worker exited
applied_once() {
  log=$TMP/worker-w1.log
  [ "$(grep -c "lost the error" "$TMP/proxy-$1-w1.log")" = 1 ] || fail "$1: the proxy did not refuse one get"
  grep -q "sync failed (1 in a row" "$log" || fail "$1: w1 did not report its failed sync"
  n=$(submissions $1 w1)
  [ "$n" = 3 ] || fail "$1: w1 made $n submissions, want 3"
  versions=$(shard_versions $1)
  [ "$versions" = "3 3 3 3" ] || fail "$1: shard versions $versions, want 3 each (every window applied once)"
  build/tests/tools/ref_async --redis "$URL" --run $1 --sync-every $2 > "$TMP/ref-$1.txt" 2> "$TMP/ref-$1.log" ||
    fail "reference of $1: $(cat "$TMP/ref-$1.log")"
  shard_digests $1 > "$TMP/got-$1.txt"
  diff "$TMP/ref-$1.txt" "$TMP/got-$1.txt" > "$TMP/diff.txt" ||
    fail "$1: digests differ from the replay of every submission once: $(cat "$TMP/diff.txt")"
  grep -q "fragment 0: the submission whose result did not come is applied (version 3 of shard 0) before closing" \
    "$log" || fail "$1: the close did not complete the pending submission"
  say "$1: the close completed the pending submission; bit-identical to the replay of $(sed 's/.*replayed //' "$TMP/ref-$1.log")"
  kill "$SRV_s0"
}

pending_at_close end 10 30
wait_workers w1
applied_once end 10

pending_at_close stop 200 0
# the SIGTERM must come before the next sync (0.6 s after the failed one), which would complete the submission
# itself: look every 20 ms, not every 0.2 s
wait_until 30 "grep -q 'sync failed' $TMP/worker-w1.log" "stop: the failed sync" 0.02
t_term=$(date +%s.%N)
kill -TERM "$WRK_w1"
failed=$(date -u -d "$(sed -n 's/^\([0-9T:.-]*\)Z .*sync failed.*/\1/p' "$TMP/worker-w1.log" | head -n 1)" +%s.%N)
wait_workers w1
secs=$(awk -v a="$(date +%s.%N)" -v b="$t_term" 'BEGIN { printf "%.2f", a - b }')
grep -q "stopped after .*(signal)" "$TMP/worker-w1.log" || fail "stop: w1 did not stop on the signal"
applied_once stop 200
awk -v s="$secs" 'BEGIN { exit !(s < 4) }' || fail "stop: w1 took $secs s to close, want < 4"
say "stop: SIGTERM $(awk -v a="$t_term" -v b="$failed" 'BEGIN { printf "%.2f", a - b }') s after the failed sync; closed $secs s after it"
