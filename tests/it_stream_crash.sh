#!/bin/sh
# it_stream_crash.sh: Streaming DiLoCo while shard-servers die (it_sync_crash's storm): 4 fragments of 2
# shards, a process group g1 of 2 ranks (tests/tools/group_worker: each rank's round of its part of a fragment
# on its thread, the ranks agreeing at the boundaries) and 2 single workers, H = 20 (a fragment every 5 steps,
# its round on a background thread while training goes on); the harness kill -9s a random server every 1 to
# 1.5 s and starts a new one, and every server also kills itself in 10% of its commits between the log write
# and dl_commit. Every fragment's round is a pure function of the previous version and the frozen
# pseudo-gradients, which workers keep and resend to a new owner (also from a fragment's tail while the worker
# is at another fragment's round: the crossing it_stream_lost_tentative makes exactly, which the storm makes
# only by chance; tentative resends are counted: 0 to 19 in eight runs). The final parameters must be
# bit-identical to the fault-free reference of the fragment schedule, and no sync may fail. (Until now no test
# killed servers under Streaming but it_tsan_worker's single kill.)
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
RUN=scrash; NUMEL=80000; SEED=23; H=20; STEPS=240
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --fragments 4 --workers 3 --seed $SEED --snapshot-every 3
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps $STEPS --sync-every $H \
  --heartbeat-ms 1000 --step-delay-ms 25 > "$TMP/g1.out" 2> "$TMP/worker-g1.log" &
WRK_g1=$!; PIDS="$PIDS $!"
for w in w2 w3; do start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 25; done
crash_storm g1 w2 w3
[ "$KILLS" -ge 5 ] || fail "only $KILLS kills happened: the test proved too little"
grep -h "sync failed\|did not complete for the group" "$TMP"/worker-*.log | head -n 3 | grep . &&
  fail "a sync failed under the storm"
quad_ref $RUN g1,w2,w3 --steps $STEPS --alpha 0 --frag-bounds "$($RCLI HGET "dl:{$RUN}:config" frag_bounds)"
resent=$(grep -c "goes to the new owner" "$TMP"/worker-*.log | awk -F: '{n += $2} END {print n + 0}')
say "bit-identical to the fault-free reference after $STEPS steps ($(shard_versions $RUN) versions per shard; $resent tentative resends)"
