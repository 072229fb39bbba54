#!/bin/sh
# it_python_gpt_group.sh: the PyTorch example as a node of 2 processes (python3 -m rediloco.examples.gpt
# --ranks 2: torch.multiprocessing, DDP on gloo inside, the node ONE worker of the run through
# rediloco.DiLoCo's process_group) beside a C GPT worker (bin/worker). The example creates the run
# (--init-run) and its two ranks train their halves of the node's slice of the King James Bible. After
# every sync the node and the C worker report the same digest of the global parameters, every closed round
# has the two workers as its participants (the node once, not once per rank), the node's rank 0 alone
# evaluates and logs, and the validation loss it measures falls; then SIGTERM to a node's launcher stops its
# ranks, which leave the run, and the launcher exits 0 (the launcher passes it on to both ranks, which get it
# at their own moments: they agree on the stop at a collective and stop after the same step; stopping one
# step apart, a rank died in its DDP all-reduce with the other gone). (On cuda the ranks would be on GPUs 0 and 1,
# DDP on NCCL: docs/python.md "A node of GPUs"; not run here, no GPU.)
. "$(dirname "$0")/lib.sh"
need_torch
prepare_bible
H=15; ROUNDS=3; STEPS=$((H * ROUNDS))
MODEL="--layers 1 --heads 2 --dim 32 --ctx 32"
COMMON="--batch 8 --seq 32 --lr 3e-3 --warmup 5 --steps $STEPS --sync-every $H --eval-every $H --eval-batches 4 --threads 1"
start_redis
RUN=node
PYTHONPATH=python $PYTHON -m rediloco.examples.gpt --redis "$URL" --run $RUN $MODEL $COMMON --init-run --ranks 2 \
  --device cpu --workers 2 --shards 4 --data build/kjv.tok --num-shards 2 --shard-index 1 --worker-id node1 \
  --log "$TMP/node1.jsonl" > "$TMP/py-node1.log" 2>&1 &
PY=$!; PIDS="$PIDS $PY"
wait_until 60 '$RCLI EXISTS "dl:{$RUN}:config" | grep -q 1' "the PyTorch example to create the run"
start_server s1
start_worker c1 $COMMON --data build/kjv.tok --num-shards 2 --shard-index 0
wait_workers c1
wait "$PY" || fail "the node exited with status $?: $(tail -n 20 "$TMP/py-node1.log")"
grep -q "2 ranks, DDP on gloo" "$TMP/py-node1.log" || fail "the node does not say it trains on 2 ranks: $(head -n 5 "$TMP/py-node1.log")"
grep -q "^worker node1: $STEPS steps on 2 ranks, version $ROUNDS, validation loss" "$TMP/py-node1.log" \
  || fail "the node's last line: $(tail -n 3 "$TMP/py-node1.log")"
[ "$(grep -c '^worker node1' "$TMP/py-node1.log")" = 1 ] || fail "more than rank 0 reported the end: $(grep '^worker' "$TMP/py-node1.log")"
grep '"event":"sync"' "$TMP/c1.jsonl" | sed 's/.*"round":\([0-9]*\).*"digest":"\([0-9a-f]*\)".*/\1 \2/' > "$TMP/c.txt"
grep '"event": "sync"' "$TMP/node1.jsonl" | sed 's/.*"round": \([0-9]*\).*"digest": "\([0-9a-f]*\)".*/\1 \2/' > "$TMP/p.txt"
[ "$(wc -l < "$TMP/c.txt")" -eq $ROUNDS ] || fail "the C worker synced $(wc -l < "$TMP/c.txt") times, want $ROUNDS"
diff "$TMP/c.txt" "$TMP/p.txt" > "$TMP/diff.txt" || fail "digests differ between the C worker and the node: $(cat "$TMP/diff.txt")"
for r in $(seq 0 $((ROUNDS - 1))); do
  p=$($RCLI HGET "dl:{$RUN}:f0:r$r" participants)
  case "$p" in c1:*,node1:*|node1:*,c1:*) ;; *) fail "round $r participants '$p' (want c1 and the node)";; esac
done
grep '"eval_loss": *[0-9]' "$TMP/node1.jsonl" | sed 's/.*"eval_loss": *\([0-9.]*\).*/\1/' > "$TMP/eval.txt"
[ "$(wc -l < "$TMP/eval.txt")" -eq $ROUNDS ] || fail "the node logged $(wc -l < "$TMP/eval.txt") evaluations, want $ROUNDS (rank 0 alone)"
first=$(head -n 1 "$TMP/eval.txt"); last=$(tail -n 1 "$TMP/eval.txt")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a && b < 4.0) }' || fail "the node's validation loss did not fall: $(tr '\n' ' ' < "$TMP/eval.txt")"
say "a node of 2 PyTorch ranks (DDP) and a C worker: the same digest after each of $ROUNDS syncs ($(tail -n 1 "$TMP/c.txt")), validation $(tr '\n' ' ' < "$TMP/eval.txt")"
# SIGTERM to the node's launcher (as `kill <pid>` would): it passes the signal on to its ranks, which leave the
# run as a stopped worker does; the launcher exits 0 once they did, and no rank is left running
RUN=nodestop
PYTHONPATH=python $PYTHON -m rediloco.examples.gpt --redis "$URL" --run $RUN $MODEL --batch 8 --seq 32 --steps 100000 \
  --sync-every 5 --eval-every 0 --threads 1 --init-run --ranks 2 --device cpu --workers 1 --shards 4 --data build/kjv.tok \
  --worker-id node2 --quiet > "$TMP/py-node2.log" 2>&1 &
PY=$!; PIDS="$PIDS $PY"
wait_until 60 '$RCLI EXISTS "dl:{$RUN}:config" | grep -q 1' "the second node to create its run"
start_server s2
wait_until 60 '[ "$($RCLI HGET "dl:{$RUN}:state" rounds_closed)" -ge 2 ] 2>/dev/null' "the second node to sync twice"
ranks=$(pgrep -P $PY | tr '\n' ' ')
kill -TERM $PY
launcher_gone() { for _ in $(seq 150); do alive $PY || return 0; sleep 0.1; done; return 1; }
launcher_gone || fail "the launcher still runs 15 s after SIGTERM: $(tail -n 5 "$TMP/py-node2.log")"
wait $PY; rc=$?
[ $rc = 0 ] || fail "the launcher exited $rc after SIGTERM: $(tail -n 10 "$TMP/py-node2.log")"
# (its children: the ranks, ended before the launcher, and multiprocessing's resource tracker, which ends
# once the launcher's end closes its pipe: a moment after, so each gets 5 s)
for p in $ranks; do wait_until 5 '! alive "$p"' "process $p of the node to end after its launcher exited"; done
$RCLI XRANGE "dl:{$RUN}:events" - + | grep -qx left || fail "the node did not leave the run: $($RCLI XRANGE "dl:{$RUN}:events" - + | tail -n 20 | tr '\n' ' ')"
[ "$($RCLI HLEN "dl:{$RUN}:workers")" = 0 ] || fail "the node is still a member of the run"
say "SIGTERM to a node's launcher: its ranks left the run, and it exited 0"
