#!/bin/sh
# it_async_need_pause.sh: an async worker whose get is answered `need <itself>` for an earlier place of its
# own, which it can never fill, registers again at once, which makes that place a no-op and ends the stall
# of the shard's order for every worker.
# The stall: w1 talks to Redis through tests/tools/drop_proxy.py, which loses the reply of every try of its
# 3rd dl_submit (5 tries, each sent twice: 10 writes). The first try ran and gave the submission its places;
# the worker, with no reply, trains on and its 4th submission takes the next places. Its get of those is
# answered `need w1` for the 3rd's place, which nobody will push: the shard's order waits there, and so do
# the submissions of w2 (direct to Redis, --sync-timeout 30 s so that it waits the stall out). The
# shard-server's `need` reply carries the round it lacks (shard-server/commit_obj.c); the worker pushes only
# its own (worker/diloco/fanout.c, get_job) and, for an earlier place, registers again now (round.c,
# on_failure). Before, every `need` sent the Δ again and asked at once with no look at the deadline (a loop
# without end: 2.7 million pushes in 10 minutes); then w1 only paused, and registered after
# --max-sync-retries 2 + 1 failed syncs (the lost dl_submit, then two of --sync-timeout 10 s each): w2's
# longest sync was ~22 s.
# Asserts: both finish their steps; the longest sync of w2 stays well under w1's sync timeout (under 4 s:
# the ~1.5 s of w1's dl_submit tries, whose replies are lost, then the stall itself, ~25 ms); w1 says why
# and registered again at its second failed sync (the first is the lost dl_submit); each place was
# committed once and only the lost one is a no-op (the Δ w1 had pushed to its own place before it
# registered again is applied); the server took a handful of pushes, not thousands.
. "$(dirname "$0")/lib.sh"
H=10; STEPS=60; W1_TIMEOUT=10; W2_MAX=4
start_redis
# stall_run RUN "COMMITS NOOPS" INIT_ARGS...: the stall in a run made with INIT_ARGS; the server committed COMMITS
# versions, NOOPS of them no-ops
stall_run() {
  RUN=$1; want_commits=$2; shift 2
  rm -f "$TMP/w1.jsonl" "$TMP/w2.jsonl"
  init_run $RUN --async --trainer quadratic --numel 20000 --workers 2 "$@"
  start_server s0
  drop_proxy w1 "$PORT" --match dl_submit --skip 2 --drops 10 --lose reply
  direct=$URL; URL=redis://127.0.0.1:$PPORT_w1
  start_worker w1 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 2 --sync-timeout $W1_TIMEOUT \
    --max-sync-retries 2
  URL=$direct
  start_worker w2 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 5 --sync-timeout 30
  wait_until 40 "! alive $WRK_w1 && ! alive $WRK_w2" "w1 and w2 to finish $STEPS steps"
  wait_workers w1 w2
  kill $SRV_s0; wait $SRV_s0
  [ "$(grep -c "lost the reply" "$TMP/proxy-$RUN-w1.log")" = 10 ] || fail "$RUN: the proxy did not lose 10 replies"
  longest=$(grep '"event":"sync"' "$TMP/w2.jsonl" | sed 's/.*"seconds":\([0-9.e+-]*\).*/\1/' | sort -g | tail -n 1 |
    awk '{ printf "%.2f", $1 }')
  [ -n "$longest" ] || fail "$RUN: no sync in w2's log"
  awk -v s="$longest" -v m=$W2_MAX 'BEGIN { exit !(s < m) }' ||
    fail "$RUN: w2's longest sync took $longest s, want < $W2_MAX s (the order stalled until w1's sync timeouts)"
  log="$TMP/worker-w1.log"
  grep -q "an earlier place than ours" "$log" || fail "$RUN: w1 did not say that the owner waits for an earlier place"
  grep -q "registering again now" "$log" || fail "$RUN: w1 did not register again at once"
  fails=$(grep -c "sync failed" "$log")
  [ "$fails" = 2 ] || fail "$RUN: w1 failed $fails syncs, want 2 (the lost dl_submit, then the first \`need\`)"
  joins=$($RCLI XRANGE "dl:{$RUN}:events" - + | grep -c '^join$')
  [ "$joins" = 3 ] || fail "$RUN: $joins registrations, want 3 (w1 twice, w2)"
  # 12 places per shard (6 submissions of each worker), and one no-op each: the lost submission's place. The
  # Δ w1 pushed to its next place, before it registered again, is applied all the same (not a second no-op).
  commits=$(sed -n 's/.*metrics:.* rounds committed \([0-9]*\) (no-op \([0-9]*\)).*/\1 \2/p' "$TMP/server-s0.log" |
    tail -n 1)
  [ "$commits" = "$want_commits" ] ||
    fail "$RUN: commits (no-ops): '$commits', want '$want_commits' (each place once, only the lost one a no-op)"
  pushes=$(sed -n 's/.*metrics:.* pushes \([0-9]*\),.*/\1/p' "$TMP/server-s0.log" | tail -n 1)
  [ -n "$pushes" ] || fail "$RUN: no metrics line in the server's log"
  # one per place but the lost ones, a few resends where a `need` asked for our own round; thousands before
  [ "$pushes" -le $((${want_commits% *} + 16)) ] ||
    fail "$RUN: the server took $pushes pushes, want at most 16 more than places"
  say "$RUN: the stalled order ended at once: w1 registered again at its 2nd failed sync, w2's longest sync" \
    "$longest s (w1's sync timeout $W1_TIMEOUT s), $pushes pushes in all"
}

stall_run stall "24 2" --shards 2
# Streaming (2 fragments of 2 shards): the lost submission is of fragment 0, whose 2 shards stall; before, w1
# never registered again at all, since fragment 1's syncs succeeded in between and the failures were never in
# a row (4 failed syncs "1 in a row", 10 s each: fragment 0's order stalled until w1 left, 11.5 s for w2)
# 46 commits: 12 submissions of w2 and 11 of w1, 2 shards each; the boundary at which w1 registered again sends
# nothing (before 29 November it sent the next fragment's zero Δ there: 48, it_async_reregister_replay.sh)
stall_run stream "46 2" --shards 4 --fragments 2
