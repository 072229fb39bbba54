#!/bin/sh
# it_cuda_group_hooks.sh: process groups whose ranks hold their parameters on a CUDA device, which libdiloco
# reaches through the CUDA backend's device hooks (worker/cuda/diloco_cuda.cu: the pseudo-gradient kernel
# over the rank's part of a fragment, its bf16 cast, loads of whole fragments, Streaming's mix kernel), with
# the same bytes as the host path. tests/tools/group_worker --device-hooks cuda: each rank (a thread) makes a
# dl_cuda with a device buffer of its own and gives libdiloco no params pointer; the quadratic trainer steps
# on the host and its values are uploaded before each diloco_after_step and downloaded after a sync, where a
# CUDA trainer's would already be. In every run group g1 has the hooks and group g2 (same flags) has none,
# and the shard digests equal tests/tools/ref_quadratic's of the two as single workers:
#   1. plain DiLoCo, 4 rounds, bf16 and fp32 (--no-bf16); both ranks of each group synced at the same steps
#      from the same parameters; each rank of g1 called the delta hook once a round and loaded every version;
#   2. Streaming, 4 fragments, alpha 0.25 (not 0.5, whose mix is symmetric), 2 in flight, final sync: the
#      mix goes through the device's kernel;
#   3. sharded groups (a run made with --fsdp-ranks 2: each rank's device holds its half of the vector).
# Runs on a GPU (bin/libdiloco_gpt_cuda.so and nvidia-smi -L), or on the backend DILOCO_CUDA_BACKEND names
# (tests/it_cuda_emu.sh runs it on the CPU CUDA emulator's); else skipped (77). Not run on a GPU so far.
. "$(dirname "$0")/lib.sh"
need_cuda_backend
NUMEL=32000; SEED=13; H=10; ROUNDS=4
start_redis

check_ref() { # RUN WHAT [ref_quadratic flags]: the shard digests against the reference of g1 and g2 alone
  _run=$1; _what=$2; shift 2
  build/tests/tools/ref_quadratic --numel $NUMEL --seed $SEED --workers g1,g2 --sync-every $H "$@" \
    --shards "$($RCLI HGET "dl:{$_run}:config" shards)" --bounds "$($RCLI HGET "dl:{$_run}:config" shard_bounds)" \
    > "$TMP/ref-$_run.txt" || fail "reference of $_run"
  shard_digests "$_run" > "$TMP/got-$_run.txt"
  grep '^shard' "$TMP/ref-$_run.txt" | diff - "$TMP/got-$_run.txt" > "$TMP/diff.txt" ||
    fail "$_what: shard digests differ from the reference: $(cat "$TMP/diff.txt")"
}
hooks_of() { # RUN RANK: "delta snapshot copy mix" of g1's rank
  sed -n "s/^hooks rank $2 delta \([0-9]*\) snapshot \([0-9]*\) copy \([0-9]*\) mix \([0-9]*\)$/\1 \2 \3 \4/p" "$TMP/g1-$1.out"
}

for mode in bf16 fp32; do
  RUN=cg$mode; flags=""; [ $mode = fp32 ] && flags=--no-bf16
  init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED
  start_server "a$RUN" --lease-ttl-ms 2000
  start_server "b$RUN" --lease-ttl-ms 2000
  hook_groups cuda $RUN $((ROUNDS * H)) $flags
  wait_hook_groups $RUN
  ref=""; [ $mode = fp32 ] && ref=--no-bf16
  check_ref $RUN "$RUN (g1 on CUDA device hooks, g2 on the host path)" --rounds $ROUNDS $ref
  for g in g1 g2; do group_same_syncs "$TMP/$g-$RUN.out" "$RUN: $g"; done
  for r in 0 1; do
    set -- $(hooks_of $RUN $r)
    [ "${1:-0}" -eq $ROUNDS ] && [ "${3:-0}" -ge $((ROUNDS + 1)) ] ||
      fail "$RUN: g1 rank $r's hooks: delta '${1:-}' (want $ROUNDS), load copy '${3:-}' (want >= $((ROUNDS + 1)))"
  done
  say "$RUN: a group of 2 on CUDA device hooks and one on the host path, bit-identical to 2 single workers"
done

RUN=cgstream; STEPS=100
init_run $RUN --trainer quadratic --numel $NUMEL --shards 16 --fragments 4 --workers 2 --seed $SEED
start_server "a$RUN" --lease-ttl-ms 2000
start_server "b$RUN" --lease-ttl-ms 2000
hook_groups cuda $RUN $STEPS --fragment-alpha 0.25 --fragments-in-flight 2 --final-sync
wait_hook_groups $RUN
check_ref $RUN "Streaming, alpha 0.25, 2 in flight (g1 on CUDA device hooks)" --steps $STEPS --alpha 0.25 --in-flight 2 \
  --final-sync --frag-bounds "$($RCLI HGET "dl:{$RUN}:config" frag_bounds)"
f1=$(grep '^final rank 0 ' "$TMP/g1-$RUN.out" | awk '{print $NF}'); f2=$(grep '^final rank 0 ' "$TMP/g2-$RUN.out" | awk '{print $NF}')
[ -n "$f1" ] && [ "$f1" = "$f2" ] || fail "$RUN: after the final sync g1 (CUDA) holds '$f1', g2 '$f2'"
for r in 0 1; do
  set -- $(hooks_of $RUN $r)
  [ "${4:-0}" -gt 0 ] || fail "$RUN: g1 rank $r never mixed through its device (hooks: '$*')"
done
say "$RUN: Streaming (4 fragments, alpha 0.25, 2 in flight, final sync) with g1 on CUDA device hooks, bit-identical to the reference; both groups end at $f1"

RUN=cgsharded
init_run $RUN --trainer quadratic --numel $NUMEL --shards 4 --workers 2 --seed $SEED --fsdp-ranks 2
start_server "a$RUN" --lease-ttl-ms 2000
hook_groups cuda $RUN $((ROUNDS * H)) --sharded
wait_hook_groups $RUN
check_ref $RUN "$RUN (sharded groups, g1 on CUDA device hooks)" --rounds $ROUNDS
for r in 0 1; do
  set -- $(hooks_of $RUN $r)
  [ "${1:-0}" -eq $ROUNDS ] && [ "${3:-0}" -ge $ROUNDS ] ||
    fail "$RUN: g1 rank $r's hooks: delta '${1:-}' (want $ROUNDS), load copy '${3:-}' (want >= $ROUNDS)"
done
say "$RUN: sharded groups of 2 (each rank's device its half), g1 on CUDA device hooks, bit-identical to 2 single workers"
