#!/bin/sh
# it_torch_sgd_exactness.sh: the outer step is bit-identical to torch.optim.SGD(lr, momentum,
# nesterov=True) on torch's AVX2 CPU kernels (docs/PROTOCOL.md, "Bit-identical to torch").
# Two short sync runs of the quadratic trainer (2 workers, 2 shard-servers, 4 shards of odd sizes, 6
# rounds): one with fp32 pseudo-gradients (--no-bf16: the general commit path, outer_sgd_step_to) and
# one with bf16 (the one-pass commit kernel, AVX2 build). tests/torch_sgd_replay.py reads each run's
# initial parameters and logged averaged pseudo-gradients from Redis, applies torch.optim.SGD round by
# round on $PYTHON, and compares every parameter and momentum bit with what the shard-servers
# committed and what `coordinator checkpoint save` exports.
# Skips (77) without torch or on a CPU without AVX2 and FMA, where torch rounds a + alpha*b twice.
. "$(dirname "$0")/lib.sh"
$PYTHON -c 'import torch, numpy' 2>/dev/null ||
  { echo "SKIP: $PYTHON cannot import torch and numpy (Debian python3-torch python3-numpy)"; exit 77; }
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo ||
  { echo "SKIP: this CPU has no AVX2/FMA: torch's default kernels round a + alpha*b twice, ours once"; exit 77; }
NUMEL=100003; ROUNDS=6; H=5
start_redis

# torch_run RUN [worker flags]: a run of ROUNDS rounds, its checkpoint, then the torch replay
torch_run() {
  RUN=$1; shift
  init_run $RUN --trainer quadratic --numel $NUMEL --shards 4 --workers 2 --seed 3 --snapshot-every 1000 \
    --outer-lr 0.7 --outer-momentum 0.9
  start_server s1 --lease-ttl-ms 2000
  start_server s2 --lease-ttl-ms 2000
  for w in w1 w2; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 "$@"; done
  wait_workers w1 w2
  [ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS $ROUNDS $ROUNDS" ] || fail "$RUN: shard versions $(shard_versions $RUN)"
  kill $SRV_s1 $SRV_s2
  bin/coordinator checkpoint save --redis "$URL" --run $RUN --out "$TMP/$RUN.safetensors" > "$TMP/save-$RUN.log" 2>&1 ||
    fail "$RUN: checkpoint save: $(cat "$TMP/save-$RUN.log")"
  ATEN_CPU_CAPABILITY=avx2 $PYTHON tests/torch_sgd_replay.py "$PORT" $RUN "$TMP/$RUN.safetensors" \
    > "$TMP/torch-$RUN.txt" 2>&1
  rc=$?
  cat "$TMP/torch-$RUN.txt"
  [ $rc -eq 0 ] || fail "$RUN: torch.optim.SGD does not reproduce the run"
  grep -q "$ROUNDS rounds, lr 0.7 mu 0.9 (fp32) nesterov True" "$TMP/torch-$RUN.txt" || fail "$RUN: not the steps of the run"
}

say "fp32 pseudo-gradients (--no-bf16)"
torch_run fp32 --no-bf16
say "bf16 pseudo-gradients (one-pass commit kernel)"
torch_run bf16
say "torch.optim.SGD reproduces both runs bit for bit (parameters and momentum)"
