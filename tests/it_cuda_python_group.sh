#!/bin/sh
# it_cuda_python_group.sh: a PyTorch process group (DDP) whose ranks' models are on GPUs, through the rediloco
# package (python/rediloco/group.py). One run (quadratic, 20000 parameters, 8 shards, 3 rounds of H=10, bf16):
# group g1 of 2 ranks with its model on cuda (DDP on gloo, both ranks on the one GPU of a machine with one),
# synced through a host mirror of its parameters (a group never uses the device hooks: it must say "pinned host
# copy"), and group g2 of 2 ranks on the CPU. The shards' digests equal tests/tools/ref_quadratic's for g1,g2 and
# every rank ends at the reference's digest of the whole vector (the GPU's fp32 elementwise steps give the CPU's
# bytes, as in it_cuda_python_hooks). With 2 GPUs or more, a second run does it as a node would: DDP on NCCL
# (rank r on GPU r) and DiLoCo on a gloo group of the same processes (dist.new_group(backend="gloo")).
#
# Exits 77 (skipped) unless torch sees a GPU. NOT RUN so far: no GPU on the development machine or on CI.
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-/usr/bin/python3}
if ! $PYTHON -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "torch.cuda.is_available() is false (no GPU): a group's ranks on a GPU are not exercised: skipped"; exit 77
fi
. tests/lib.sh
NUMEL=20000; SEED=7; ROUNDS=3; H=10
GPUS=$($PYTHON -c 'import torch; print(torch.cuda.device_count())')
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
group $RUN g1 --device cuda & G1=$!
group $RUN g2 & G2=$!
wait $G1 || exit 1
wait $G2 || exit 1
check_run $RUN "a group on cuda (DDP on gloo) beside a group on the CPU"
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
