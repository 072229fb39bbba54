#!/bin/sh
# it_checkpoint_crafted.sh: crafted checkpoint files are refused with a clear message, never a crash.
#
# The files are the committed fuzz seeds of fuzz/corpus/checkpoint (written by
# fuzz/seeds_checkpoint.py): metadata numel 2^62 (and 2^62 + 1) with data_offsets of 0 (4) bytes,
# whose fp32 size wraps around 64 bits (issue 17: `checkpoint show` died with SIGSEGV), and two
# tensors that overlap, and a valid seed with one data byte changed (its digest no longer holds). For
# each: `coordinator checkpoint show`, `init --from-checkpoint` and `repair --from-checkpoint` exit 1 (bad
# data; not 2, not a signal) with a message naming the problem, and init creates no run; a file that does
# not exist, or is a directory, is a usage error (2) for all three (docs/checkpoints.md, "Exit status"). The valid seeds of
# the same folder are accepted, so the refusals are about the crafted bytes.
. "$(dirname "$0")/lib.sh"
C=fuzz/corpus/checkpoint
start_redis

refused() { # FILE what-to-grep [exit status, default 1]
  f=$1; pat=$2; want=${3:-1}
  case $f in /*) ;; *) f="$C/$f";; esac
  bin/coordinator checkpoint show "$f" > "$TMP/show.log" 2>&1
  rc=$?
  [ $rc = "$want" ] || fail "checkpoint show $f: exit $rc (want $want): $(cat "$TMP/show.log")"
  grep -q "$pat" "$TMP/show.log" || fail "checkpoint show $f: unclear message: $(cat "$TMP/show.log")"
  bin/coordinator init --redis "$URL" --run crafted --from-checkpoint "$f" > "$TMP/init.log" 2>&1
  rc=$?
  [ $rc = "$want" ] || fail "init --from-checkpoint $f: exit $rc (want $want): $(cat "$TMP/init.log")"
  grep -q "$pat" "$TMP/init.log" || fail "init --from-checkpoint $f: unclear message: $(cat "$TMP/init.log")"
  [ "$($RCLI EXISTS 'dl:{crafted}:config')" = 0 ] || fail "a refused init created the run"
  bin/coordinator repair --redis "$URL" --run crafted --from-checkpoint "$f" > "$TMP/repair.log" 2>&1
  rc=$?
  [ $rc = "$want" ] || fail "repair --from-checkpoint $f: exit $rc (want $want): $(cat "$TMP/repair.log")"
  grep -q "$pat" "$TMP/repair.log" || fail "repair --from-checkpoint $f: unclear message: $(cat "$TMP/repair.log")"
  say "refused $f (exit $want): $(cat "$TMP/show.log")"
}
refused crafted-numel-2p62.safetensors "4611686018427387904 elements of F32 do not fill data_offsets \[0, 0\]"
refused crafted-numel-2p62-plus-1.safetensors "4611686018427387905 elements of F32 do not fill data_offsets \[0, 4\]"
refused crafted-overlap.safetensors "overlap"
refused "$TMP/none.safetensors" "No such file" 2
mkdir "$TMP/dir.safetensors"
refused "$TMP/dir.safetensors" "is a directory" 2 # open() takes it: it was "shorter than 8 bytes", exit 1

for f in valid.safetensors valid-dn.safetensors; do
  bin/coordinator checkpoint show "$C/$f" > "$TMP/show.log" 2>&1 || fail "checkpoint show $f: $(cat "$TMP/show.log")"
  grep -q "(valid)" "$TMP/show.log" || fail "checkpoint show $f: $(cat "$TMP/show.log")"
done
bin/coordinator init --redis "$URL" --run ok --from-checkpoint "$C/valid.safetensors" --workers 1 > "$TMP/init.log" 2>&1 \
  || fail "init --from-checkpoint valid.safetensors: $(cat "$TMP/init.log")"
[ "$($RCLI HGET 'dl:{ok}:config' numel)" = 4 ] || fail "the valid seed did not become a run of 4 parameters"
say "the valid seeds are accepted (show, init)"
# a checkpoint of that run with one byte of its parameters changed: the file parses, its digest does not hold
bin/coordinator checkpoint save --redis "$URL" --run ok --out "$TMP/ok.safetensors" > "$TMP/save.log" 2>&1 || fail "save"
python3 - "$TMP/ok.safetensors" "$TMP/bad-digest.safetensors" <<'EOF'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
start = 8 + n + json.loads(b[8:8 + n])["params"]["data_offsets"][0]
b[start] ^= 0x40
open(sys.argv[2], "wb").write(b)
EOF
refused "$TMP/bad-digest.safetensors" "params are corrupt: XXH3 [0-9a-f]*, metadata says"
echo PASS
