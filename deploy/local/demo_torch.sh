#!/bin/sh
# deploy/local/demo_torch.sh: what `make demo-torch` runs. A PyTorch training loop and a C worker train
# one GPT together: Redis, two shard-servers and the coordinator (deploy/local/cluster.sh), the PyTorch
# example (python3 -m rediloco.examples.gpt, docs/python.md) creating the run from its own initial
# weights (--init-run) and training on one half of the King James Bible, `bin/worker` on the other
# half. The PyTorch worker trains on the GPU when torch sees one (--device auto: bf16 autocast there,
# fp32 on the CPU; docs/python.md). The PyTorch worker's progress line is shown; the rest logs under run/demo-torch/logs/. Ctrl-C
# stops everything.
#
# Knobs (environment): DEMO_STEPS (300), DEMO_SYNC_EVERY (50), DEMO_PORT (free port), DEMO_TORCH_RANKS (1: the
# PyTorch worker as a node of that many processes, DDP inside: the example's --ranks; on cuda one GPU each).
set -u
cd "$(dirname "$0")/../.." || exit 1
STEPS=${DEMO_STEPS:-300}; H=${DEMO_SYNC_EVERY:-50}; RANKS=${DEMO_TORCH_RANKS:-1}
DIR=$PWD/run/demo-torch; DATA=data; RUN=demo-torch
. deploy/local/demo_lib.sh
demo_corpus || exit 1

PORT=${DEMO_PORT:-0}
echo "== Redis (deploy/local/cluster.sh, state in $DIR)"
$CL up --dir "$DIR" --port "$PORT" --servers 2 --run $RUN --http 127.0.0.1:0 || exit 1
URL=$($CL url --dir "$DIR")
export DL_REDIS_URL="$URL"
MODEL="--layers 2 --heads 4 --dim 128 --ctx 128"
TRAIN="--sync-every $H --steps $STEPS --batch 8 --seq 128 --lr 2e-3 --warmup 50 --eval-every $H --threads 1"
echo "== the PyTorch worker creates run '$RUN' from its model's initial weights (rediloco.init_run) and trains"
PYTHONPATH=python ${PYTHON:-/usr/bin/python3} -m rediloco.examples.gpt --run $RUN $MODEL $TRAIN --init-run --workers 2 --device auto --ranks "$RANKS" \
  --data "$DATA/kjv.tok" --num-shards 2 --shard-index 0 --worker-id torch1 --log "$DIR/torch1.jsonl" &
PY=$!; PIDS="$PIDS $PY"
i=0
until bin/coordinator status --run $RUN >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -gt 300 ] && { echo "the run was not created"; exit 1; }
  alive=$(kill -0 $PY 2>/dev/null && echo 1); [ -n "$alive" ] || { echo "the PyTorch worker exited"; exit 1; }
  sleep 0.2
done
echo "== 2 shard-servers, the coordinator, and a C GPT worker (bin/worker, log in $DIR/logs/worker-c1.log)"
$CL up --dir "$DIR" >/dev/null || exit 1
bin/worker --run $RUN $TRAIN --data "$DATA/kjv.tok" --num-shards 2 --shard-index 1 --worker-id c1 --quiet \
  --log "$DIR/c1.jsonl" > "$DIR/logs/worker-c1.log" 2>&1 &
C=$!; PIDS="$PIDS $C"
wait $PY; rc=$?
wait $C || rc=1
echo
# the status up to its shards table (a cut in mid-table showed one of the two shard-servers)
bin/coordinator status --run $RUN | awk '/^shards \(/ { exit } { print }'
echo "== the same global parameters on both workers after each sync (round, digest):"
grep '"event": "sync"' "$DIR/torch1.jsonl" | sed 's/.*"round": \([0-9]*\).*"digest": "\([0-9a-f]*\)".*/  torch1 round \1 \2/' | tail -n 3
grep '"event":"sync"' "$DIR/c1.jsonl" | sed 's/.*"round":\([0-9]*\).*"digest":"\([0-9a-f]*\)".*/  c1     round \1 \2/' | tail -n 3
exit $rc
