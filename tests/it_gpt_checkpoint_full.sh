#!/bin/sh
# it_gpt_checkpoint_full.sh: a GPT worker whose --checkpoint disk fills up keeps training. A 400 KB tmpfs holds
# the first checkpoint (step 10, 264 KB) but not a second one beside it (written to a temporary file, then
# renamed over it): the saves of steps 20, 30 and 40 fail. The worker says so once (the disk is full, the
# checkpoint before is unchanged), trains its 40 steps and syncs 4 rounds, exits 0, and the checkpoint of step
# 10 is whole and no temporary file is left. Before, the first failed save ended the worker (exit 1, "training
# step failed: ... No space left on device") after 20 steps, and the run waited for it.
. "$(dirname "$0")/lib.sh"
prepare_bible
mkdir -p "$TMP/small"
mount -t tmpfs -o size=400k tmpfs "$TMP/small" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs (needs root)"; exit 77; }
trap '_r=$?; umount "$TMP/small" 2>/dev/null; (exit $_r); cleanup' EXIT
RUN=ckfull
start_redis
init_run $RUN --trainer gpt --layers 1 --heads 2 --dim 32 --ctx 32 --shards 2 --workers 1 --seed 5
start_server s1
start_worker w1 --sync-every 10 --steps 40 --data build/kjv.tok --batch 2 --seq 32 --threads 1 \
  --checkpoint "$TMP/small/ck.st" --checkpoint-every 10 --heartbeat-interval 1
wait_workers w1
v=$($RCLI HGET "dl:{$RUN}:shards" 0:version)
[ "$v" = 4 ] || fail "shard 0 at version $v after 40 steps at H 10, want 4"
grep -q 'gpt: step 20: checkpoint .*ck.st: writing .*: No space left on device (1 in a row); training goes on' \
  "$TMP/worker-w1.log" || fail "the worker did not say that the checkpoint of step 20 failed: $(grep gpt: "$TMP/worker-w1.log")"
n=$(grep -c 'training goes on' "$TMP/worker-w1.log")
[ "$n" = 1 ] || fail "$n lines about failed checkpoints, want 1 (then once a minute)"
step=$(python3 -c "
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
size = max(e['data_offsets'][1] for k, e in h.items() if k != '__metadata__')
print(h['__metadata__']['step'] if len(b) == 8 + n + size else 'truncated')" "$TMP/small/ck.st") ||
  fail "cannot read the checkpoint"
[ "$step" = 10 ] || fail "the checkpoint left is of step $step, want the whole one of step 10"
left=$(ls "$TMP/small" | grep -c 'tmp')
[ "$left" = 0 ] || fail "temporary files left on the full disk: $(ls "$TMP/small")"
say "OK: 40 steps, version $v; checkpoint of step 10 kept whole; $(grep 'training goes on' "$TMP/worker-w1.log")"
