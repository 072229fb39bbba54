#!/bin/sh
# it_group_shutdown.sh: `coordinator control shutdown` stops a process group cleanly. Each rank's heartbeat is
# told of the shutdown at its own moment, but the ranks must stop at the same inner step: a rank that stopped
# on its own heartbeat's word left the others waiting at their next collective (a C group hung; a PyTorch
# group is open to the same, until gloo's timeout). Now every collective's message says whether its rank's
# heartbeat was told (group.c agree_stop), and from the first one that says so every rank's
# diloco_stop_requested is true, after the same step. A sync run, a group g1 of 2 ranks (tests/tools/group_worker
# --steps 0: until the run is shut down) and a bin/worker w2; once the group synced 3 times, the run is shut down; then
# with H = 1000, where no sync comes before the stop (the ranks agree at a CHECK, every few steps); then
# a Streaming run and an async one (2 fragments: the rounds on the ranks' threads). And a worker waiting at a
# barrier for a SIGSTOPped group stops within 5 s of the shutdown (barrier waits end on it). Checks:
# the group exits 0 within 10 s, both ranks stopped after the same step, and w2 exits 0 (a worker of one
# process whose round is refused with SHUTDOWN before its heartbeat is told stops too: it counted 4 failed
# syncs at this pace and exited 1). Then the same with
# a PyTorch group of 2 (tests/python/group_quad.py, DDP on gloo, STEPS 0: until dl.stopping) beside a
# bin/worker: both ranks leave their loop after the same step and the launcher exits 0 (skipped, saying
# so, where torch does not import). (Without the agreement the C part hangs; the PyTorch part passed once
# anyway: its ranks' heartbeats, started together and held in step by DDP, were told in the same step.)
. "$(dirname "$0")/lib.sh"
start_redis
shut_run() { # RUN H [INIT FLAGS...]
  RUN=$1; h=$2; shift 2
  init_run $RUN --trainer quadratic --numel 8000 --shards 4 --workers 2 --seed 3 "$@"
  start_server "a$RUN" --lease-ttl-ms 2000
  build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps 0 --sync-every $h \
    --heartbeat-ms 300 --step-delay-ms 5 > "$TMP/g1-$RUN.out" 2> "$TMP/group-g1-$RUN.log" &
  G=$!; PIDS="$PIDS $!"
  start_worker w2 --sync-every $h --steps 0 --heartbeat-interval 0.3 --step-delay-ms 5
  if [ "$h" -lt 100 ]; then
    wait_until 30 '[ "$(grep -c "^sync rank 0 " "$TMP/g1-$RUN.out")" -ge 3 ]' "3 syncs of the group"
  else
    wait_until 30 '[ "$(grep -c "joined run" "$TMP/group-g1-$RUN.log")" -ge 2 ]' "the group to join"; sleep 1
  fi
  bin/coordinator control --redis "$URL" --run $RUN shutdown > "$TMP/shutdown-$RUN.log" 2>&1 || fail "shutdown: $(cat "$TMP/shutdown-$RUN.log")"
  t0=$(date +%s)
  wait_until 10 '! kill -0 $G 2>/dev/null' "the group to stop after the shutdown"
  wait "$G" || fail "$RUN: the group exited with status $?: $(grep -v '^sync' "$TMP/g1-$RUN.out")"
  group_stopped_together "$TMP/g1-$RUN.out" $RUN
  grep -q "the run was shut down (rank [01]'s heartbeat was told): every rank of the group stops after this inner step" \
    "$TMP/group-g1-$RUN.log" || fail "$RUN: rank 0 did not say why the group stops: $(tail -n 5 "$TMP/group-g1-$RUN.log")"
  wait_workers w2
  say "$RUN, H = $h${1:+ ($*)}: shut down; both ranks of the group stopped after inner step $s0, within $(( $(date +%s) - t0 )) s; w2 too"
}
shut_run gshut 10
shut_run gshutcheck 1000
shut_run gshutstream 10 --fragments 2
shut_run gshutasync 10 --async --fragments 2

