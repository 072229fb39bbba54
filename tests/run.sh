#!/bin/sh
# tests/run.sh [FILTER]: run every test (unit programs build/tests/test_* and integration scripts
# tests/it_*.sh) whose name contains FILTER, each with its own time limit, and print one summary line
# "N passed, N failed, N skipped" that CI reads. A test that exits 77 is counted as skipped (e.g. no GPU).
#
# TEST_JOBS tests run at once (default 2). The suite waits far more than it computes: its tests sit on
# sockets, heartbeats and timers (a serial run keeps the load average of 2 cores near 1), so two at a
# time cut its wall time nearly in half. A test whose file has a line "# test: light" counts as half a
# test: it waits on faults and timeouts most of its time (its CPU time a third of its wall time or less,
# measured: the chaos, failover and eviction tests), so up to 2 x TEST_JOBS of those run at once, or one
# other test and TEST_JOBS of them. A test whose file has a line "# test: alone" runs by itself, with
# nothing beside it: CPU-heavy tests, and tests that measure time against a bound. Every test has its own
# Redis on its own free port and its own temporary folder (tests/lib.sh), so they do not meet.
# TEST_JOBS=1 is the old serial run.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@" # wait -n
cd "$(dirname "$0")/.." || exit 1
filter=${1:-}

# python3 through pyenv's shim, a bash script that runs `pyenv exec`, costs 0.35 s of CPU a call against
# 0.02 s for the interpreter itself (measured here), and the suite calls python3 about 600 times: its
# harnesses, helpers and each test's tree_cpu.py. Where python3 is a script, the tests run the interpreter
# it picks (sys.executable) through build/test-bin/python3, a sh script that execs it by its own path (a
# link would hide a virtual environment's pyvenv.cfg, which Python looks for beside the path it was run by).
py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
if [ -n "$py" ] && [ "$(head -c 2 "$(command -v python3)")" = "#!" ]; then
  # (written beside and renamed over it: an earlier build/test-bin/python3 was a link to the interpreter,
  # which writing through it would destroy)
  mkdir -p build/test-bin &&
    printf '#!/bin/sh\nexec "%s" "$@"\n' "$py" > build/test-bin/python3.new && chmod +x build/test-bin/python3.new &&
    mv -f build/test-bin/python3.new build/test-bin/python3 && PATH="$PWD/build/test-bin:$PATH" && export PATH
fi
jobs_max=${TEST_JOBS:-2}
pass=0; fail=0; skip=0; failed=""
logdir=build/test-logs; mkdir -p "$logdir"
running="" # names of the tests in the background
load=0     # their weight: 2 for a test, 1 for a light one, at most 2 x jobs_max

# run_test PATH NAME: runs one test, then writes "EXIT SECONDS CPU SYS" to NAME.rc (its end, for the
# scheduler). CPU is the CPU seconds of the test and of every process it started, servers and workers
# included, SYS the kernel's part of them (tests/tools/tree_cpu.py): beside the wall seconds CPU says how
# much of its time a test waits, which is what "# test: light" is for.
run_test() {
  local start rc
  start=$(date +%s)
  case "$1" in
    *.sh) python3 tests/tools/tree_cpu.py "$logdir/$2.cpu" timeout -k 10 600 sh "$1" > "$logdir/$2.log" 2>&1 ;;
    *)    python3 tests/tools/tree_cpu.py "$logdir/$2.cpu" timeout -k 10 300 "$1" > "$logdir/$2.log" 2>&1 ;;
  esac
  rc=$?
  echo "$rc $(( $(date +%s) - start )) $(cat "$logdir/$2.cpu" 2>/dev/null)" > "$logdir/$2.rc.tmp" &&
    mv "$logdir/$2.rc.tmp" "$logdir/$2.rc"
  rm -f "$logdir/$2.cpu"
}

# report NAME: the line of a finished test, and the counts
report() {
  local rc secs cpu sys
  read -r rc secs cpu sys < "$logdir/$1.rc"
  rm -f "$logdir/$1.rc"
  if [ "$rc" -eq 0 ]; then pass=$((pass+1)); echo "PASS $1 (${secs}s, cpu ${cpu:-?}s, sys ${sys:-?}s)"
  elif [ "$rc" -eq 77 ]; then skip=$((skip+1)); echo "SKIP $1: $(tail -n 1 "$logdir/$1.log")"
  else fail=$((fail+1)); failed="$failed $1"; echo "FAIL $1 (exit $rc, ${secs}s); last lines of $logdir/$1.log:"
       tail -n 40 "$logdir/$1.log" | sed 's/^/    /'
  fi
}

# collect: reports the background tests that have finished (running holds NAME:WEIGHT)
collect() {
  local e still=""
  for e in $running; do
    if [ -f "$logdir/${e%:*}.rc" ]; then report "${e%:*}"; load=$((load - ${e##*:})); else still="$still $e"; fi
  done
  running=$still
}

# wait_fit W: until a test of weight W fits beside those in the background (W = 2 x jobs_max: none left)
wait_fit() {
  local e
  while [ -n "$running" ] && [ $((load + $1)) -gt $((2 * jobs_max)) ]; do
    wait -n 2>/dev/null
    if [ $? -eq 127 ]; then # no child left: one ended without its .rc (killed from outside)
      for e in $running; do [ -f "$logdir/${e%:*}.rc" ] || echo "137 0" > "$logdir/${e%:*}.rc"; done
    fi
    collect
  done
}

# marked SRC WORD: the test's file has a line "# test: WORD" (alone: runs by itself; light: half a test)
marked() { grep -q "^\(#\|/\*\|//\) *test: $2" "$1" 2>/dev/null; }

# Two passes: first the tests that run alone, one after another while nothing else runs (later, each
# would first wait for both running tests to end, a core idle meanwhile), then the others two at a time.
for pass_kind in alone shared; do
  for t in build/tests/test_* tests/it_*.sh; do
    [ -e "$t" ] || continue
    case "$t" in *.d) continue;; esac
    name=${t##*/}; name=${name%.sh} # (not basename: a process per test and pass)
    case "$name" in *"$filter"*) ;; *) continue;; esac
    src=$t; case "$t" in build/tests/*) src=tests/$name.c;; esac
    if [ "$jobs_max" -le 1 ] || marked "$src" alone; then kind=alone; else kind=shared; fi
    [ "$kind" = "$pass_kind" ] || continue
    rm -rf "$logdir/$name.rc" "$logdir/$name.logs" # (NAME.logs: a failed test's processes' logs, tests/lib.sh)
    if [ "$kind" = alone ]; then
      wait_fit $((2 * jobs_max))
      run_test "$t" "$name"
      report "$name"
    else
      weight=2; marked "$src" light && weight=1
      wait_fit $weight
      run_test "$t" "$name" &
      running="$running $name:$weight"; load=$((load + weight))
    fi
  done
done
wait_fit $((2 * jobs_max))
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
