#!/bin/sh
# it_stream_lost_tentative.sh: a Streaming round that a worker got tentatively from an owner that died before
# its commit does not stall the run. Streaming, 2 fragments (one shard each), workers w1 and w2 (sync timeout
# 30 s). The only shard-server serves versions tentatively to w1 alone and dies before any commit
# (--fault-tentative-to w1); a plain server takes over (a new epoch, version 0) and needs w1's and w2's
# pseudo-gradients of fragment 0's round 0 again. w1 got that round tentatively and went on to fragment 1's
# round, at whose barrier it waits for w2; w2's get of fragment 0 waits for w1's Δ. w1 used to send it only
# with a get of fragment 0, which comes after that barrier: the two waited for each other until w2's syncs
# timed out (with the default 120 s, about 8 minutes; seen once in it_tsan_worker, past its 600 s limit).
# Now fragment 0's tail thread keeps watching the shard it holds tentatively and sends the kept Δ to the new
# owner (worker/diloco/sync.c, sync_confirm_watch). Checks: w1 says so, neither worker failed a sync, both
# end their 40 steps (exit 0) well within one sync timeout of the new owner's start, and the run went on past
# the round. Run twice: with bin/worker, and with the workers built under ThreadSanitizer (build/tsan/bin/worker,
# as it_tsan_worker; a report makes a worker exit 66), as the tail's look runs beside the training thread and
# the next fragment's round.
. "$(dirname "$0")/lib.sh"
start_redis

# lost_tentative RUN: the scenario above, in run RUN, with $WORKER's workers
lost_tentative() {
  RUN=$1
  init_run $RUN --trainer quadratic --numel 4000 --shards 2 --fragments 2 --workers 2 --seed 5
  start_server bad --lease-ttl-ms 1000 --fault-tentative-to w1
  wait_until 10 '[ "$($RCLI HGET "dl:{$RUN}:shards" 0:owner)" = bad ] && [ "$($RCLI HGET "dl:{$RUN}:shards" 1:owner)" = bad ]' \
    "the fault-injected server to hold both shards"
  for w in w1 w2; do start_worker $w --sync-every 10 --steps 40 --heartbeat-interval 1 --step-delay-ms 20 --sync-timeout 30; done
  wait_until 20 '! alive $SRV_bad' "the fault-injected server to die (w1 got a version tentatively)"
  start_server good --lease-ttl-ms 1000
  t0=$(date +%s)
  wait_until 20 '! alive $WRK_w1 && ! alive $WRK_w2' \
    "both workers to end their 40 steps (a stall: each waits for the other until a 30 s sync timeout)"
  wait_workers w1 w2
  grep -q "our pseudo-gradient goes to the new owner" "$TMP/worker-w1.log" ||
    fail "w1 did not send its kept pseudo-gradient to the new owner"
  grep -q "sync failed" "$TMP/worker-w1.log" "$TMP/worker-w2.log" &&
    fail "a sync failed: $(grep -h 'sync failed' "$TMP/worker-w1.log" "$TMP/worker-w2.log" | head -n 3)"
  v0=$($RCLI HGET "dl:{$RUN}:shards" 0:version)
  [ "$v0" -ge 2 ] || fail "fragment 0's shard is at version $v0"
  say "${WORKER:-bin/worker}: w1 resent its pseudo-gradient from fragment 0's tail; both workers ended their 40 steps $(( $(date +%s) - t0 )) s after the new owner came (fragment 0 at version $v0)"
}

lost_tentative losttent
WORKER=build/tsan/bin/worker
[ -x "$WORKER" ] || fail "build first: make tests-build (builds $WORKER)"
lost_tentative losttsan
