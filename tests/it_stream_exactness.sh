#!/bin/sh
# it_stream_exactness.sh: Streaming DiLoCo, 4 fragments of 2 shards each, 3 workers, H = 20 (a fragment
# every 5 steps, sent on a background thread and applied 5 steps later). The final global parameters
# are bit-identical to the in-process reference of the fragment schedule, with fragment alpha 0
# (take the global values) and 0.5 (mix; the workers end with a full sync of every fragment,
# diloco_force_sync via --final-sync), the latter also with int4 pseudo-gradients and error feedback,
# and a worker started with the wrong --num-fragments is refused.
. "$(dirname "$0")/lib.sh"
NUMEL=80000; SEED=21; H=20; STEPS=100
start_redis
for cfg in 0 0.5 0.5:int4; do
  alpha=${cfg%%:*}; codec=""; ef=""; refc=""
  case $cfg in *:*) codec=${cfg#*:}; ef=--error-feedback; refc="--codec $codec --error-feedback" ;; esac
  RUN="stream$(echo $alpha | tr -d .)$codec"
  init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --fragments 4 --workers 3 --seed $SEED --compress ${codec:-bf16}
  start_server "a$RUN" --lease-ttl-ms 2000
  start_server "b$RUN" --lease-ttl-ms 2000
  final=""; [ "$alpha" = 0.5 ] && final=--final-sync
  for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 1 --fragment-alpha $alpha $final $ef; done
  wait_workers w1 w2 w3
  build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers w1,w2,w3 --sync-every $H \
    --steps $STEPS --alpha $alpha $final $refc --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" \
    --frag-bounds "$($RCLI HGET "dl:{$RUN}:config" frag_bounds)" > "$TMP/ref-$RUN.txt" || fail "reference"
  shard_digests $RUN > "$TMP/got-$RUN.txt"
  grep '^shard' "$TMP/ref-$RUN.txt" | diff - "$TMP/got-$RUN.txt" > "$TMP/diff.txt" || \
    fail "alpha $alpha: shard digests differ from the fragment-schedule reference: $(cat "$TMP/diff.txt")"
  syncs=$(grep -c '"event":"sync"' "$TMP/w1.jsonl")
  say "alpha $alpha ${codec:-bf16}: bit-identical to the reference ($(shard_versions $RUN) versions per shard, $syncs fragment syncs by w1)"
  rm -f "$TMP"/w*.jsonl
done
bin/worker --redis "$URL" --run stream0 --trainer quadratic --num-fragments 2 --steps 1 > "$TMP/wrong.log" 2>&1 && \
  fail "a worker with --num-fragments 2 joined a run of 4 fragments"
grep -q "4 fragment(s) but this worker was started with 2" "$TMP/wrong.log" || fail "no clear error: $(cat "$TMP/wrong.log")"
