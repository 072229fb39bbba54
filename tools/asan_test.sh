#!/bin/sh
# asan_test.sh [FILTER]: run tests/run.sh FILTER in the AddressSanitizer + UBSan build of `make asan`
# (run from that copy of the tree, build-asan/), then gather every sanitizer report into reports/ there.
#
# ASan and LeakSanitizer write reports/asan.PID themselves. UBSan's go to the stderr of the process
# (its log_path is not honoured beside ASan, gcc 12), which the tests send into their temporary
# folders: the tests keep them (KEEP_TMP), each kept folder is searched for reports (copied to
# reports/TEST-FILE), then removed. Leaks at exit of the reference tools (tests/tools/ref_*.c, which
# exit without freeing) are suppressed (tests/lsan.supp). Python tests load the instrumented
# build/libdiloco.so into /usr/bin/python3 with libasan preloaded (Python's own leaks not counted).
# Exits 1 when a test failed or any report was written.
cd "$(dirname "$0")/.." || exit 1
[ -x bin/worker ] && [ -f build/libdiloco.so ] || { echo "asan_test: run it in the tree make asan built (build-asan/)"; exit 2; }
root=$(pwd)
mkdir -p reports
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:halt_on_error=1:log_path=$root/reports/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp"
export PYTHON="env LD_PRELOAD=$(${CC:-cc} -print-file-name=libasan.so) ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0 /usr/bin/python3"
export KEEP_TMP=1
touch reports/.start
# the first line of a report (not a mention of one, as in docs/fuzzing.md, which some tests copy)
report='^[^ ]+:[0-9]+:[0-9]+: runtime error: |^==[0-9]+==ERROR: (AddressSanitizer|LeakSanitizer)'
sh tests/run.sh "${1:-}"
rc=$?
for log in $(find build/test-logs -name '*.log' -newer reports/.start); do
  t=$(basename "$log" .log)
  for d in $(sed -n 's|^logs kept in \(/tmp/dltest\.[A-Za-z0-9]*\)$|\1|p' "$log"); do
    for f in $(grep -rlE "$report" "$d" 2>/dev/null); do
      cp "$f" "reports/$t-$(basename "$f")"
    done
    rm -rf "$d"
  done
done
found=$(grep -lE "$report" $(find reports -type f -newer reports/.start) 2>/dev/null)
if [ -n "$found" ]; then
  echo "asan_test: sanitizer reports:"; echo "$found" | sed "s|^|  $root/|"
  exit 1
fi
echo "asan_test: no sanitizer report"
exit $rc
