#!/bin/sh
# fuzz/run.sh SECONDS [TARGET...]: run each libFuzzer target (build/fuzz/fuzz_TARGET; default: all)
# for SECONDS, niced, starting from its committed seeds (fuzz/corpus/TARGET, read only) and what
# earlier runs found (build/fuzz/corpus/TARGET, where new inputs go). A crash leaves its input in
# build/fuzz/artifacts/TARGET-crash-* and the exit status is 1; `make fuzz` calls this.
cd "$(dirname "$0")/.." || exit 1
secs=${1:-300}
[ $# -gt 0 ] && shift
targets=${*:-$(ls fuzz/fuzz_*.c | sed 's|fuzz/fuzz_\(.*\)\.c|\1|')}
failed=""
mkdir -p build/fuzz/artifacts
for t in $targets; do
  bin=build/fuzz/fuzz_$t
  [ -x "$bin" ] || { echo "fuzz: $bin is missing: make fuzz-build (needs clang-14)"; exit 2; }
  mkdir -p "build/fuzz/corpus/$t"
  echo "== $t: ${secs}s"
  if nice "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="build/fuzz/artifacts/$t-" "build/fuzz/corpus/$t" "fuzz/corpus/$t" \
       > "build/fuzz/$t.log" 2>&1; then
    grep -E '^#[0-9]+ +DONE|stat::number_of_executed_units|cov:' "build/fuzz/$t.log" | tail -n 2
  else
    failed="$failed $t"
    echo "fuzz: $t FAILED; the input is in build/fuzz/artifacts/$t-*; end of build/fuzz/$t.log:"
    grep -v '^#[0-9]' "build/fuzz/$t.log" | tail -n 30
  fi
done
[ -z "$failed" ] && echo "fuzz: no crash in$(echo " $targets" | tr '\n' ' ')" && exit 0
echo "fuzz: crashes in:$failed (reproduce: build/fuzz/fuzz_TARGET build/fuzz/artifacts/TARGET-crash-...)"
exit 1
