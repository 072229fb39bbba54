#!/bin/sh
# it_python_group_fsdp.sh: FSDP in a process group. First what is refused before anything is opened
# (tests/python/group_fsdp_refusal.py: FSDP1's FullyShardedDataParallel, NotImplementedError naming fully_shard
# and DDP; sharded=True without a process group). Then, where the installed torch has fully_shard (FSDP2,
# torch >= 2.4), the exactness test of tests/it_python_group_sharded.sh with torch's own fully_shard: for bf16,
# fp32, and int3 with --download update and error feedback, run A has g1, a group of 2 ranks whose model is
# fully_shard'ed over a CPU mesh (gloo; DiLoCo finds the DTensor parameters and each rank moves its
# Shard(0) chunks), and a single PyTorch worker g2; run B the single workers g1 and g2: the same shard digests,
# and every rank's shards digest per version equal to the reference's. Debian's torch 1.13 cannot import FSDP
# on Python 3.11: there the test ends after the refusals with status 77 (skipped), saying so.
. "$(dirname "$0")/lib.sh"
PY=$PYTHON
dead="redis://127.0.0.1:$(free_port)"
$PY tests/python/group_fsdp_refusal.py "$dead" > "$TMP/refusal.log" 2>&1 || fail "group_fsdp_refusal.py: $(tail -n 20 "$TMP/refusal.log")"
cut -c1-200 "$TMP/refusal.log"
[ "$(grep -c '^ok' "$TMP/refusal.log")" -eq 4 ] || fail "expected 4 ok lines: $(cat "$TMP/refusal.log")"
say "FSDP1 in a process group and sharded=True without one are refused before anything is opened"

if ! $PY -c '
try:
    from torch.distributed.fsdp import fully_shard
except ImportError:
    from torch.distributed._composable.fsdp import fully_shard
from torch.distributed.device_mesh import init_device_mesh' > "$TMP/import.log" 2>&1; then
  why=$(grep -v '^ *File\|^Traceback\|^ *\^' "$TMP/import.log" | tail -n 1 | cut -c1-160)
  echo "SKIP: torch $($PY -c 'import torch; print(torch.__version__)') on Python $($PY -c 'import sys; print(sys.version.split()[0])') cannot import fully_shard ($why): the FSDP exactness test needs torch >= 2.4 (tests/it_python_group_sharded.sh tests the same mechanism with chunks held by hand)"
  exit 77
fi

ROUNDS=3; H=5
start_redis
sharded_pairs bf16 fp32 int3
members=""
for mode in bf16 fp32 int3; do
  f=$(sharded_flag $mode)
  members="$members --member A$mode:g1:2$f:fsdp --member A$mode:g2:1$f --member B$mode:g1:1$f --member B$mode:g2:1$f"
done
$PY tests/python/group_sharded.py run "$URL" $((ROUNDS * H)) $H --out "$TMP" $members > "$TMP/launcher.log" 2>&1
for mode in bf16 fp32 int3; do
  sharded_same $mode "a fully_shard group" $ROUNDS
  say "$mode: a fully_shard group of 2 ends bit-identical to a single PyTorch worker"
done
