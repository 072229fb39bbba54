#!/bin/sh
# it_python_group_hooks.sh: rediloco's process groups on the CUDA device hooks, without a GPU: the ranks' models
# stay on the CPU, and the CUDA backend's hooks (worker/cuda/diloco_cuda.cu, through libdiloco_cuda.so's
# entry) run on the CPU CUDA emulator (build/emu/libdiloco_cuda.so), which takes each rank's flat buffer as
# device memory (tests/python/emu_hooks.py; group_quad.py --device emu). libdiloco gets no host parameters
# then: each rank's pseudo-gradient of its part is taken by the hooks' kernels, the group's broadcast moves
# libdiloco's own host copy (python/rediloco/group.py), and the hooks load the new values into the rank's
# buffer; nothing else can reach it, so a run bit-identical to the reference is the hooks' work. One launcher forks every group, and a
# single PyTorch worker w3 on the same hooks (tests/python/quad_worker.py --device emu) joins two of the runs:
#   phb  bf16: g1 on the emulated hooks, g2 on the CPU, w3 on the hooks, against three single workers
#        (tests/tools/ref_quadratic);
#   phf  fp32: g1 on the hooks, g2 through the host mirror (REDILOCO_HOST_COPY=1), against two;
#   phs  Streaming, 2 fragments, alpha 0.25 (the hooks' mix kernel), 2 in flight: both groups and w3 on the
#        hooks, against the fragment-schedule reference;
#   pha  async (Delayed Nesterov 2): g1 on the hooks, against the replay of the order Redis recorded;
#   phas async Streaming (2 fragments): g1 on the hooks (each rank's thread places the submission, delivers
#        its part and loads through the hooks while the ranks train), against the replay.
# Every rank of a hooked group must say "path device hooks". On a GPU, tests/it_cuda_python_group.sh runs
# groups on the real hooks. Skipped (77) without the emulator's library (it is built with the CUDA backend,
# when nvcc exists) or without torch.
. "$(dirname "$0")/lib.sh"
need_torch
EMU_LIB=build/emu/libdiloco_cuda.so
[ -f "$EMU_LIB" ] || { echo "no $EMU_LIB (built by make tests-build when nvcc exists): skipped"; exit 77; }
export REDILOCO_CUDA_LIB="$PWD/$EMU_LIB"
NUMEL=20000; SEED=17; ROUNDS=3; H=10
start_redis
init_run phb --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED
init_run phf --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED
init_run phs --trainer quadratic --numel $NUMEL --shards 8 --fragments 2 --workers 3 --seed $SEED
init_run pha --async --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED --dn-buffer-size 2
init_run phas --async --trainer quadratic --numel $NUMEL --shards 8 --fragments 2 --workers 2 --seed $SEED --dn-buffer-size 2
for RUN in phb phf phs pha phas; do start_server a$RUN --lease-ttl-ms 2000; start_server b$RUN --lease-ttl-ms 2000; done
single() { # RUN [FLAGS]: w3, a single PyTorch worker on the emulated hooks, in the background
  r=$1; shift
  $PYTHON tests/python/quad_worker.py "$URL" $r w3 $((ROUNDS * H)) $H --numel $NUMEL --seed $SEED --device emu \
    --digests "$TMP/$r-w3.digests" "$@" > "$TMP/$r-w3.log" 2>&1 &
  eval "W3_$r=\$!"; PIDS="$PIDS $!"
}
single phb
single phs --fragment-alpha 0.25 --fragments-in-flight 2
$PYTHON tests/python/group_quad.py "$URL" phb g2 $((ROUNDS * H)) $H --ranks 2 --numel $NUMEL --seed $SEED \
  --out "$TMP/phb-g2" --start-method fork --also phb:g1:emu --also phf:g1:fp32:emu --also phf:g2:fp32:copy \
  --also phs:g1:emu:alpha=0.25:flight=2 --also phs:g2:emu:alpha=0.25:flight=2 --also pha:g1:emu --also pha:g2 --also phas:g1:emu --also phas:g2 \
  > "$TMP/py-groups.log" 2>&1 || fail "the groups' launcher exited with status $?: $(tail -n 20 "$TMP/py-groups.log")"

for r in phb phs; do
  eval "wait \$W3_$r" || fail "$r: w3 (a single worker on the emulated hooks) exited with status $?: $(tail -n 5 "$TMP/$r-w3.log")"
  grep -q "over device hooks" "$TMP/$r-w3.log" || fail "$r: w3 did not say it moved its parameters by the device hooks: $(tail -n 3 "$TMP/$r-w3.log")"
done
# path RUN GROUP WANT: both ranks of the group said they move their parameters by WANT
path() {
  for r in 0 1; do
    [ "$(grep '^path' "$TMP/$1-$2.rank$r")" = "path $3" ] || fail "$1 $2 rank $r: '$(grep '^path' "$TMP/$1-$2.rank$r")', not '$3'"
  done
}
ends_at() { # RUN: every rank's last sync reported $REF (plain runs: the whole vector after the last round), and w3's
  for g in g1 g2; do
    for r in 0 1; do
      [ "$(grep '^sync' "$TMP/$1-$g.rank$r" | tail -n 1 | cut -d' ' -f3)" = "$REF" ] || fail "$1: $g rank $r does not end at $REF"
    done
  done
  [ ! -f "$TMP/$1-w3.digests" ] || [ "$(tail -n 1 "$TMP/$1-w3.digests" | cut -d' ' -f2)" = "$REF" ] || fail "$1: w3 does not end at $REF"
}
path phb g1 "device hooks"; path phb g2 cpu
quad_ref phb g1,g2,w3 --rounds $ROUNDS; ends_at phb
say "phb (bf16): a group on the emulated CUDA hooks, a group on the CPU and a single worker on the hooks bit-identical to 3 single workers: $REF"
path phf g1 "device hooks"; path phf g2 "pinned host copy"
quad_ref phf g1,g2 --rounds $ROUNDS --no-bf16; ends_at phf
say "phf (fp32): a group on the hooks and a group through the host mirror bit-identical to 2 single workers: $REF"
path phs g1 "device hooks"; path phs g2 "device hooks"
quad_ref phs g1,g2,w3 --steps $((ROUNDS * H)) --alpha 0.25 --in-flight 2 --frag-bounds "$($RCLI HGET "dl:{phs}:config" frag_bounds)"
say "phs (Streaming, 2 fragments, alpha 0.25, 2 in flight): 2 groups and a single worker on the hooks bit-identical to the fragment schedule ($(shard_versions phs))"
path pha g1 "device hooks"
ref_async_check pha $H "(a group on the emulated hooks beside a group on the CPU)" --sync-every 20
path phas g1 "device hooks"
ref_async_check phas $H "(async Streaming: a group on the emulated hooks beside a group on the CPU)" --sync-every 20
