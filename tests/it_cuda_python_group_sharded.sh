#!/bin/sh
# it_cuda_python_group_sharded.sh: a sharded process group (rediloco/sharded.py) whose ranks hold their chunks
# on a GPU: tests/python/group_sharded.py's model (4 tensors, one with fewer rows than ranks), each rank's
# torch.chunk of every parameter on cuda (rank r on GPU r, modulo the GPUs there are; DiLoCo's group on gloo),
# copied through a page-locked buffer of the rank's chunks ("pinned host copy"; FSDP's storage is no flat
# device buffer the device hooks could take). Runs made with rediloco.init_run(..., shards=1, fsdp_ranks=2):
# for bf16, and Streaming (fragments=2, alpha 0.5), run A has the sharded group g1 on cuda and a single CPU
# worker g2, run B the single CPU workers g1 and g2: both end on the same shard digests, every sync reports the
# same shards digest per version (the GPU's fp32 elementwise steps give the CPU's bytes, as in
# it_cuda_python_hooks), and g1's ranks say "path pinned host copy". The same mechanism on the CPU:
# tests/it_python_group_sharded.sh.
#
# Exits 77 (skipped) unless torch sees a GPU. NOT RUN so far: no GPU on the development machine or on CI.
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-/usr/bin/python3}
if ! $PYTHON -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "torch.cuda.is_available() is false (no GPU): a sharded group's chunks on a GPU are not exercised: skipped"; exit 77
fi
. tests/lib.sh
ROUNDS=3; H=6
start_redis
sharded_pairs bf16 stream
members=""
for mode in bf16 stream; do
  f=$(sharded_flag $mode)
  members="$members --member A$mode:g1:2$f:cuda --member A$mode:g2:1$f --member B$mode:g1:1$f --member B$mode:g2:1$f"
done
# (group_sharded.py forks its members' ranks: CUDA is not usable in a child of a process that initialised it,
# and the launcher never does; each rank starts CUDA after the fork)
$PYTHON tests/python/group_sharded.py run "$URL" $((ROUNDS * H)) $H --out "$TMP" $members > "$TMP/launcher.log" 2>&1
for mode in bf16 stream; do
  sharded_same $mode "a sharded group on cuda" $ROUNDS
  for r in 0 1; do
    [ "$(grep '^path' "$TMP/A$mode-g1.rank$r")" = "path pinned host copy" ] ||
      fail "$mode: g1 rank $r: '$(grep '^path' "$TMP/A$mode-g1.rank$r")', not the pinned host copy of chunks on cuda"
  done
  say "$mode: a sharded group of 2 with its chunks on cuda ends bit-identical to single CPU workers ($(tail -n 1 "$TMP/want-$mode.txt"))"
done
