#!/bin/sh
# it_log_disk_full.sh: a worker whose --log file is on a full disk trains on, and says once that its lines are
# lost (before, nothing was said: the file stayed empty and the operator found out later). A 16 KB tmpfs,
# filled before the worker starts.
. "$(dirname "$0")/lib.sh"
mkdir -p "$TMP/small"
mount -t tmpfs -o size=16k tmpfs "$TMP/small" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs (needs root)"; exit 77; }
trap '_r=$?; umount "$TMP/small" 2>/dev/null; (exit $_r); cleanup' EXIT
dd if=/dev/zero of="$TMP/small/fill" bs=1k count=64 2>/dev/null # (stops at the size: full)
RUN=logfull
start_redis
init_run $RUN --trainer quadratic --numel 2000 --shards 2 --workers 1
start_server s1
bin/worker --redis "$URL" --run $RUN --worker-id w1 --sync-every 5 --steps 20 --quiet --log "$TMP/small/w1.jsonl" \
  > "$TMP/worker-w1.log" 2>&1 || fail "the worker exited with status $?"
v=$($RCLI HGET "dl:{$RUN}:shards" 0:version)
[ "$v" = 4 ] || fail "shard 0 at version $v after 20 steps at H 5, want 4"
grep -q 'WARN cannot write the --log file: No space left on device; its lines are lost from here on' \
  "$TMP/worker-w1.log" || fail "the worker did not say that its log is lost: $(cat "$TMP/worker-w1.log")"
n=$(grep -c 'cannot write the --log file' "$TMP/worker-w1.log")
[ "$n" = 1 ] || fail "said $n times, want once"
say "OK: version $v; $(grep -o 'cannot write the --log file: [^;]*' "$TMP/worker-w1.log")"
