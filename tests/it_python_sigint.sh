#!/bin/sh
# it_python_sigint.sh: Ctrl-C (SIGINT) or SIGTERM ends a PyTorch worker cleanly, even while it waits
# inside libdiloco at a barrier (the package turns the signal into diloco_request_stop from its signal
# thread: the wait gives up at once): the `with rediloco.DiLoCo(...)` block ends, the worker leaves the
# run (deregistered), the code after the block runs with the previous SIGINT handler back, exit status 0.
#  A. SIGINT while waiting at the barrier for a second worker that is still far from it;
#  B. SIGTERM to that second worker in the middle of its inner steps;
#  C. SIGINT while joining a run that has no shard-server yet (diloco_open waiting for its parameters): the
#     `with` statement raises rediloco.Stopped, as a stop in training does (not a DiLoCoError "cannot join
#     run ...: stopped", as it did), the handler is restored and the worker is deregistered.
. "$(dirname "$0")/lib.sh"
RUN=pysig; NUMEL=20000
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 2 --workers 2
start_server s1
py() { # NAME H [RUN]: a PyTorch worker that would train for a long time
  $PYTHON tests/python/quad_worker.py "$URL" "${3:-$RUN}" "$1" 100000 "$2" --numel $NUMEL --seed 0 --step-delay 0.01 \
    > "$TMP/py-$1.log" 2>&1 &
  PY=$!; PIDS="$PIDS $PY"
}
ends_within() { # PID SECONDS WHAT
  end=$(( $(date +%s) + $2 ))
  while alive "$1"; do [ "$(date +%s)" -ge "$end" ] && fail "$3 still running $2 s after the signal"; sleep 0.1; done
  wait "$1" || fail "$3 exited with status $? after the signal"
}

# p1 (H=10) soon waits at round 0's barrier for p2, which trains (H=1000) all the while
py p1 10; P1=$PY
py p2 1000; P2=$PY
wait_until 30 '$RCLI HEXISTS "dl:{$RUN}:f0:r0" a:p1 | grep -q 1' "p1 to wait at round 0's barrier"
wait_until 30 '$RCLI HEXISTS "dl:{$RUN}:workers" p2 | grep -q 1' "p2 to register"
sleep 1
t0=$(date +%s%N)
kill -INT "$P1"
ends_within "$P1" 5 "the worker waiting at the barrier"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
grep -q "left the run at step 10 (stopped by SIGINT); SIGINT handler restored: True" "$TMP/py-p1.log" \
  || fail "A: $(tail -n 3 "$TMP/py-p1.log")"
[ "$($RCLI HEXISTS "dl:{$RUN}:workers" p1)" -eq 0 ] || fail "A: p1 is still registered"
say "A: SIGINT at the barrier: out in $ms ms, deregistered, handler restored"

alive "$P2" || fail "B: p2 ended before its signal: $(tail -n 3 "$TMP/py-p2.log")"
kill -TERM "$P2"
ends_within "$P2" 5 "the training worker"
grep -q "(stopped by SIGTERM); SIGINT handler restored: True" "$TMP/py-p2.log" || fail "B: $(tail -n 3 "$TMP/py-p2.log")"
[ "$($RCLI HEXISTS "dl:{$RUN}:workers" p2)" -eq 0 ] || fail "B: p2 is still registered"
say "B: SIGTERM mid-training: $(grep 'left the run' "$TMP/py-p2.log")"

# C. a run with no shard-server: p3 registers, then waits in diloco_open for the run's parameters
init_run pysig_c --trainer quadratic --numel $NUMEL --shards 2 --workers 1
py p3 10 pysig_c; P3=$PY
wait_until 30 '$RCLI HEXISTS "dl:{pysig_c}:workers" p3 | grep -q 1' "p3 to register"
sleep 1
kill -INT "$P3"
ends_within "$P3" 5 "the worker joining"
grep -q "stopped while joining (stopped by SIGINT); SIGINT handler restored: True" "$TMP/py-p3.log" \
  || fail "C: $(tail -n 5 "$TMP/py-p3.log")"
[ "$($RCLI HEXISTS "dl:{pysig_c}:workers" p3)" -eq 0 ] || fail "C: p3 is still registered"
say "C: SIGINT while joining: rediloco.Stopped from the with statement, deregistered, handler restored"
