#!/bin/sh
# it_cuda_python_group.sh: a PyTorch process group (DDP) whose ranks' models are on GPUs, through the rediloco
# package (python/rediloco/group.py). One run (quadratic, 20000 parameters, 8 shards, 3 rounds of H=10, bf16):
# group g1 of 2 ranks with its model on cuda (DDP on gloo, both ranks on the one GPU of a machine with one),
# synced through a host mirror of its parameters (a group never uses the device hooks: it must say "pinned host
# copy"), and group g2 of 2 ranks on the CPU. The shards' digests equal tests/tools/ref_quadratic's for g1,g2 and
# every rank ends at the reference's digest of the whole vector (the GPU's fp32 elementwise steps give the CPU's
# bytes, as in it_cuda_python_hooks). With 2 GPUs or more, a second run does it as a node would: DDP on NCCL
# (rank r on GPU r) and DiLoCo on a gloo group of the same processes (dist.new_group(backend="gloo")).
# Then a Streaming run (2 fragments, fragment alpha 0.5, 2 in flight) of the same two groups, against the
# fragment-schedule reference: each fragment comes back to the GPU through the mirror as it is applied.
#
# Exits 77 (skipped) unless torch sees a GPU. NOT RUN so far: no GPU on the development machine or on CI.
# CUDA_GROUP_STAND_IN=1 runs its logic without one: g1's ranks on the CPU through the host mirror
# (--host-copy), no NCCL run; it says so, and proves nothing about GPUs.
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-/usr/bin/python3}
DEV="--device cuda"; ON="on cuda"
if [ -n "${CUDA_GROUP_STAND_IN:-}" ]; then
  DEV="--device cpu --host-copy"; ON="on the CPU standing in for cuda"
elif ! $PYTHON -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "torch.cuda.is_available() is false (no GPU): a group's ranks on a GPU are not exercised: skipped"; exit 77
fi
. tests/lib.sh
[ -n "${CUDA_GROUP_STAND_IN:-}" ] && say "CUDA_GROUP_STAND_IN: g1 on the CPU through the host mirror, standing in for cuda"
NUMEL=20000; SEED=7; ROUNDS=3; H=10
GPUS=0; [ -z "${CUDA_GROUP_STAND_IN:-}" ] && GPUS=$($PYTHON -c 'import torch; print(torch.cuda.device_count())')
start_redis
group() { # RUN ID [FLAGS]
  r=$1; id=$2; shift 2
  $PYTHON tests/python/group_quad.py "$URL" $r $id $((ROUNDS * H)) $H --ranks 2 --numel $NUMEL --seed $SEED \
    --out "$TMP/$r-$id" --start-method spawn "$@" > "$TMP/py-$r-$id.log" 2>&1 || fail "group $id of $r exited with status $?"
}
check_run() { # RUN CUDA_GROUP
  run=$1
  build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers g1,g2 --rounds $ROUNDS \
    --sync-every $H --bounds "$($RCLI HGET "dl:{$run}:config" shard_bounds)" > "$TMP/ref-$run.txt" || fail "reference"
  shard_digests $run > "$TMP/got-$run.txt"
  grep '^shard' "$TMP/ref-$run.txt" | diff - "$TMP/got-$run.txt" > "$TMP/diff.txt" \
    || fail "$run: shard digests differ from the reference of two single workers: $(cat "$TMP/diff.txt")"
  ref=$(awk '/^all/ {print $2}' "$TMP/ref-$run.txt")
  for g in g1 g2; do
    for rank in 0 1; do
      [ "$(grep '^sync' "$TMP/$run-$g.rank$rank" | tail -n 1 | cut -d' ' -f3)" = "$ref" ] \
        || fail "$run: $g rank $rank does not end at $ref: $(cat "$TMP/$run-$g.rank$rank")"
    done
  done
  for rank in 0 1; do
    [ "$(grep '^path' "$TMP/$run-g1.rank$rank")" = "path pinned host copy" ] \
      || fail "$run: g1 rank $rank on cuda: $(grep '^path' "$TMP/$run-g1.rank$rank"), not the host mirror"
  done
  say "$run: $2 bit-identical to 2 single workers on the CPU: $ref"
}
RUN=pcg
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED
start_server s1 --lease-ttl-ms 2000
group $RUN g1 $DEV & G1=$!
group $RUN g2 & G2=$!
wait $G1 || exit 1
wait $G2 || exit 1
check_run $RUN "a group $ON (DDP on gloo) beside a group on the CPU"

RUN=pcs # Streaming: 2 fragments, alpha 0.5, 2 in flight
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --fragments 2 --workers 2 --seed $SEED
start_server s3 --lease-ttl-ms 2000
STREAM="--fragment-alpha 0.5 --fragments-in-flight 2"
group $RUN g1 $DEV $STREAM & G1=$!
group $RUN g2 $STREAM & G2=$!
wait $G1 || exit 1
wait $G2 || exit 1
build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers g1,g2 --sync-every $H \
  --steps $((ROUNDS * H)) --alpha 0.5 --in-flight 2 --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" \
  --frag-bounds "$($RCLI HGET "dl:{$RUN}:config" frag_bounds)" > "$TMP/ref-$RUN.txt" || fail "Streaming reference"
shard_digests $RUN > "$TMP/got-$RUN.txt"
grep '^shard' "$TMP/ref-$RUN.txt" | diff - "$TMP/got-$RUN.txt" > "$TMP/diff.txt" \
  || fail "$RUN: shard digests differ from the fragment-schedule reference of two single workers: $(cat "$TMP/diff.txt")"
for rank in 0 1; do
  [ "$(grep '^path' "$TMP/$RUN-g1.rank$rank")" = "path pinned host copy" ] || fail "$RUN: g1 rank $rank not on the host mirror"
done
say "$RUN (Streaming, alpha 0.5, 2 in flight): the group $ON (host mirror) and the CPU group bit-identical to 2 single workers ($(shard_versions $RUN))"
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
check_run $RUN "a group on $GPUS GPUs with DDP on NCCL and DiLoCo on a gloo group"
