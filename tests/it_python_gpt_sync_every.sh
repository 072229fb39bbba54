#!/bin/sh
# it_python_gpt_sync_every.sh: the PyTorch GPT example (python3 -m rediloco.examples.gpt) warns at start
# when --sync-every is larger than --steps, as bin/worker does, pointing to --final-sync:
#   - --steps 3 --sync-every 5: the warning, and the run stays at version 0 (the worker sent nothing);
#   - the same with --final-sync: no warning, and the worker syncs once after its last step (version 1);
#   - --steps 3 --sync-every 3: no warning (the last step syncs).
# And what a user meets restarting it (the run exists by then):
#   - the documented command again, --init-run included, joins the run as it is (it replaced it, progress lost);
#     --force-init replaces it (version 0 again);
#   - other model flags than the run's, an unknown run (also from a node of --ranks 2: its ranks printed
#     tracebacks), a missing --data file, --sync-every 0: one line each
#     (no traceback), status 1 (2 for the flags);
#   - SIGINT mid-training: "stopped after N steps (SIGINT): left run R", status 0.
. "$(dirname "$0")/lib.sh"
prepare_bible
MODEL="--layers 1 --heads 2 --dim 32 --ctx 32"
COMMON="--batch 2 --seq 16 --warmup 1 --steps 3 --eval-every 0 --threads 1 --data build/kjv.tok"
EX="env PYTHONPATH=python $PYTHON -m rediloco.examples.gpt"
WARN="WARN --sync-every 5 is more than --steps 3: this worker would stop before its first sync and send nothing (the run does not move); lower --sync-every, or add --final-sync"
start_redis
RUN=gse
$EX --redis "$URL" --run $RUN $MODEL $COMMON --sync-every 5 --init-run --workers 1 --shards 1 --worker-id w1 \
  > "$TMP/w1.log" 2>&1 &
P=$!; PIDS="$PIDS $P"
wait_until 60 '$RCLI EXISTS "dl:{$RUN}:config" | grep -q 1' "the example to create the run"
start_server s1
wait $P || fail "the worker exited with status $?: $(tail -n 5 "$TMP/w1.log")"
grep -qF "$WARN" "$TMP/w1.log" || fail "no warning for --sync-every 5 > --steps 3: $(head -n 3 "$TMP/w1.log")"
grep -q "^worker w1: 3 steps, version 0," "$TMP/w1.log" || fail "the run moved without a sync: $(tail -n 2 "$TMP/w1.log")"

$EX --redis "$URL" --run $RUN $MODEL $COMMON --sync-every 5 --final-sync --worker-id w2 > "$TMP/w2.log" 2>&1 \
  || fail "--final-sync: exit $?: $(tail -n 5 "$TMP/w2.log")"
grep -q "WARN --sync-every" "$TMP/w2.log" && fail "--final-sync still warned: $(grep WARN "$TMP/w2.log")"
grep -q "^worker w2: 3 steps, version 1," "$TMP/w2.log" || fail "--final-sync did not sync: $(tail -n 2 "$TMP/w2.log")"

# the boundary, from the argument parsing alone: H equal to the steps syncs at the last step
env PYTHONPATH=python $PYTHON -c 'from rediloco.examples.gpt import parse
parse(["--redis", "redis://x", "--run", "r", "--data", "d", "--steps", "3", "--sync-every", "3"])' > "$TMP/w3.log" 2>&1 \
  || fail "parse: $(cat "$TMP/w3.log")"
[ ! -s "$TMP/w3.log" ] || fail "--sync-every 3 --steps 3 warned: $(cat "$TMP/w3.log")"
say "gpt example: --sync-every 5 > --steps 3 warns and the run stays at v0; --final-sync: no warning, v1; H=3: no warning"

# the same command again (--init-run) joins the run at its version 1 and syncs it to 2
$EX --redis "$URL" --run $RUN $MODEL $COMMON --sync-every 3 --init-run --workers 1 --shards 1 --worker-id w4 \
  > "$TMP/w4.log" 2>&1 || fail "--init-run on an existing run: exit $?: $(tail -n 5 "$TMP/w4.log")"