# a member waiting at a barrier that cannot close (the group, SIGSTOPped, never arrives; the reaper would take
# 30 s to evict it) stops at once too: barrier waits end on the shutdown (a group's rank arrived before the
# shutdown waited there for its other rank, refused after it, and hung the group under load)
RUN=gshutwait
init_run $RUN --trainer quadratic --numel 8000 --shards 4 --workers 2 --seed 3 --heartbeat-timeout 30
start_server "a$RUN" --lease-ttl-ms 2000
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps 0 --sync-every 10 \
  --heartbeat-ms 300 --step-delay-ms 20 > "$TMP/g1-$RUN.out" 2> "$TMP/group-g1-$RUN.log" &
G=$!; PIDS="$PIDS $!"
start_worker w1 --sync-every 10 --steps 0 --heartbeat-interval 0.3 --step-delay-ms 5
wait_until 30 '[ "$(grep -c "^sync rank 0 " "$TMP/g1-$RUN.out")" -ge 2 ]' "2 syncs of the group"
kill -STOP $G
round=$($RCLI HGET "dl:{$RUN}:state" round:0)
wait_until 10 '[ "$($RCLI HEXISTS "dl:{$RUN}:f0:r$round" a:w1)" = 1 ]' "w1 to wait at round $round"
bin/coordinator control --redis "$URL" --run $RUN shutdown > "$TMP/shutdown-$RUN.log" 2>&1 || fail "shutdown"
eval "pid=\$WRK_w1"
wait_until 5 '! kill -0 $pid 2>/dev/null' "w1, waiting at round $round, to stop after the shutdown"
wait_workers w1
grep -q "the run was shut down while we waited for round $round" "$TMP/worker-w1.log" ||
  fail "w1 did not say it stopped waiting: $(tail -n 5 "$TMP/worker-w1.log")"
kill -CONT $G
wait_until 10 '! kill -0 $G 2>/dev/null' "the group to stop once resumed"
wait "$G" || fail "the resumed group exited with status $?: $(grep -v '^sync' "$TMP/g1-$RUN.out")"
group_stopped_together "$TMP/g1-$RUN.out" $RUN
say "w1, waiting at round $round for a stopped group, stopped within 5 s of the shutdown; the group, resumed, after step $s0 on both ranks"

$PYTHON -c 'import torch, numpy' 2>/dev/null || { say "SKIP of the PyTorch part: $PYTHON cannot import torch and numpy"; exit 0; }
RUN=gshutpy
init_run $RUN --trainer quadratic --numel 8000 --shards 4 --workers 2 --seed 3
start_server "a$RUN" --lease-ttl-ms 2000
$PYTHON tests/python/group_quad.py "$URL" $RUN p1 0 10 --ranks 2 --numel 8000 --seed 3 --step-delay 0.005 \
  --heartbeat 0.3 --out "$TMP/p1" > "$TMP/launcher.log" 2>&1 &
G=$!; PIDS="$PIDS $!"
start_worker w2 --sync-every 10 --steps 0 --heartbeat-interval 0.3 --step-delay-ms 5
wait_until 60 '[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -ge 3 ]' "3 rounds with the PyTorch group"
bin/coordinator control --redis "$URL" --run $RUN shutdown > "$TMP/shutdown-$RUN.log" 2>&1 || fail "shutdown"
wait_until 20 '! kill -0 $G 2>/dev/null' "the PyTorch group to stop after the shutdown"
wait "$G" || fail "the PyTorch group's launcher exited with status $?: $(tail -n 20 "$TMP/launcher.log")"
p0=$(sed -n 's/^stopped //p' "$TMP/p1.rank0"); p1=$(sed -n 's/^stopped //p' "$TMP/p1.rank1")
[ -n "$p0" ] && [ "$p0" = "$p1" ] || fail "the PyTorch ranks stopped after steps '$p0' and '$p1': $(tail -n 20 "$TMP/launcher.log")"
wait_workers w2
say "PyTorch: shut down; both ranks of the group left their loop after inner step $p0; w2 too"
