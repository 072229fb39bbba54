#!/bin/sh
# it_checkpoint_crafted.sh: crafted checkpoint files are refused with a clear message, never a crash.
#
# The files are the committed fuzz seeds of fuzz/corpus/checkpoint (written by
# fuzz/seeds_checkpoint.py): metadata numel 2^62 (and 2^62 + 1) with data_offsets of 0 (4) bytes,
# whose fp32 size wraps around 64 bits (issue 17: `checkpoint show` died with SIGSEGV), and two
# tensors that overlap. For each: `coordinator checkpoint show` exits 1 and `init --from-checkpoint`
# 1 or 2 (not a signal) with a message naming the problem, and init creates no run. The valid seeds of the
# same folder are accepted, so the refusals are about the crafted bytes.
. "$(dirname "$0")/lib.sh"
C=fuzz/corpus/checkpoint
start_redis

refused() { # FILE what-to-grep
  f=$1; pat=$2
  bin/coordinator checkpoint show "$C/$f" > "$TMP/show.log" 2>&1
  rc=$?
  [ $rc = 1 ] || fail "checkpoint show $f: exit $rc (want 1): $(cat "$TMP/show.log")"
  grep -q "$pat" "$TMP/show.log" || fail "checkpoint show $f: unclear message: $(cat "$TMP/show.log")"
  bin/coordinator init --redis "$URL" --run crafted --from-checkpoint "$C/$f" > "$TMP/init.log" 2>&1
  rc=$?
  [ $rc = 1 ] || [ $rc = 2 ] || fail "init --from-checkpoint $f: exit $rc (want 1 or 2): $(cat "$TMP/init.log")"
  grep -q "$pat" "$TMP/init.log" || fail "init --from-checkpoint $f: unclear message: $(cat "$TMP/init.log")"
  [ "$($RCLI EXISTS 'dl:{crafted}:config')" = 0 ] || fail "a refused init created the run"
  say "refused $f: $(cat "$TMP/show.log")"
}
refused crafted-numel-2p62.safetensors "4611686018427387904 elements of F32 do not fill data_offsets \[0, 0\]"
refused crafted-numel-2p62-plus-1.safetensors "4611686018427387905 elements of F32 do not fill data_offsets \[0, 4\]"
refused crafted-overlap.safetensors "overlap"

for f in valid.safetensors valid-dn.safetensors; do
  bin/coordinator checkpoint show "$C/$f" > "$TMP/show.log" 2>&1 || fail "checkpoint show $f: $(cat "$TMP/show.log")"
  grep -q "(valid)" "$TMP/show.log" || fail "checkpoint show $f: $(cat "$TMP/show.log")"
done
bin/coordinator init --redis "$URL" --run ok --from-checkpoint "$C/valid.safetensors" --workers 1 > "$TMP/init.log" 2>&1 \
  || fail "init --from-checkpoint valid.safetensors: $(cat "$TMP/init.log")"
[ "$($RCLI HGET 'dl:{ok}:config' numel)" = 4 ] || fail "the valid seed did not become a run of 4 parameters"
say "the valid seeds are accepted (show, init)"
echo PASS