grep -q "^run $RUN exists: joining it as it is (--force-init replaces it)$" "$TMP/w4.log" \
  || fail "--init-run did not say it joins the existing run: $(head -n 5 "$TMP/w4.log")"
grep -q "^worker w4: 3 steps, version 2," "$TMP/w4.log" || fail "--init-run replaced the run: $(tail -n 2 "$TMP/w4.log")"
$EX --redis "$URL" --run $RUN $MODEL $COMMON --sync-every 5 --force-init --workers 1 --shards 1 --worker-id w5 \
  > "$TMP/w5.log" 2>&1 || fail "--force-init: exit $?: $(tail -n 5 "$TMP/w5.log")"
grep -q "^worker w5: 3 steps, version 0," "$TMP/w5.log" || fail "--force-init did not replace the run: $(tail -n 2 "$TMP/w5.log")"
say "gpt example: --init-run on an existing run joins it (v1 -> v2); --force-init replaces it (v0)"

one_line() { # STATUS LOG WORDS...: the example exited with STATUS, saying WORDS in one line, no traceback
  want=$1; log=$2; shift 2
  grep -q Traceback "$log" && fail "a traceback: $(cat "$log")"
  for w in "$@"; do grep -qF -- "$w" "$log" || fail "no '$w' in: $(cat "$log")"; done
  [ "$got" = "$want" ] || fail "exit status $got, want $want: $(cat "$log")"
}
$EX --redis "$URL" --run $RUN --layers 1 --heads 2 --dim 16 --ctx 32 $COMMON --sync-every 3 > "$TMP/e1.log" 2>&1; got=$?
one_line 1 "$TMP/e1.log" "run '$RUN' holds another model: its tensors say --layers 1 --dim 32 --ctx 32 --vocab 256, this worker has --layers 1 --dim 16"
$EX --redis "$URL" --run nosuch $MODEL $COMMON --sync-every 3 > "$TMP/e2.log" 2>&1; got=$?
one_line 1 "$TMP/e2.log" "python3 -m rediloco.examples.gpt: cannot join run 'nosuch'"
$EX --redis "$URL" --run nosuch $MODEL $COMMON --sync-every 3 --ranks 2 > "$TMP/e2r.log" 2>&1; got=$?
one_line 1 "$TMP/e2r.log" "python3 -m rediloco.examples.gpt: cannot join run 'nosuch'"
[ "$(grep -c "cannot join run 'nosuch'" "$TMP/e2r.log")" = 1 ] || fail "--ranks 2: not one line: $(cat "$TMP/e2r.log")"
$EX --redis "$URL" --run $RUN $MODEL $COMMON --sync-every 3 --data "$TMP/none.tok" > "$TMP/e3.log" 2>&1; got=$?
one_line 2 "$TMP/e3.log" "--data $TMP/none.tok: No such file or directory"
$EX --redis "$URL" --run $RUN $MODEL $COMMON --sync-every 0 > "$TMP/e4.log" 2>&1; got=$?
one_line 2 "$TMP/e4.log" "--sync-every must be 1 or more, got 0"
say "gpt example: other model flags, an unknown run (also with --ranks 2), a missing --data, --sync-every 0: one line each"

$EX --redis "$URL" --run $RUN $MODEL $COMMON --steps 100000 --sync-every 1000 --worker-id w6 > "$TMP/w6.log" 2>&1 &
P=$!; PIDS="$PIDS $P"
wait_until 60 '$RCLI HEXISTS "dl:{$RUN}:workers" w6 | grep -q 1' "w6 to register"
sleep 1
kill -INT $P
wait $P || fail "SIGINT: exit status $?: $(tail -n 5 "$TMP/w6.log")"
grep -Eq "^stopped after [0-9]+ steps \(SIGINT\): left run $RUN$" "$TMP/w6.log" || fail "no stop line: $(tail -n 3 "$TMP/w6.log")"
say "gpt example: SIGINT: $(grep '^stopped after' "$TMP/w6.log")"
