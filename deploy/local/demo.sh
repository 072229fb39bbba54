#!/bin/sh
# deploy/local/demo.sh: what `make demo` runs. On this machine (deploy/local/cluster.sh): Redis with
# deploy/redis/redis.conf, two shard-servers, the coordinator (reaper + dashboard), and two workers that
# train a small GPT on the King James Bible (byte-level, each worker on its own half of the text) with
# DiLoCo. Worker w1's progress line is shown; the rest logs under run/demo/logs/. Ctrl-C stops everything.
#
# Knobs (environment): DEMO_STEPS (600), DEMO_SYNC_EVERY (100), DEMO_WORKERS (2), DEMO_PORT (free port).
set -u
cd "$(dirname "$0")/../.." || exit 1
STEPS=${DEMO_STEPS:-600}; H=${DEMO_SYNC_EVERY:-100}; NW=${DEMO_WORKERS:-2}
DIR=$PWD/run/demo; DATA=data
. deploy/local/demo_lib.sh
demo_corpus || exit 1

PORT=${DEMO_PORT:-0}
echo "== Redis, 2 shard-servers and the coordinator (deploy/local/cluster.sh, state in $DIR)"
$CL up --dir "$DIR" --port "$PORT" --servers 2 --run demo --http 127.0.0.1:0 || exit 1
URL=$($CL url --dir "$DIR")
export DL_REDIS_URL="$URL"   # every binary below takes the Redis URL from here (not from ps-visible flags)
echo "== coordinator init: GPT 2 layers x 128 dims, 8 shards, $NW workers, sync every $H steps"
$CL init --dir "$DIR" -- --trainer gpt --layers 2 --heads 4 --dim 128 --ctx 128 \
  --workers "$NW" --shards 8 --seed 0 --force || exit 1

common="--run demo --sync-every $H --steps $STEPS --heartbeat-interval 2 --data $DATA/kjv.tok \
  --num-shards $NW --batch 8 --seq 128 --lr 2e-3 --warmup 50 --eval-every $H --threads 1"
WPIDS=""
i=1
while [ "$i" -lt "$NW" ]; do
  bin/worker $common --worker-id "w$((i + 1))" --shard-index "$i" --quiet --log "$DIR/w$((i + 1)).jsonl" \
    > "$DIR/logs/worker-w$((i + 1)).log" 2>&1 & PIDS="$PIDS $!"; WPIDS="$WPIDS $!"
  i=$((i + 1))
done
echo "== training ($STEPS steps per worker); watch with: DL_REDIS_URL=$URL bin/coordinator status --run demo"
bin/worker $common --worker-id w1 --shard-index 0 --log "$DIR/w1.jsonl"
rc=$?
for p in $WPIDS; do wait "$p"; done
echo
# the status up to its shards table (a cut in mid-table showed one of the two shard-servers)
bin/coordinator status --run demo | awk '/^shards \(/ { exit } { print }'
echo "== validation loss of w1 (nats/byte; ln 256 = 5.55 at the start):"
grep '"event":"step"' "$DIR/w1.jsonl" | sed -n 's/.*"step":\([0-9]*\).*"eval_loss":\([0-9.]*\).*/\1 \2/p' | \
  awk -v h="$H" '$1 % h == 0 && $2 > 0 { printf "  step %5d: %.3f\n", $1, $2 }'
exit $rc
