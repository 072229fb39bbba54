#!/bin/sh
# it_python_gpt_sync_every.sh: the PyTorch GPT example (python3 -m rediloco.examples.gpt) warns at start
# when --sync-every is larger than --steps, as bin/worker does, pointing to --final-sync:
#   - --steps 3 --sync-every 5: the warning, and the run stays at version 0 (the worker sent nothing);
#   - the same with --final-sync: no warning, and the worker syncs once after its last step (version 1);
#   - --steps 3 --sync-every 3: no warning (the last step syncs).
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
