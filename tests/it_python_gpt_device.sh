#!/bin/sh
# it_python_gpt_device.sh: the PyTorch example's --device and --dtype (python3 -m rediloco.examples.gpt).
#   - --device cuda where torch sees no GPU exits at once with a message that says so and what to use;
#     where torch sees one, a worker on cuda (bf16, the default there) joins the run below instead;
#   - a real run (2 rounds of H=5, one shard-server): a worker with --device cpu --dtype fp32 (it creates
#     the run, --init-run) and one with --device cpu --dtype bf16 (CPU autocast, fp32 master weights)
#     train it together: both end, each names its device and dtype, every loss is finite and both report
#     the same digest of the global parameters after each sync (DiLoCo works on the fp32 weights);
#   - a python3 that cannot import torch (here python3 -S: no site-packages) exits at once with one line
#     naming that python3 and python3-torch, not a traceback.
. "$(dirname "$0")/lib.sh"
need_torch
prepare_bible
H=5; ROUNDS=2; STEPS=$((H * ROUNDS))
MODEL="--layers 1 --heads 2 --dim 32 --ctx 32"
COMMON="--batch 4 --seq 32 --lr 3e-3 --warmup 2 --steps $STEPS --sync-every $H --eval-every $H --eval-batches 2 --threads 1"
EX="env PYTHONPATH=python $PYTHON -m rediloco.examples.gpt"
start_redis
second="--device cpu --dtype bf16"
if $PYTHON -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  second="--device cuda"; say "torch sees a GPU: the second worker trains on cuda"
else
  $EX --redis "$URL" --run nogpu --data build/kjv.tok --device cuda > "$TMP/nogpu.txt" 2>&1 \
    && fail "--device cuda without a GPU succeeded"
  grep -q "^--device cuda: torch .* sees no GPU (.*); use --device cpu, or auto" "$TMP/nogpu.txt" \
    || fail "--device cuda without a GPU: $(cat "$TMP/nogpu.txt")"
  say "--device cuda without a GPU: $(cat "$TMP/nogpu.txt")"
fi
RUN=dev
$EX --redis "$URL" --run $RUN $MODEL $COMMON --init-run --workers 2 --shards 2 --data build/kjv.tok --num-shards 2 \
  --shard-index 0 --worker-id p1 --device cpu --dtype fp32 --log "$TMP/p1.jsonl" > "$TMP/p1.log" 2>&1 &
P1=$!; PIDS="$PIDS $P1"
wait_until 60 '$RCLI EXISTS "dl:{$RUN}:config" | grep -q 1' "the example to create the run"
start_server s1
$EX --redis "$URL" --run $RUN $MODEL $COMMON --data build/kjv.tok --num-shards 2 --shard-index 1 --worker-id p2 \
  $second --log "$TMP/p2.jsonl" > "$TMP/p2.log" 2>&1 &
P2=$!; PIDS="$PIDS $P2"
wait $P1 || fail "the fp32 worker exited with status $?: $(tail -n 5 "$TMP/p1.log")"
wait $P2 || fail "the second worker ($second) exited with status $?: $(tail -n 5 "$TMP/p2.log")"
grep -q "^model on cpu, fp32 (" "$TMP/p1.log" || fail "p1 does not say fp32 on cpu: $(head -n 3 "$TMP/p1.log")"
case "$second" in
  *bf16*) grep -q "^model on cpu, bf16 autocast, fp32 master weights" "$TMP/p2.log" \
            || fail "p2 does not say bf16 on cpu: $(head -n 3 "$TMP/p2.log")";;
  *) grep -q "^model on cuda" "$TMP/p2.log" || fail "p2 does not say cuda: $(head -n 3 "$TMP/p2.log")";;
esac
for w in p1 p2; do
  n=$(grep -c '"event": "step"' "$TMP/$w.jsonl")
  [ "$n" -eq $STEPS ] || fail "$w logged $n steps, want $STEPS"
  grep '"event": "step"' "$TMP/$w.jsonl" | grep -qv '"loss": [0-9]' && fail "$w: a loss that is not a finite number"
  grep '"event": "sync"' "$TMP/$w.jsonl" | sed 's/.*"round": \([0-9]*\).*"digest": "\([0-9a-f]*\)".*/\1 \2/' > "$TMP/$w.sync"
  [ "$(wc -l < "$TMP/$w.sync")" -eq $ROUNDS ] || fail "$w synced $(wc -l < "$TMP/$w.sync") times, want $ROUNDS"
done
cmp -s "$TMP/p1.sync" "$TMP/p2.sync" || fail "the workers' digests differ: $(paste "$TMP/p1.sync" "$TMP/p2.sync")"
say "fp32 and $second workers trained one run: $(head -n 1 "$TMP/p2.log"); same digest after each of $ROUNDS syncs ($(tail -n 1 "$TMP/p1.sync"))"

$EX --help > /dev/null 2>&1 || fail "--help: exit $?"
env PYTHONPATH=python $PYTHON -S -m rediloco.examples.gpt --help > "$TMP/notorch.log" 2>&1 && fail "python3 -S: exit 0"
[ "$(wc -l < "$TMP/notorch.log")" = 1 ] && grep -q "needs PyTorch, which .* cannot import .*python3-torch" "$TMP/notorch.log" \
  || fail "python3 without torch: $(head -n 5 "$TMP/notorch.log")"
say "a python3 without torch: one line naming it and python3-torch"
