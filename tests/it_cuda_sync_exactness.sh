#!/bin/sh
# it_cuda_sync_exactness.sh: DiLoCo with GPU workers. 2 GPT workers with --device cuda (and a third
# on the CPU), 2 shard-servers, 4 shards, 4 sync rounds of a tiny GPT (3 with CUDA_SYNC_QUICK). Every
# shard reaches the last round's version; after each round every worker reports the same XXH3 digest of
# the new global parameters; the CUDA workers' losses (on the King James Bible; skipped without it) are
# finite and go down. The run is made twice: with DiLoCo on the device (the
# default --device-hooks auto: the CUDA workers' pseudo-gradients come from the kernel of
# worker/cuda/diloco_cuda.cu, the new parameters go to the device through its loads) and with
# --device-hooks off (the device copies its parameters back to the host buffer after every step and
# libdiloco computes Δ there). Both must give the same digest after every round. The pair is made
# again with the CUDA workers in --precision bf16: the same digests with and without the hooks, not fp32's.
#
# Exits 77 (skipped) unless bin/worker was built with the CUDA backend and a GPU is visible
# (nvidia-smi -L), or DILOCO_CUDA_BACKEND names another backend (tests/it_cuda_emu.sh runs this test
# on the CPU CUDA emulator's). Not run on a GPU so far (docs/cuda.md).
. "$(dirname "$0")/lib.sh"
need_cuda_backend
ROUNDS=4; H=5; BATCH="--batch 4 --seq 64"
# CUDA_SYNC_QUICK=1 (tests/it_cuda_emu.sh, on the CPU emulator, where a step takes seconds): 3 rounds of
# 3 steps on 2 x 32 tokens; the same checks
if [ -n "${CUDA_SYNC_QUICK:-}" ]; then ROUNDS=3; H=3; BATCH="--batch 2 --seq 32"; fi
MODEL="--layers 2 --heads 4 --dim 64 --ctx 64 --vocab 256"
# the Bible, not the synthetic tokens: uniform random tokens have nothing to learn (the loss stays at ln 256)
prepare_bible
TRAIN="--sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 $BATCH --warmup 2 --lr 2e-3 --num-shards 3 --data build/kjv.tok"
start_redis

run_once() { # RUN HOOKS PRECISION: the digests of every round in $TMP/digests-RUN
  RUN=$1
  init_run $RUN --trainer gpt $MODEL --shards 4 --workers 3 --seed 3
  start_server "a$RUN" --lease-ttl-ms 2000
  start_server "b$RUN" --lease-ttl-ms 2000
  start_worker g1 $TRAIN --device cuda --device-hooks "$2" --precision "$3" --shard-index 0
  start_worker g2 $TRAIN --device cuda --device-hooks "$2" --precision "$3" --shard-index 1
  start_worker c1 $TRAIN --device cpu --threads 1 --shard-index 2
  wait_workers g1 g2 c1
  grep -q 'no CUDA device\|built without' "$TMP"/worker-g*.log && fail "a CUDA worker did not get a device"
  if [ "$2" = auto ]; then
    grep -q 'device hooks: DiLoCo on the cuda device' "$TMP/worker-g1.log" || fail "$RUN: g1 did not use the device hooks"
  else
    grep -q 'device hooks:' "$TMP/worker-g1.log" && fail "$RUN: g1 used device hooks with --device-hooks off"
  fi
  [ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS $ROUNDS $ROUNDS" ] || fail "$RUN: shard versions: $(shard_versions $RUN)"
  : > "$TMP/digests-$RUN"
  r=1
  while [ $r -le $ROUNDS ]; do
    d=""
    for w in g1 g2 c1; do
      got=$(grep '"event":"sync"' "$TMP/$w.jsonl" | sed -n "${r}p" | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/')
      [ -n "$got" ] || fail "$RUN: worker $w has no sync $r"
      [ -z "$d" ] || [ "$got" = "$d" ] || fail "$RUN: round $r: worker $w digest $got, another worker $d"
      d=$got
    done
    say "$RUN round $r: all workers hold global parameters $d"
    echo "$d" >> "$TMP/digests-$RUN"
    r=$((r + 1))
  done
  for w in g1 g2; do
    first=$(grep '"event":"step"' "$TMP/$w.jsonl" | head -n 1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
    last=$(grep '"event":"step"' "$TMP/$w.jsonl" | tail -n 1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b == b + 0 && b < a) }' || fail "$RUN: worker $w loss $first -> $last"
    say "$RUN: CUDA worker $w: loss $first -> $last"
  done
  mkdir -p "$TMP/$RUN" && mv "$TMP"/*.jsonl "$TMP"/worker-*.log "$TMP/$RUN/"
}

run_once cudadev auto fp32
run_once cudahost off fp32
diff "$TMP/digests-cudadev" "$TMP/digests-cudahost" > /dev/null || \
  fail "DiLoCo on the device and through the host buffer differ: $(paste "$TMP/digests-cudadev" "$TMP/digests-cudahost")"
say "DiLoCo with CUDA workers: $ROUNDS rounds, identical global parameters on every worker, the same with and without the device hooks"
# the bf16 trainer (bf16 products and attention, fp32 master weights: DiLoCo exact on them) in the same run
run_once bf16dev auto bf16
run_once bf16host off bf16
grep -qE 'gpt trainer: cuda, bf16 products on fp32 master weights, bias .*, flash attention \(flash checked on this device' \
  "$TMP/bf16dev/worker-g1.log" || fail "g1 of bf16dev does not say it trains in bf16 with the checked flash attention: $(grep 'gpt trainer' "$TMP/bf16dev/worker-g1.log")"
diff "$TMP/digests-bf16dev" "$TMP/digests-bf16host" > /dev/null ||
  fail "bf16: DiLoCo on the device and through the host buffer differ: $(paste "$TMP/digests-bf16dev" "$TMP/digests-bf16host")"
diff "$TMP/digests-bf16dev" "$TMP/digests-cudadev" > /dev/null &&
  fail "bf16 workers gave fp32's digests: was --precision bf16 applied?"
say "bf16 CUDA workers: identical global parameters on every worker, the same with and without the device hooks, not fp32's"
