#!/bin/sh
# it_disk_full.sh: a full disk (a 64 KB tmpfs) under a worker's --log and a coordinator's checkpoint folder.
#   - the worker trains on and says once that its --log lines are lost (before, nothing was said: the file
#     stayed empty);
#   - `coordinator checkpoint save --dir --keep 1` fails (exit 1) saying the disk is full, what a checkpoint
#     needs and that --keep prunes only after a save succeeds (before: only "No space left on device"); the
#     checkpoint saved before is unchanged and no temporary file is left.
. "$(dirname "$0")/lib.sh"
mkdir -p "$TMP/small"
mount -t tmpfs -o size=64k tmpfs "$TMP/small" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs (needs root)"; exit 77; }
trap '_r=$?; umount "$TMP/small" 2>/dev/null; (exit $_r); cleanup' EXIT
RUN=diskfull
start_redis
init_run $RUN --trainer quadratic --numel 2000 --shards 2 --workers 1
start_server s1
bin/coordinator checkpoint save --redis "$URL" --run $RUN --dir "$TMP/small/ck" --keep 1 > "$TMP/save1.txt" 2>&1 ||
  fail "the first checkpoint: $(cat "$TMP/save1.txt")"
first=$(ls "$TMP/small/ck"/*.safetensors)
sum=$(sha256sum < "$first")
dd if=/dev/zero of="$TMP/small/fill" bs=1k count=128 2>/dev/null # (stops at the size: full)

bin/worker --redis "$URL" --run $RUN --worker-id w1 --sync-every 5 --steps 20 --quiet --log "$TMP/small/w1.jsonl" \
  > "$TMP/worker-w1.log" 2>&1 || fail "the worker exited with status $?"
v=$($RCLI HGET "dl:{$RUN}:shards" 0:version)
[ "$v" = 4 ] || fail "shard 0 at version $v after 20 steps at H 5, want 4"
grep -q 'WARN cannot write the --log file: No space left on device; its lines are lost from here on' \
  "$TMP/worker-w1.log" || fail "the worker did not say that its log is lost: $(cat "$TMP/worker-w1.log")"
n=$(grep -c 'cannot write the --log file' "$TMP/worker-w1.log")
[ "$n" = 1 ] || fail "said $n times, want once"

bin/coordinator checkpoint save --redis "$URL" --run $RUN --dir "$TMP/small/ck" --keep 1 > "$TMP/save2.txt" 2>&1 &&
  fail "a checkpoint saved on a full disk: $(cat "$TMP/save2.txt")"
grep -q 'No space left on device (the disk is full: a checkpoint of this run needs 16 KB there besides the ones kept; --keep deletes older ones only after a save succeeds' \
  "$TMP/save2.txt" || fail "checkpoint save on a full disk says: $(cat "$TMP/save2.txt")"
[ "$(sha256sum < "$first")" = "$sum" ] || fail "the checkpoint saved before changed"
[ "$(ls "$TMP/small/ck" | grep -c tmp)" = 0 ] || fail "temporary files left: $(ls "$TMP/small/ck")"
say "OK: version $v; $(grep -o 'cannot write the --log file: [^;]*' "$TMP/worker-w1.log"); $(cat "$TMP/save2.txt")"
