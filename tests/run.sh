#!/bin/sh
# tests/run.sh [FILTER]: run every test (unit programs build/tests/test_* and integration scripts
# tests/it_*.sh) whose name contains FILTER, each with its own time limit, and print one summary line
# "N passed, N failed" that CI reads. A test that exits 77 is counted as skipped (e.g. no GPU).
cd "$(dirname "$0")/.." || exit 1
filter=${1:-}
pass=0; fail=0; skip=0; failed=""
logdir=build/test-logs; mkdir -p "$logdir"
for t in build/tests/test_* tests/it_*.sh; do
  [ -e "$t" ] || continue
  case "$t" in *.d) continue;; esac
  name=$(basename "$t" .sh)
  case "$name" in *"$filter"*) ;; *) continue;; esac
  start=$(date +%s)
  case "$t" in
    *.sh) timeout -k 10 600 sh "$t" > "$logdir/$name.log" 2>&1 ;;
    *)    timeout -k 10 300 "$t" > "$logdir/$name.log" 2>&1 ;;
  esac
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "PASS $name (${secs}s)"
  elif [ $rc -eq 77 ]; then skip=$((skip+1)); echo "SKIP $name: $(tail -n 1 "$logdir/$name.log")"
  else fail=$((fail+1)); failed="$failed $name"; echo "FAIL $name (exit $rc, ${secs}s); last lines of $logdir/$name.log:"
       tail -n 40 "$logdir/$name.log" | sed 's/^/    /'
  fi
done
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
