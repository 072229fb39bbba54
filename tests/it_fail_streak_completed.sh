#!/bin/sh
# it_fail_streak_completed.sh: a failed sync that is completed later (async: async_complete; sync: the round
# completed late, sync_confirm_durable) is a sync that succeeded: it ends the failures in a row, so a worker
# with --max-sync-retries 1 that fails, completes, then fails once more keeps its incarnation (before, the
# completion left the count at 1 and the next failure, "2 in a row", registered it again).
# w1 (alone in the run: one shard-server, 4 shards) sits behind two data-plane proxies in a chain
# (tests/tools/drop_proxy.py): one refuses its get of shard 0 after its 3rd push of shard 0, the other after
# its 5th (the completion's resend at the 4th boundary is the 4th push): failure, completion, failure, once in
# each mode.
. "$(dirname "$0")/lib.sh"
H=10; STEPS=60
start_redis
for mode in async sync; do
  RUN=streak_$mode; flags=""; [ $mode = async ] && flags=--async
  init_run $RUN $flags --trainer quadratic --numel 20000 --shards 4 --workers 1
  SPORT=$(free_port)
  drop_proxy a "$SPORT" --dataplane w1 --match get --after-pushes 3 --drops 1 --lose error
  drop_proxy b "$PPORT_a" --dataplane w1 --match get --after-pushes 5 --drops 1 --lose error
  start_server s0 --listen 127.0.0.1:$SPORT --advertise 127.0.0.1:$PPORT_b
  start_worker w1 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 2 --max-sync-retries 1
  wait_workers w1
  for p in a b; do
    [ "$(grep -c "lost the error" "$TMP/proxy-$RUN-$p.log")" = 1 ] || fail "$RUN: proxy $p did not refuse one get"
    eval "kill \$PROXY_$p"
  done
  log="$TMP/worker-w1.log"
  n=$(grep -c "sync failed (1 in a row" "$log")
  [ "$n" = 2 ] || fail "$RUN: w1 reported $n failures that began a streak, want 2: $(grep 'sync failed' "$log")"
  if [ $mode = async ]; then done_msg="the submission whose result did not come is applied"; else done_msg="completed late"; fi
  grep -q "$done_msg" "$log" || fail "$RUN: w1 did not complete its failed sync"
  grep -q "registering again" "$log" && fail "$RUN: w1 registered again: $(grep -i 'registering again' "$log")"
  joins=$($RCLI XRANGE "dl:{$RUN}:events" - + | grep -c '^join$')
  [ "$joins" = 1 ] || fail "$RUN: $joins registrations, want 1"
  say "$RUN: failed, completed, failed again: two streaks of 1, one incarnation"
  kill $SRV_s0
done
