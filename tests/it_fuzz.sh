#!/bin/sh
# it_fuzz.sh: every libFuzzer target (fuzz/fuzz_*.c, built by `make tests-build` with clang,
# AddressSanitizer and UBSan) runs each of its committed seeds (fuzz/corpus/NAME: valid inputs, the
# crafted ones of issue 17, and every input a fuzzer once crashed on), then fuzzes for FUZZ_TEST_SECONDS
# (default 1) from them, so a decoder that crashes, reads out of bounds, overflows or breaks a
# target's own checks again fails `make test`. A failure prints the input (base64) and the command
# that reproduces it. New inputs go to a temporary folder, never into the committed corpus.
. "$(dirname "$0")/lib.sh"
secs=${FUZZ_TEST_SECONDS:-1}
n=0
for src in fuzz/fuzz_*.c; do
  t=$(basename "$src" .c | sed 's/^fuzz_//')
  bin=build/fuzz/fuzz_$t
  [ -x "$bin" ] || fail "$bin is missing: make tests-build builds it with clang-14 (apt-get install clang-14 libclang-rt-14-dev)"
  ls fuzz/corpus/"$t"/* > /dev/null 2>&1 || fail "target $t has no seeds in fuzz/corpus/$t (make fuzz-seeds)"
  mkdir -p "$TMP/corpus-$t"
  if ! "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$TMP/$t-" \
       "$TMP/corpus-$t" fuzz/corpus/"$t" > "$TMP/$t-fuzz.log" 2>&1; then
    grep -v '^#[0-9]' "$TMP/$t-fuzz.log" | tail -n 40
    for a in "$TMP/$t"-crash-* "$TMP/$t"-leak-* "$TMP/$t"-oom-* "$TMP/$t"-timeout-*; do
      [ -f "$a" ] && echo "input (base64): $(base64 -w0 "$a")"
    done
    grep -q INITED "$TMP/$t-fuzz.log" ||
      fail "target $t failed on a committed seed (reproduce: $bin fuzz/corpus/$t/*)"
    fail "target $t failed within ${secs}s of fuzzing: save the input above (base64 -d) and run $bin FILE"
  fi
  say "$t: $(ls fuzz/corpus/"$t" | wc -l) seeds pass, $(grep -o 'DONE *cov: [0-9]*' "$TMP/$t-fuzz.log" | sed 's/DONE *//') after ${secs}s of fuzzing"
  n=$((n + 1))
done
[ $n -ge 10 ] || fail "only $n fuzz targets (want one per decoder, docs/fuzzing.md)"
echo PASS
