#!/bin/sh
# it_checkpoint.sh: checkpoint export and resume (docs/checkpoints.md).
#
# 3 workers, 2 shard-servers, 8 shards, 3 sync rounds of the quadratic trainer (snapshots every 2
# versions, so the export replays snapshot + log), then `coordinator checkpoint save`. Checks:
#  - tests/checkpoint_read.py (numpy, parses safetensors by hand) finds the XXH3 of every shard's
#    bytes equal to dl:{R}:shards k:digest, the whole vector equal to the in-process reference
#    (tests/tools/ref_quadratic) and to the workers' last sync digest, version 3, momentum present;
#  - `coordinator init --run R2 --from-checkpoint` gives R2 the same shard digests as R;
#  - one more round with fresh workers on R and on R2 ends bit-identical (so R2's version 0 carried
#    the outer momentum), while R3 resumed with --reset-momentum ends different;
#  - --dir/--keep writes checkpoint-<version>.safetensors and keeps the newest K;
#  - a model that does not match, a foreign safetensors file and a corrupt checkpoint are refused
#    with a clear message and create no run;
#  - Delayed Nesterov (async, N=3): 8 submissions, so the buffer holds 2 (t = 8), exported with
#    `checkpoint save --dir` (what `serve --save-every` calls) as a third tensor; the file's params
#    equal Redis's digests and its buffer is non-zero; `init --async --from-checkpoint` restores it
#    (config dn_t0 = 8); two more submissions of one fresh worker (t = 9: a momentum step, and 10) on
#    the original and on the resumed run end bit-identical, while a resume without the buffer
#    (--reset-momentum) and one with the buffer but the schedule restarted (dn_t0 forced to 0) end
#    different; the resumed run exports the same buffer again; a sync resume of it is refused;
#  - fragments at different versions (async Streaming, 2 fragments of 2 shards, N=3: one worker's 9
#    submissions leave them at 5 and 4, where they stay: an async run's fragments count their own, and
#    before 2 December the export waited for them to line up and gave up): the export takes each fragment at
#    its version (shard_versions 5,5,4,4, dn_t_shards 5,5,4,4); the resumed run (config dn_t0_shards) and the
#    original end bit-identical after one fresh worker's 4 submissions, while the resume told one dn_t0 for
#    every shard (dn_t0_shards deleted) differs on fragment 0; a resume cut into other shards is refused;
#    `serve --save-every 1` beside its worker saves at least twice, the last at version 4 (the lowest), each
#    file valid, no save failed.
. "$(dirname "$0")/lib.sh"
$PYTHON -c 'import numpy' 2>/dev/null || { echo "SKIP: $PYTHON has no numpy (apt-get install python3-numpy)"; exit 77; }
RUN=ck; NUMEL=200000; SEED=7; H=20; ROUNDS=3
CK="$TMP/ck.safetensors"
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED --snapshot-every 2
start_server s1 --lease-ttl-ms 2000
start_server s2 --lease-ttl-ms 2000
for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1; done
wait_workers w1 w2 w3
[ "$(shard_versions $RUN)" = "3 3 3 3 3 3 3 3" ] || fail "shard versions: $(shard_versions $RUN)"

say "export"
bin/coordinator checkpoint save --redis "$URL" --run $RUN --out "$CK" > "$TMP/save.log" 2>&1 || fail "checkpoint save: $(cat "$TMP/save.log")"
cat "$TMP/save.log"
[ -f "$TMP/ck.json" ] || fail "no JSON side file"
ls "$TMP" | grep -q '\.tmp\.' && fail "a temp file was left behind"
$PYTHON tests/checkpoint_read.py "$CK" > "$TMP/py.txt" 2>&1 || fail "checkpoint_read.py: $(cat "$TMP/py.txt")"
cat "$TMP/py.txt"
shard_digests $RUN > "$TMP/redis-digests.txt"
grep '^shard' "$TMP/py.txt" | diff - "$TMP/redis-digests.txt" > "$TMP/diff.txt" || fail "python's shard digests differ from Redis: $(cat "$TMP/diff.txt")"
grep -qx "numel $NUMEL" "$TMP/py.txt" || fail "numel"
grep -qx "version 3" "$TMP/py.txt" || fail "version"
grep -qx "has_momentum true" "$TMP/py.txt" || fail "has_momentum"
nz=$(awk '/^momentum_nonzero/ {print $2}' "$TMP/py.txt")
[ "$nz" -gt $((NUMEL / 2)) ] || fail "momentum is mostly zero ($nz non-zero)"
build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers w1,w2,w3 --rounds $ROUNDS \
  --sync-every $H --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref.txt" || fail "reference"
