#!/bin/sh
# it_group_stop.sh: a stop asked of ONE rank of a process group (diloco_request_stop: what a signal to that
# process or Python's dl.stop() does) stops every rank after the same inner step, and the group leaves the
# run, which goes on without it. The ranks of a node train data-parallel (DDP's allreduce every step), so a
# rank that stopped alone left the others in their next collective: the group hung (a C group), or its
# other ranks died in their next allreduce (a PyTorch group; tests/it_python_gpt_group.sh's SIGTERM to a node
# failed that way when its two ranks stopped one step apart). Now every collective's message says whether
# its rank was asked (group.c agree_stop), and from the first one that says so diloco_stop_requested is
# non-zero on every rank after the same step, a round under way ending on every rank.
# A sync run: a group g1 of 2 ranks (tests/tools/group_worker --steps 0 --stop-rank R --stop-step N) beside a
# bin/worker w2; H = 10 (rank 1 asked after step 23, mid-interval: the ranks agree at a CHECK); H = 1000
# (rank 0 asked; only CHECKs); Streaming (rounds in flight on the ranks' threads); async Streaming; heartbeats
# 30 s apart (a CHECK at least once a second: the group stops within 4 s, where it took up to 15 s). Then
# rank 1 asked while the group waits at a barrier that cannot close (w2 SIGSTOPped; --stop-file: from
# another thread, as a signal handler would): its wait ends, it leaves, which ends rank 0's wait, and the
# group stops within 5 s. Checks: the group exits 0 (a round a stop ended is no error), both ranks stopped
# after the same step (not before the one asked), rank 0 says why, the group is no member, and w2 syncs
# twice more alone (H = 10) and exits 0 at the run's shutdown. Last, rank 1 asked while the group joins (both
# ranks waiting for an open round that cannot close): diloco_open returns DILOCO_STOPPED on both ranks, each
# saying the join was stopped, the group exits 0, and nothing of it stays in the run (rank 0 waited at the
# first FETCH for good before).
# test: light (it waits more than it computes: 6 s of CPU in 18 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
start_redis
stopped_together() { # RUN ASKED_RANK FIRST_STEP: both ranks stopped after one step >= FIRST_STEP, and why
  group_stopped_together "$TMP/g1-$1.out" "$1"
  [ "$s0" -ge "$3" ] || fail "$1: the ranks stopped after step $s0, before rank $2 was asked (after step $3)"
  grep -q "rank $2 was asked to stop: every rank of the group stops after this inner step" "$TMP/group-g1-$1.log" ||
    fail "$1: rank 0 did not say why the group stops: $(tail -n 5 "$TMP/group-g1-$1.log")"
  [ "$($RCLI HEXISTS "dl:{$1}:workers" g1)" = 0 ] || fail "$1: the stopped group is still a member of the run"
}
goes_on_alone() { # RUN H: w2 syncs twice more without the group (H < 100), then the run is shut down and w2 exits 0
  n=$(grep -c '"event":"sync"' "$TMP/w2.jsonl")
  [ "$2" -ge 100 ] || wait_until 20 '[ "$(grep -c "\"event\":\"sync\"" "$TMP/w2.jsonl")" -ge $((n + 2)) ]' "$1: w2 to sync twice more alone"
  bin/coordinator control --redis "$URL" --run "$1" shutdown > "$TMP/shutdown-$1.log" 2>&1 || fail "shutdown: $(cat "$TMP/shutdown-$1.log")"
  wait_workers w2
}
stop_run() { # RUN H RANK STEP [INIT FLAGS...]: rank RANK of g1 asked to stop after its inner step STEP
  RUN=$1; h=$2; rank=$3; at=$4; shift 4
  init_run $RUN --trainer quadratic --numel 8000 --shards 4 --workers 2 --seed 3 "$@"
  start_server "a$RUN" --lease-ttl-ms 2000
  build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps 0 --sync-every $h \
    --heartbeat-ms 300 --step-delay-ms 5 --stop-rank $rank --stop-step $at > "$TMP/g1-$RUN.out" 2> "$TMP/group-g1-$RUN.log" &
  G=$!; PIDS="$PIDS $!"
  start_worker w2 --sync-every $h --steps 0 --heartbeat-interval 0.3 --step-delay-ms 5
  wait_until 30 '! kill -0 $G 2>/dev/null' "$RUN: the group to stop after rank $rank was asked"
  wait "$G" || fail "$RUN: the group exited with status $?: $(grep -v '^sync' "$TMP/g1-$RUN.out")"
  stopped_together $RUN $rank $at
  goes_on_alone $RUN $h
  say "$RUN, H = $h${1:+ ($*)}: rank $rank asked to stop after step $at; both ranks stopped after step $s0, the group left, w2 went on"
}
stop_run gstop 10 1 23
stop_run gstopcheck 1000 0 50
stop_run gstopstream 10 1 23 --fragments 2
stop_run gstopasync 10 0 23 --async --fragments 2

# with heartbeats 30 s apart (the Python package's default) and no sync for 1000 s of steps, the ranks agree
# at a CHECK, which comes at least once a second (half a heartbeat interval, 15 s, before): rank 1 asked from
# another thread, the group stops within 4 s
RUN=gstopbeat
init_run $RUN --trainer quadratic --numel 8000 --shards 4 --workers 1 --seed 3 --heartbeat-timeout 120
start_server "a$RUN" --lease-ttl-ms 2000
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps 0 --sync-every 200000 \
  --heartbeat-ms 30000 --step-delay-ms 5 --stop-rank 1 --stop-file "$TMP/stopbeat" > "$TMP/g1-$RUN.out" 2> "$TMP/group-g1-$RUN.log" &
