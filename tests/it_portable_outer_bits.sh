#!/bin/sh
# it_portable_outer_bits.sh: the outer step gives the same bits on a CPU without AVX2 and FMA.
# On such a CPU the kernels run their baseline builds (common/math/outer_fma.h): the default clones of
# the OUTER_HOT kernels, the portable one-pass commit kernel instead of outer_avx2.c, and the C
# library's software fmaf instead of the FMA instruction. qemu-x86_64 -cpu Nehalem (SSE4.2: no AVX,
# no FMA, as gcc's dispatch and glibc's see it) runs them here:
#   - test_outer_step (every build against the exact torch reference) and test_dn_math pass there;
#   - ref_quadratic, a whole 4-round run of the outer math (bf16 and fp32 pseudo-gradients), prints
#     the same digests under emulation as natively.
# Skips (77) without qemu-x86_64 (Debian qemu-user) or off x86-64.
cd "$(dirname "$0")/.." || exit 1
[ "$(uname -m)" = x86_64 ] || { echo "SKIP: not an x86-64 machine"; exit 77; }
command -v qemu-x86_64 > /dev/null || { echo "SKIP: qemu-x86_64 is missing (apt-get install qemu-user)"; exit 77; }
[ -x build/tests/test_outer_step ] && [ -x build/tests/tools/ref_quadratic ] || { echo "FAIL: build first: make tests-build"; exit 1; }
TMP=$(mktemp -d /tmp/dltest.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
OLD="qemu-x86_64 -cpu Nehalem"
fail() { echo "FAIL: $*"; exit 1; }

for t in test_outer_step test_dn_math; do
  $OLD build/tests/$t > "$TMP/$t.log" 2>&1 || { tail -n 30 "$TMP/$t.log"; fail "$t on a CPU without AVX2/FMA"; }
  echo "$t passes on a CPU without AVX2/FMA: $(grep -c '\[       OK \]' "$TMP/$t.log") tests"
done
for pg in "" --no-bf16; do
  set -- --numel 50003 --shards 4 --seed 5 --workers w1,w2 --rounds 4 --sync-every 10 $pg
  build/tests/tools/ref_quadratic "$@" > "$TMP/native.txt" 2>&1 || fail "ref_quadratic $*: $(cat "$TMP/native.txt")"
  $OLD build/tests/tools/ref_quadratic "$@" > "$TMP/old.txt" 2> "$TMP/old.err" || fail "ref_quadratic under qemu: $(cat "$TMP/old.err")"
  grep -q '^all ' "$TMP/native.txt" || fail "ref_quadratic printed no digest"
  diff "$TMP/native.txt" "$TMP/old.txt" > "$TMP/diff.txt" || fail "ref_quadratic $*: digests differ without AVX2/FMA: $(cat "$TMP/diff.txt")"
  echo "ref_quadratic ${pg:-(bf16)}: the same digests natively and without AVX2/FMA: $(grep '^all' "$TMP/native.txt")"
done
echo "the baseline builds give this machine's bits"