want=$(awk '/^all/ {print $2}' "$TMP/ref.txt")
got=$(awk '/^all/ {print $2}' "$TMP/py.txt")
[ "$got" = "$want" ] || fail "checkpoint params digest $got, reference $want"
wdig=$(grep '"event":"sync"' "$TMP/w1.jsonl" | tail -n 1 | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/')
[ "$wdig" = "$want" ] || fail "worker w1 ended with $wdig, checkpoint has $want"
bin/coordinator checkpoint show "$CK" > "$TMP/show.txt" 2>&1 || fail "checkpoint show: $(cat "$TMP/show.txt")"
grep '^shard [0-9]' "$TMP/show.txt" | diff - "$TMP/redis-digests.txt" > /dev/null || fail "checkpoint show digests"
say "python and Redis agree on every shard; params = reference ($want)"

say "resume"
init_run ck2 --from-checkpoint "$CK" --workers 3
grep -q "with its outer momentum" "$TMP/init-ck2.log" || fail "init did not take the momentum: $(cat "$TMP/init-ck2.log")"
shard_digests ck2 | diff - "$TMP/redis-digests.txt" > "$TMP/diff.txt" || fail "R2's shard digests differ: $(cat "$TMP/diff.txt")"
[ "$($RCLI HGET 'dl:{ck2}:config' numel)" = $NUMEL ] || fail "R2 numel"
[ "$($RCLI HGET 'dl:{ck2}:config' shard_bounds)" = "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" ] || fail "R2 shard bounds"
[ "$($RCLI HGET 'dl:{ck2}:config' seed)" = $SEED ] || fail "R2 seed"
init_run ck3 --from-checkpoint "$CK" --reset-momentum --workers 3
shard_digests ck3 | diff - "$TMP/redis-digests.txt" > /dev/null || fail "R3's shard digests differ"

say "one more round on $RUN, ck2 and ck3 with fresh workers"
for r in $RUN ck2 ck3; do # one run at a time: the worker ids (and so their problems) are the same
  RUN0=$RUN; RUN=$r
  # the departed workers shrank the continued run's barrier: wait for all three again, like a fresh run
  $RCLI FCALL dl_set 1 "dl:{$r}:config" target_workers 3 > /dev/null || fail "dl_set"
  start_server "a_$r" --lease-ttl-ms 2000
  for w in w1 w2 w3; do start_worker "$w" --sync-every $H --steps $H --heartbeat-interval 1; done
  wait_workers w1 w2 w3
  for w in w1 w2 w3; do mv "$TMP/worker-$w.log" "$TMP/worker-$w-$r.log"; done
  RUN=$RUN0
done
[ "$(shard_versions $RUN)" = "4 4 4 4 4 4 4 4" ] || fail "$RUN versions: $(shard_versions $RUN)"
[ "$(shard_versions ck2)" = "1 1 1 1 1 1 1 1" ] || fail "ck2 versions: $(shard_versions ck2)"
shard_digests $RUN > "$TMP/r4.txt"
shard_digests ck2 | diff - "$TMP/r4.txt" > "$TMP/diff.txt" || fail "resumed run differs from the continued one: $(cat "$TMP/diff.txt")"
shard_digests ck3 | diff - "$TMP/r4.txt" > /dev/null && fail "--reset-momentum made no difference: the check is blind"
say "resumed run = continued run after one more round (momentum carried over)"

say "--dir --keep"
D="$TMP/ckdir"
mkdir -p "$D"; : > "$D/checkpoint-1.safetensors"; : > "$D/checkpoint-2.safetensors"; : > "$D/unrelated.txt"
bin/coordinator checkpoint save --redis "$URL" --run ck2 --dir "$D" --keep 2 > "$TMP/save2.log" 2>&1 || fail "save --dir: $(cat "$TMP/save2.log")"
bin/coordinator checkpoint save --redis "$URL" --run $RUN --dir "$D" --keep 2 > "$TMP/save3.log" 2>&1 || fail "save --dir: $(cat "$TMP/save3.log")"
[ "$(cd "$D" && ls | tr '\n' ' ')" = "checkpoint-2.safetensors checkpoint-4.json checkpoint-4.safetensors unrelated.txt " ] ||
  fail "checkpoint dir holds: $(ls "$D")"
$PYTHON tests/checkpoint_read.py "$D/checkpoint-4.safetensors" | grep '^shard' | diff - "$TMP/r4.txt" > /dev/null ||
  fail "checkpoint-4 does not hold version 4"

say "export while a run trains: every checkpoint is one committed version"
RUN0=$RUN; RUN=ck2
for w in w1 w2 w3; do mv "$TMP/$w.jsonl" "$TMP/$w-before-live.jsonl"; done
$RCLI FCALL dl_set 1 "dl:{ck2}:config" target_workers 3 > /dev/null || fail "dl_set"
for w in w1 w2 w3; do start_worker "$w" --sync-every $H --steps $((6 * H)) --step-delay-ms 5 --heartbeat-interval 1; done
L="$TMP/live"; mkdir -p "$L"; saves=0
while alive "$WRK_w1" || alive "$WRK_w2" || alive "$WRK_w3"; do
  bin/coordinator checkpoint save --redis "$URL" --run ck2 --dir "$L" --timeout 30 >> "$TMP/live-save.log" 2>&1 || fail "live save: $(tail -n 3 "$TMP/live-save.log")"
  saves=$((saves + 1))
done
wait_workers w1 w2 w3
RUN=$RUN0
n=0
for f in "$L"/checkpoint-*.safetensors; do
  $PYTHON tests/checkpoint_read.py "$f" > "$TMP/live.txt" || fail "reading $f"
  v=$(awk '/^version/ {print $2}' "$TMP/live.txt"); got=$(awk '/^all/ {print $2}' "$TMP/live.txt")
  [ "$v" -eq 1 ] && continue # the version before these workers, logged by nobody
  want=$(cat "$TMP"/w[123].jsonl | grep '"event":"sync"' | grep "\"version\":$v," | tail -n 1 | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/')
  [ -n "$want" ] && [ "$got" = "$want" ] || fail "$f: version $v has params $got, the workers had $want"
  n=$((n + 1))
done
[ "$n" -ge 2 ] || fail "only $n checkpoints of distinct trained versions in $saves saves: $(ls "$L")"
say "$saves saves during training, $n distinct versions, each equal to the workers' parameters at that version"

say "bad input"
refuse() { # RUN what-to-grep init-flags...
  r=$1; pat=$2; shift 2
  bin/coordinator init --redis "$URL" --run "$r" "$@" > "$TMP/refuse-$r.log" 2>&1 && fail "init $* was accepted"
  grep -q "$pat" "$TMP/refuse-$r.log" || fail "init $*: unclear message: $(cat "$TMP/refuse-$r.log")"
  [ "$($RCLI EXISTS "dl:{$r}:config")" = 0 ] || fail "a refused init created run $r"
  say "refused: $(tail -n 1 "$TMP/refuse-$r.log")"
}
refuse bad1 "layout mismatch" --from-checkpoint "$CK" --numel 1000
refuse bad2 "layout mismatch" --from-checkpoint "$CK" --trainer gpt
$PYTHON - "$TMP/foreign.safetensors" <<'PY'
import json, struct, sys
h = json.dumps({"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<2f", 1, 2))
PY
refuse bad3 "not a ReDiLoCo checkpoint" --from-checkpoint "$TMP/foreign.safetensors"
cp "$CK" "$TMP/corrupt.safetensors"
size=$(stat -c %s "$CK")
printf 'X' | dd of="$TMP/corrupt.safetensors" bs=1 seek=$((size - NUMEL * 4 - 1000)) conv=notrunc 2>/dev/null
refuse bad4 "corrupt" --from-checkpoint "$TMP/corrupt.safetensors"
head -c 1000 "$CK" > "$TMP/short.safetensors"
refuse bad5 "do not fit" --from-checkpoint "$TMP/short.safetensors"
refuse bad6 "cannot open" --from-checkpoint "$TMP/nonexistent.safetensors"

# fresh_worker RUNS...: on each run, a shard-server and one fresh worker u1 of 20 steps (H 10)
fresh_worker() {
  RUN0=$RUN
  for r in "$@"; do
    RUN=$r
    start_server "e_$r" --lease-ttl-ms 2000
    start_worker u1 --sync-every 10 --steps 20 --heartbeat-interval 1
    wait "$WRK_u1" || fail "worker u1 of $r exited with status $?"
    mv "$TMP/worker-u1.log" "$TMP/worker-u1-$r.log"
  done
  RUN=$RUN0
}
say "Delayed Nesterov: export, resume, continue"
RUN=ckdn; DNUM=40000
init_run $RUN --async --trainer quadratic --numel $DNUM --shards 4 --workers 2 --seed 5 --snapshot-every 3 \
  --dn-buffer-size 3
start_server "d_$RUN" --lease-ttl-ms 2000
for w in u1 u2; do start_worker "$w" --sync-every 10 --steps 40 --heartbeat-interval 1; done
wait_workers u1 u2
[ "$(shard_versions $RUN)" = "8 8 8 8" ] || fail "$RUN versions: $(shard_versions $RUN)"
DD="$TMP/dnck"
bin/coordinator checkpoint save --redis "$URL" --run $RUN --dir "$DD" > "$TMP/save-dn.log" 2>&1 || fail "DN save: $(cat "$TMP/save-dn.log")"
CKD="$DD/checkpoint-8.safetensors"
$PYTHON tests/checkpoint_read.py "$CKD" > "$TMP/py-dn.txt" 2>&1 || fail "checkpoint_read.py (DN): $(cat "$TMP/py-dn.txt")"
shard_digests $RUN > "$TMP/dn-digests.txt"
grep '^shard' "$TMP/py-dn.txt" | diff - "$TMP/dn-digests.txt" > /dev/null || fail "DN checkpoint params differ from Redis"
grep -qx "dn_buffer 3" "$TMP/py-dn.txt" && grep -qx "dn_t 8" "$TMP/py-dn.txt" || fail "DN metadata: $(grep ^dn "$TMP/py-dn.txt")"
nz=$(awk '/^dn_nonzero/ {print $2}' "$TMP/py-dn.txt")
[ "$nz" -gt $((DNUM / 2)) ] || fail "the exported DN buffer is mostly zero ($nz non-zero): 2 submissions should be in it"
bin/coordinator checkpoint show "$CKD" | grep -q "delayed nesterov N 3 (paper), 8 submissions applied, 2 in the buffer" ||
  fail "checkpoint show: $(bin/coordinator checkpoint show "$CKD" 2>&1)"
say "exported at t = 8 with 2 submissions in the DN buffer ($(awk '/^dn_all/ {print $2}' "$TMP/py-dn.txt"))"

init_run ckdn2 --async --from-checkpoint "$CKD" --workers 1
grep -q "with its Delayed Nesterov buffer" "$TMP/init-ckdn2.log" || fail "init did not take the DN buffer: $(cat "$TMP/init-ckdn2.log")"
[ "$($RCLI HGET 'dl:{ckdn2}:config' dn_t0)" = 8 ] && [ "$($RCLI HGET 'dl:{ckdn2}:config' dn_buffer)" = 3 ] ||
  fail "ckdn2 config: dn_t0 $($RCLI HGET 'dl:{ckdn2}:config' dn_t0), dn_buffer $($RCLI HGET 'dl:{ckdn2}:config' dn_buffer)"
shard_digests ckdn2 | diff - "$TMP/dn-digests.txt" > /dev/null || fail "ckdn2's shard digests differ"
# the restored buffer is what was exported: export the resumed run at version 0 and compare
bin/coordinator checkpoint save --redis "$URL" --run ckdn2 --out "$TMP/ckdn2-v0.safetensors" > /dev/null 2>&1 || fail "save ckdn2"
$PYTHON tests/checkpoint_read.py "$TMP/ckdn2-v0.safetensors" > "$TMP/py-dn2.txt" 2>&1 || fail "read ckdn2 export"
[ "$(grep '^dn_all\|^momentum_all\|^all' "$TMP/py-dn2.txt")" = "$(grep '^dn_all\|^momentum_all\|^all' "$TMP/py-dn.txt")" ] ||
  fail "ckdn2 at version 0 does not hold the exported params/momentum/buffer"
grep -qx "dn_t 8" "$TMP/py-dn2.txt" || fail "ckdn2 export: $(grep ^dn_t "$TMP/py-dn2.txt")"
init_run ckdn3 --async --from-checkpoint "$CKD" --workers 1 --reset-momentum
init_run ckdn4 --async --from-checkpoint "$CKD" --workers 1
$RCLI HSET 'dl:{ckdn4}:config' dn_t0 0 > /dev/null   # the buffer, but the every-3 schedule restarted
refuse ckdnbad "cannot continue" --from-checkpoint "$CKD"
say "two more submissions of one fresh worker on $RUN, ckdn2, ckdn3 (no buffer), ckdn4 (schedule restarted)"
fresh_worker $RUN ckdn2 ckdn3 ckdn4
[ "$(shard_versions $RUN)" = "10 10 10 10" ] && [ "$(shard_versions ckdn2)" = "2 2 2 2" ] ||
  fail "versions: $RUN $(shard_versions $RUN), ckdn2 $(shard_versions ckdn2)"
shard_digests $RUN > "$TMP/dn10.txt"
shard_digests ckdn2 | diff - "$TMP/dn10.txt" > "$TMP/diff.txt" || fail "the resumed DN run differs from the continued one: $(cat "$TMP/diff.txt")"
shard_digests ckdn3 | diff - "$TMP/dn10.txt" > /dev/null && fail "ckdn3 (no DN buffer) equals the continued run: the check is blind"
shard_digests ckdn4 | diff - "$TMP/dn10.txt" > /dev/null && fail "ckdn4 (schedule restarted) equals the continued run: the check is blind"
say "resumed DN run = continued run after a momentum step (buffer and schedule carried over); without either it differs"

say "Delayed Nesterov, fragments at different versions: export, resume, continue"
RUN=ckfr
init_run $RUN --async --trainer quadratic --numel $DNUM --shards 4 --fragments 2 --workers 1 --seed 5 \
  --snapshot-every 3 --dn-buffer-size 3
start_server "d_$RUN" --lease-ttl-ms 2000
# serve --save-every 1 on it (it looks every second; the worker's 45 steps of 60 ms take 2.7 s): its periodic
# exports take the fragments as they stand, whichever is ahead at that moment, the last at version 4
bin/coordinator serve --redis "$URL" --run $RUN --save-every 1 --save-dir "$TMP/frper" --print-every 0 \
  > "$TMP/coord-frper.log" 2>&1 &
COORD_frper=$!; PIDS="$PIDS $!"
start_worker u0 --sync-every 10 --steps 45 --heartbeat-interval 1 --step-delay-ms 60
wait_workers u0
[ "$(shard_versions $RUN)" = "5 5 4 4" ] || fail "$RUN versions: $(shard_versions $RUN)"
wait_until 15 "[ -s '$TMP/frper/checkpoint-4.safetensors' ]" "serve --save-every 1 to write checkpoint-4"
kill -TERM "$COORD_frper"; wait "$COORD_frper" || fail "serve --save-every exited with an error: $(tail -n 3 "$TMP/coord-frper.log")"
grep -q "save failed" "$TMP/coord-frper.log" && fail "a periodic save failed: $(grep 'save failed' "$TMP/coord-frper.log")"
[ "$(ls "$TMP"/frper/checkpoint-*.safetensors | wc -l)" -ge 2 ] || fail "serve --save-every 1 saved once: $(ls "$TMP/frper")"
for f in "$TMP"/frper/checkpoint-*.safetensors; do
  v=${f##*/checkpoint-}; v=${v%.safetensors}
  bin/coordinator checkpoint show "$f" > "$TMP/show-per$v.txt" 2>&1 && grep -qx "version         $v" "$TMP/show-per$v.txt" ||
    fail "periodic checkpoint-$v: $(head -n 5 "$TMP/show-per$v.txt")"
done
say "serve --save-every 1: $(cd "$TMP/frper" && ls ./*.safetensors | tr '\n' ' '), each one valid"
CKF="$TMP/ckfr.safetensors"
bin/coordinator checkpoint save --redis "$URL" --run $RUN --out "$CKF" --timeout 5 > "$TMP/save-fr.log" 2>&1 ||
  fail "save of fragments at versions 5 and 4: $(cat "$TMP/save-fr.log")"
bin/coordinator checkpoint show "$CKF" > "$TMP/show-fr.txt" 2>&1 || fail "checkpoint show: $(cat "$TMP/show-fr.txt")"
grep -qx "shard_versions  5,5,4,4" "$TMP/show-fr.txt" && grep -qx "dn_t_shards     5,5,4,4" "$TMP/show-fr.txt" &&
  grep -qx "version         4" "$TMP/show-fr.txt" || fail "checkpoint show: $(grep 'version\|dn_t' "$TMP/show-fr.txt")"
$PYTHON tests/checkpoint_read.py "$CKF" > "$TMP/py-fr.txt" 2>&1 || fail "checkpoint_read.py (fragments): $(cat "$TMP/py-fr.txt")"
shard_digests $RUN > "$TMP/fr-digests.txt"
grep '^shard' "$TMP/py-fr.txt" | diff - "$TMP/fr-digests.txt" > /dev/null || fail "the fragments' checkpoint params differ from Redis"
init_run ckfr2 --async --from-checkpoint "$CKF" --workers 1
[ "$($RCLI HGET 'dl:{ckfr2}:config' dn_t0_shards)" = "5,5,4,4" ] ||
  fail "ckfr2 config dn_t0_shards: $($RCLI HGET 'dl:{ckfr2}:config' dn_t0_shards)"
grep -q "its shards at 5,5,4,4" "$TMP/init-ckfr2.log" || fail "init did not say the shards' versions: $(cat "$TMP/init-ckfr2.log")"
init_run ckfr3 --async --from-checkpoint "$CKF" --workers 1
$RCLI HDEL 'dl:{ckfr3}:config' dn_t0_shards > /dev/null   # one schedule for every shard: dn_t0 4
refuse ckfrbad "cut the run into the checkpoint's 4 shards" --async --from-checkpoint "$CKF" --shards 2
fresh_worker $RUN ckfr2 ckfr3
[ "$(shard_versions $RUN)" = "7 7 6 6" ] && [ "$(shard_versions ckfr2)" = "2 2 2 2" ] ||
  fail "versions: $RUN $(shard_versions $RUN), ckfr2 $(shard_versions ckfr2)"
shard_digests $RUN > "$TMP/fr7.txt"
shard_digests ckfr2 | diff - "$TMP/fr7.txt" > "$TMP/diff.txt" || fail "the resumed run differs from the continued one: $(cat "$TMP/diff.txt")"
shard_digests ckfr3 | diff - "$TMP/fr7.txt" > "$TMP/diff.txt" && fail "ckfr3 (one schedule for every shard) equals the continued run"
grep -q '^< shard 0 ' "$TMP/diff.txt" && ! grep -q '^< shard 2 ' "$TMP/diff.txt" ||
  fail "ckfr3 should differ on fragment 0 (shards 0-1, at 5) alone: $(cat "$TMP/diff.txt")"
say "fragments at versions 5 and 4: exported, resumed shard by shard = continued run; one schedule for all differs"

say "checkpoints: export, python read, resume with momentum and DN buffer, rotation, refusals: all good"