G=$!; PIDS="$PIDS $!"
wait_until 30 '[ "$(grep -c "joined run" "$TMP/group-g1-$RUN.log")" -ge 2 ]' "the group to join"
sleep 2
touch "$TMP/stopbeat"
t0=$(date +%s%N)
wait_until 4 '! kill -0 $G 2>/dev/null' "the group to stop within 4 s of rank 1's stop (heartbeats 30 s apart)"
wait "$G" || fail "$RUN: the group exited with status $?: $(grep -v '^sync' "$TMP/g1-$RUN.out")"
stopped_together $RUN 1 1
say "heartbeats 30 s apart: rank 1 asked, both ranks stopped after step $s0, $(( ($(date +%s%N) - t0) / 1000000 )) ms later"

# rank 1 asked while the group waits at a barrier that cannot close (w2 stopped; the reaper would take 30 s)
RUN=gstopwait
init_run $RUN --trainer quadratic --numel 8000 --shards 4 --workers 2 --seed 3 --heartbeat-timeout 30
start_server "a$RUN" --lease-ttl-ms 2000
start_worker w2 --sync-every 10 --steps 0 --heartbeat-interval 0.3 --step-delay-ms 20
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps 0 --sync-every 10 \
  --heartbeat-ms 300 --step-delay-ms 5 --stop-rank 1 --stop-file "$TMP/stop" > "$TMP/g1-$RUN.out" 2> "$TMP/group-g1-$RUN.log" &
G=$!; PIDS="$PIDS $!"
wait_until 30 '[ "$(grep -c "^sync rank 0 " "$TMP/g1-$RUN.out")" -ge 2 ]' "2 syncs of the group"
eval "kill -STOP \$WRK_w2"
round=$($RCLI HGET "dl:{$RUN}:state" round:0)
wait_until 10 '[ "$($RCLI HEXISTS "dl:{$RUN}:f0:r$round" a:g1)" = 1 ]' "the group to wait at round $round"
steps=$(grep -c "^sync rank 0 " "$TMP/g1-$RUN.out")
touch "$TMP/stop"
t0=$(date +%s)
wait_until 5 '! kill -0 $G 2>/dev/null' "the group, waiting at round $round, to stop after rank 1 was asked"
wait "$G" || fail "$RUN: the group exited with status $?: $(grep -v '^sync' "$TMP/g1-$RUN.out")"
stopped_together $RUN 1 $((steps * 10))
eval "kill -CONT \$WRK_w2"
goes_on_alone $RUN 10
say "rank 1 asked while the group waited at round $round: both ranks stopped after step $s0 within $(( $(date +%s) - t0 )) s, the group left, w2 went on"

# rank 1 asked while the group joins: both ranks wait, as joiners, for an open round that cannot close (w2
# stopped mid-round); rank 1's wait ends, it leaves, rank 0 finds the group gone, and the join ends on both
# ranks at the same collective (READY) as a stop (DILOCO_STOPPED), instead of rank 0 waiting at the first
# FETCH for a rank that gave up
RUN=gstopjoin
init_run $RUN --trainer quadratic --numel 8000 --shards 4 --workers 1 --seed 3 --heartbeat-timeout 30
start_server "a$RUN" --lease-ttl-ms 2000
n=$(grep -c '"event":"sync"' "$TMP/w2.jsonl")
start_worker w2 --sync-every 10 --steps 0 --heartbeat-interval 0.3 --step-delay-ms 20
wait_until 30 '[ "$(grep -c "\"event\":\"sync\"" "$TMP/w2.jsonl")" -ge $((n + 2)) ]' "w2 to sync twice"
eval "kill -STOP \$WRK_w2"
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps 0 --sync-every 10 \
  --heartbeat-ms 300 --stop-rank 1 --stop-file "$TMP/stopjoin" > "$TMP/g1-$RUN.out" 2> "$TMP/group-g1-$RUN.log" &
G=$!; PIDS="$PIDS $!"
wait_until 20 '[ "$($RCLI HEXISTS "dl:{$RUN}:workers" g1)" = 1 ]' "the group to register"
sleep 0.5
kill -0 $G 2>/dev/null || fail "the group did not wait for the open round: $(cat "$TMP/g1-$RUN.out")"
touch "$TMP/stopjoin"
t0=$(date +%s)
wait_until 15 '! kill -0 $G 2>/dev/null' "the joining group to give up after rank 1 was asked to stop"
wait "$G" || fail "the group whose join was stopped exited with status $?: $(cat "$TMP/g1-$RUN.out")"
for r in 0 1; do
  grep -q "^stopped rank $r while joining: stopped while the group joined the run (rank 1 was asked to stop)" \
    "$TMP/g1-$RUN.out" || fail "rank $r did not say the group's join was stopped: $(cat "$TMP/g1-$RUN.out")"
done
[ "$($RCLI HEXISTS "dl:{$RUN}:workers" g1)" = 0 ] || fail "the group that gave up joining is still a member"
eval "kill -CONT \$WRK_w2"
goes_on_alone $RUN 10
say "rank 1 asked while the group waited to join: both ranks stopped joining within $(( $(date +%s) - t0 )) s, nothing left in the run, w2 went on"
