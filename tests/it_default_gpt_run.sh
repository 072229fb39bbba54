#!/bin/sh
# it_default_gpt_run.sh: the GPT run a user gets without model or trainer flags trains: `coordinator
# init` (its model: 2 layers, ctx 128) and `bin/worker` with no --seq (the trainer's 256 does not fit
# that context: the worker takes the run's ctx), two rounds; an explicit --seq longer than the run's
# context is refused naming the flags.
. "$(dirname "$0")/lib.sh"
RUN=plain
start_redis
init_run $RUN --workers 1 --shards 2
grep -q "ctx 128" "$TMP/init-$RUN.log" || fail "coordinator init's default model changed: $(cat "$TMP/init-$RUN.log")"
start_server s1
start_worker w1 --steps 4 --sync-every 2 --threads 1 --eval-every 0
wait_workers w1
[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" = 2 ] || fail "not 2 rounds: $($RCLI HGETALL "dl:{$RUN}:state")"
say "a default GPT run trained 2 rounds with the worker's default flags"
start_worker w2 --steps 1 --seq 200
wait "$WRK_w2" && fail "--seq 200 in a ctx 128 run was accepted"
grep -q -- "--seq <= --ctx (128), got --batch 8 --seq 200" "$TMP/worker-w2.log" ||
  fail "--seq 200 not refused clearly: $(tail -n 2 "$TMP/worker-w2.log")"
say "--seq 200 refused: $(grep -o 'gpt: need.*' "$TMP/worker-w2.log")"
