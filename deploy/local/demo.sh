#!/bin/sh
# deploy/local/demo.sh: what `make demo` runs. On this machine: an embedded Redis, two shard-servers,
# the coordinator (reaper), and two workers that train a small GPT on the King James Bible (byte-level,
# each worker on its own half of the text) with DiLoCo. Worker w1's progress line is shown; the rest
# logs under run/demo/. Ctrl-C stops everything.
#
# Knobs (environment): DEMO_STEPS (600), DEMO_SYNC_EVERY (100), DEMO_WORKERS (2), DEMO_PORT (free port).
set -u
cd "$(dirname "$0")/../.." || exit 1
STEPS=${DEMO_STEPS:-600}; H=${DEMO_SYNC_EVERY:-100}; NW=${DEMO_WORKERS:-2}
DIR=run/demo; DATA=data
mkdir -p "$DIR" "$DATA"
rm -f "$DIR"/*.jsonl "$DIR"/*.log
PIDS=""
cleanup() {
  for p in $PIDS; do kill "$p" 2>/dev/null; done
  sleep 0.5
  for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
  [ -n "${PORT:-}" ] && redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ ! -s "$DATA/kjv.tok" ]; then
  echo "== preparing the corpus: the King James Bible (Debian bible-kjv), byte-level tokens"
  bible 'Gen1:1-Rev22:21' > "$DATA/kjv.txt.tmp" && mv "$DATA/kjv.txt.tmp" "$DATA/kjv.txt" || { echo "bible failed"; exit 1; }
  bin/worker prepare-data --input "$DATA/kjv.txt" --output "$DATA/kjv.tok" || exit 1
fi

PORT=${DEMO_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
URL=redis://127.0.0.1:$PORT
echo "== embedded Redis on 127.0.0.1:$PORT (data in $DIR)"
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$DIR" --save '' --appendonly no --daemonize yes \
  --logfile redis.log --pidfile "$PWD/$DIR/redis.pid" >/dev/null || exit 1
for _ in $(seq 50); do redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done

echo "== coordinator init: GPT 2 layers x 128 dims, 8 shards, $NW workers, sync every $H steps"
bin/coordinator init --redis "$URL" --run demo --trainer gpt --layers 2 --heads 4 --dim 128 --ctx 128 \
  --workers "$NW" --shards 8 --seed 0 --force || exit 1
for s in 1 2; do
  bin/shard-server --redis "$URL" --run demo --id "server$s" > "$DIR/server$s.log" 2>&1 & PIDS="$PIDS $!"
done
bin/coordinator serve --redis "$URL" --run demo --print-every 30 > "$DIR/coordinator.log" 2>&1 & PIDS="$PIDS $!"

common="--redis $URL --run demo --sync-every $H --steps $STEPS --heartbeat-interval 2 --data $DATA/kjv.tok \
  --num-shards $NW --batch 8 --seq 128 --lr 2e-3 --warmup 50 --eval-every $H --threads 1"
WPIDS=""
i=1
while [ "$i" -lt "$NW" ]; do
  bin/worker $common --worker-id "w$((i + 1))" --shard-index "$i" --quiet --log "$DIR/w$((i + 1)).jsonl" \
    > "$DIR/w$((i + 1)).log" 2>&1 & PIDS="$PIDS $!"; WPIDS="$WPIDS $!"
  i=$((i + 1))
done
echo "== training ($STEPS steps per worker); watch with: bin/coordinator status --redis $URL --run demo"
bin/worker $common --worker-id w1 --shard-index 0 --log "$DIR/w1.jsonl"
rc=$?
for p in $WPIDS; do wait "$p"; done
echo
bin/coordinator status --redis "$URL" --run demo | head -12
echo
echo "== validation loss of w1 (nats/byte; ln 256 = 5.55 at the start):"
grep '"event":"step"' "$DIR/w1.jsonl" | sed -n 's/.*"step":\([0-9]*\).*"eval_loss":\([0-9.]*\).*/\1 \2/p' | \
  awk -v h="$H" '$1 % h == 0 && $2 > 0 { printf "  step %5d: %.3f\n", $1, $2 }'
exit $rc
