#!/bin/sh
# it_cuda_python_group.sh: PyTorch process groups (DDP) whose ranks' models are on GPUs, through the rediloco
# package (python/rediloco/group.py). One run (quadratic, 20000 parameters, 8 shards, 3 rounds of H=10, bf16):
# group g1 of 2 ranks with its model on cuda (DDP on gloo, both ranks on the one GPU of a machine with one)
# through the CUDA device hooks (libdiloco_cuda.so: it must say "device hooks"), group g3 the same through a host
# mirror of its parameters (--no-device-hooks: "pinned host copy"), and group g2 of 2 ranks on the CPU. The
# shards' digests equal tests/tools/ref_quadratic's for g1,g2,g3 and every rank ends at the reference's digest
# of the whole vector (the GPU's fp32 elementwise steps give the CPU's bytes, as in it_cuda_python_hooks). With
# 2 GPUs or more, a second run does it as a node would: DDP on NCCL (rank r on GPU r) and DiLoCo on a gloo
# group of the same processes (dist.new_group(backend="gloo")), g1 on the hooks.
# Then a Streaming run (2 fragments, fragment alpha 0.5, 2 in flight) of the same three groups, against the
# fragment-schedule reference: each fragment comes back to the GPU as it is applied (mixed by the hooks' kernel
# on g1's, through the mirror on g3's).
#
# Exits 77 (skipped) unless torch sees a GPU. NOT RUN so far: no GPU on the development machine or on CI.
# CUDA_GROUP_STAND_IN=1 runs its logic without one: g1's ranks on the CUDA emulator's hooks (--device emu, as
# tests/it_python_group_hooks.sh runs them), g3's on the CPU through the host mirror (--host-copy), no NCCL
# run; it says so, and proves nothing about GPUs.
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-/usr/bin/python3}
DEV="--device cuda"; MIRROR="--device cuda --no-device-hooks"; ON="on cuda"
if [ -n "${CUDA_GROUP_STAND_IN:-}" ]; then
  DEV="--device emu"; MIRROR="--device cpu --host-copy"; ON="on the CPU standing in for cuda"
elif ! $PYTHON -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "torch.cuda.is_available() is false (no GPU): a group's ranks on a GPU are not exercised: skipped"; exit 77
fi
. tests/lib.sh
[ -n "${CUDA_GROUP_STAND_IN:-}" ] && say "CUDA_GROUP_STAND_IN: g1 on the CUDA emulator's hooks, g3 on the CPU through the host mirror, standing in for cuda"
NUMEL=20000; SEED=7; ROUNDS=3; H=10
GPUS=0; [ -z "${CUDA_GROUP_STAND_IN:-}" ] && GPUS=$($PYTHON -c 'import torch; print(torch.cuda.device_count())')
start_redis
group() { # RUN ID [FLAGS]
  r=$1; id=$2; shift 2
  $PYTHON tests/python/group_quad.py "$URL" $r $id $((ROUNDS * H)) $H --ranks 2 --numel $NUMEL --seed $SEED \
    --out "$TMP/$r-$id" --start-method spawn "$@" > "$TMP/py-$r-$id.log" 2>&1 || fail "group $id of $r exited with status $?"
}
paths() { # RUN: g1's ranks on the device hooks, g3's (where the run has one) through the host mirror
  for rank in 0 1; do
    [ "$(grep '^path' "$TMP/$1-g1.rank$rank")" = "path device hooks" ] \
      || fail "$1: g1 rank $rank on cuda: $(grep '^path' "$TMP/$1-g1.rank$rank"), not the device hooks"
    [ ! -f "$TMP/$1-g3.rank$rank" ] || [ "$(grep '^path' "$TMP/$1-g3.rank$rank")" = "path pinned host copy" ] \
      || fail "$1: g3 rank $rank: $(grep '^path' "$TMP/$1-g3.rank$rank"), not the host mirror"
  done
}
check_run() { # RUN WORKERS WHAT
  run=$1
  build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers $2 --rounds $ROUNDS \
    --sync-every $H --bounds "$($RCLI HGET "dl:{$run}:config" shard_bounds)" > "$TMP/ref-$run.txt" || fail "reference"
  shard_digests $run > "$TMP/got-$run.txt"
  grep '^shard' "$TMP/ref-$run.txt" | diff - "$TMP/got-$run.txt" > "$TMP/diff.txt" \
    || fail "$run: shard digests differ from the reference of two single workers: $(cat "$TMP/diff.txt")"
  ref=$(awk '/^all/ {print $2}' "$TMP/ref-$run.txt")
  for g in $(echo "$2" | tr , ' '); do
    for rank in 0 1; do
      [ "$(grep '^sync' "$TMP/$run-$g.rank$rank" | tail -n 1 | cut -d' ' -f3)" = "$ref" ] \
        || fail "$run: $g rank $rank does not end at $ref: $(cat "$TMP/$run-$g.rank$rank")"
    done
  done
  paths $run
  say "$run: $3 bit-identical to single workers on the CPU: $ref"
}
RUN=pcg
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED
start_server s1 --lease-ttl-ms 2000
group $RUN g1 $DEV & G1=$!
group $RUN g2 & G2=$!
group $RUN g3 $MIRROR & G3=$!
wait $G1 || exit 1
wait $G2 || exit 1
wait $G3 || exit 1
check_run $RUN g1,g2,g3 "a group $ON (DDP on gloo) on the device hooks and one through the host mirror, beside a group on the CPU,"

RUN=pcs # Streaming: 2 fragments, alpha 0.5, 2 in flight
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --fragments 2 --workers 3 --seed $SEED
start_server s3 --lease-ttl-ms 2000
STREAM="--fragment-alpha 0.5 --fragments-in-flight 2"
group $RUN g1 $DEV $STREAM & G1=$!
group $RUN g2 $STREAM & G2=$!
group $RUN g3 $MIRROR $STREAM & G3=$!
wait $G1 || exit 1
wait $G2 || exit 1
wait $G3 || exit 1
build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers g1,g2,g3 --sync-every $H \
  --steps $((ROUNDS * H)) --alpha 0.5 --in-flight 2 --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" \
  --frag-bounds "$($RCLI HGET "dl:{$RUN}:config" frag_bounds)" > "$TMP/ref-$RUN.txt" || fail "Streaming reference"
shard_digests $RUN > "$TMP/got-$RUN.txt"
grep '^shard' "$TMP/ref-$RUN.txt" | diff - "$TMP/got-$RUN.txt" > "$TMP/diff.txt" \
  || fail "$RUN: shard digests differ from the fragment-schedule reference of three single workers: $(cat "$TMP/diff.txt")"
paths $RUN
say "$RUN (Streaming, alpha 0.5, 2 in flight): the groups $ON (device hooks, host mirror) and the CPU group bit-identical to 3 single workers ($(shard_versions $RUN))"
if [ "$GPUS" -lt 2 ]; then
  say "$GPUS GPU: DDP on NCCL needs a GPU per rank: the NCCL run is not made"
  exit 0
fi
RUN=pcn
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED
start_server s2 --lease-ttl-ms 2000
group $RUN g1 --device cuda --nccl & G1=$!
group $RUN g2 & G2=$!
wait $G1 || exit 1
wait $G2 || exit 1
check_run $RUN g1,g2 "a group on $GPUS GPUs with DDP on NCCL and DiLoCo on a gloo group (device hooks)"
