#!/bin/sh
# it_portable_gpt_bits.sh: bin/worker runs a GPT on a CPU without AVX2 and FMA and trains to the same
# bits as natively. The GPT's kernels are built for the x86-64 baseline with an x86-64-v3 clone picked
# at load time (HOT_CLONES, common/base/clones.h; no -march=native), and their sums use fixed lanes, so both
# builds round alike. qemu-x86_64 -cpu Nehalem (SSE4.2: no AVX, no FMA) runs the baseline build here.
# Two identical runs (tiny GPT, 10 steps, a sync every 5) on one Redis: one worker native, one under
# qemu; their sync digests (of the global parameters, which carry every bit of the pseudo-gradients)
# and their training and validation losses at the sync steps must agree. OpenBLAS picks its own
# kernels per CPU, outside our code, so both workers pin the same one (OPENBLAS_CORETYPE=Nehalem).
# Skips (77) without qemu-x86_64 (Debian qemu-user) or off x86-64.
. "$(dirname "$0")/lib.sh"
[ "$(uname -m)" = x86_64 ] || { echo "SKIP: not an x86-64 machine"; exit 77; }
command -v qemu-x86_64 > /dev/null || { echo "SKIP: qemu-x86_64 is missing (apt-get install qemu-user)"; exit 77; }
OLD="qemu-x86_64 -cpu Nehalem"
export OPENBLAS_CORETYPE=Nehalem

start_redis
for RUN in native old; do
  init_run $RUN --trainer gpt --layers 2 --heads 2 --dim 32 --ctx 32 --shards 2 --workers 1 --seed 5
  start_server "s$RUN"
done
train() { # RUN [prefix command]: one worker of RUN, to the end
  run=$1; shift
  "$@" bin/worker --redis "$URL" --run "$run" --worker-id w0 --quiet --log "$TMP/$run.jsonl" --sync-every 5 \
    --steps 10 --batch 2 --seq 32 --lr 3e-3 --warmup 2 --eval-every 5 --threads 1 --heartbeat-interval 1 \
    > "$TMP/worker-$run.log" 2>&1 || fail "worker of run $run ${1:+under $*} exited with status $?"
  { grep '"event":"sync"' "$TMP/$run.jsonl" | sed 's/.*"version":\([0-9]*\).*"digest":"\([0-9a-f]*\)".*/sync \1 \2/'
    grep '"event":"step"' "$TMP/$run.jsonl" | sed 's/.*"step":\([0-9]*\).*"loss":\([-0-9.e]*\).*"eval_loss":\([-0-9.e]*\).*/step \1 \2 \3/' |
      awk '$2 % 5 == 0' # the sync steps: logged always (others once a second, as fast as the CPU goes)
  } > "$TMP/$run.bits"
}
train native
train old $OLD
[ "$(grep -c '^step' "$TMP/native.bits")" -eq 2 ] || fail "the native worker logged no losses at steps 5 and 10"
[ "$(grep -c '^sync' "$TMP/native.bits")" -eq 2 ] || fail "the native worker made $(grep -c '^sync' "$TMP/native.bits") syncs, expected 2"
diff "$TMP/native.bits" "$TMP/old.bits" > "$TMP/diff.txt" || fail "the worker without AVX2/FMA trained to other bits: $(cat "$TMP/diff.txt")"
if grep -q ' avx2 ' /proc/cpuinfo && grep -q ' fma ' /proc/cpuinfo; then
  say "x86-64-v3 build (native) and baseline build (qemu Nehalem) agree: $(grep '^sync' "$TMP/native.bits" | tail -n 1)"
else
  say "this CPU has no AVX2/FMA: both runs used the baseline build; they agree: $(grep '^sync' "$TMP/native.bits" | tail -n 1)"
fi
