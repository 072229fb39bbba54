#!/bin/sh
# it_init_wrong_file.sh: `coordinator init --from-state` given a ReDiLoCo checkpoint (a run's saved state,
# not a model's) is a usage error at once: exit 2, one line that points to --from-checkpoint, nothing
# written to Redis. The same file with --from-checkpoint then resumes the run. A directory given to
# --from-state is a usage error too (exit 2, "is a directory", as for --from-checkpoint and checkpoint show;
# it was exit 1, "not a safetensors file (shorter than 8 bytes)"). And init --force whose new settings are
# refused leaves the old run as it was (it deleted it first).
. "$(dirname "$0")/lib.sh"
start_redis
RUN=src
init_run $RUN --trainer quadratic --numel 100 --workers 1 --shards 2
bin/coordinator checkpoint save --redis "$URL" --run $RUN --out "$TMP/ck.safetensors" > "$TMP/save.txt" 2>&1 \
  || fail "checkpoint save: $(cat "$TMP/save.txt")"
keys=$($RCLI DBSIZE)
bin/coordinator init --redis "$URL" --run dst --from-state "$TMP/ck.safetensors" > "$TMP/init.txt" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "init --from-state of a checkpoint: exit $rc (want 2): $(cat "$TMP/init.txt")"
[ "$(wc -l < "$TMP/init.txt")" -eq 1 ] || fail "not one line: $(cat "$TMP/init.txt")"
grep -q "is a ReDiLoCo checkpoint (run 'src' at version 0).*--from-checkpoint $TMP/ck.safetensors" "$TMP/init.txt" \
  || fail "the message does not point to --from-checkpoint: $(cat "$TMP/init.txt")"
[ "$($RCLI DBSIZE)" -eq "$keys" ] && [ "$($RCLI EXISTS "dl:{dst}:config")" -eq 0 ] \
  || fail "something was written: $keys keys before, $($RCLI DBSIZE) after"
say "$(cat "$TMP/init.txt")"
bin/coordinator init --redis "$URL" --run dst --from-checkpoint "$TMP/ck.safetensors" > "$TMP/resume.txt" 2>&1 \
  || fail "init --from-checkpoint: $(cat "$TMP/resume.txt")"
[ "$(shard_digests dst | sort)" = "$(shard_digests $RUN | sort)" ] || fail "the resumed run's values differ"
say "the same file with --from-checkpoint resumes the run"

mkdir "$TMP/state.dir"
bin/coordinator init --redis "$URL" --run fromdir --from-state "$TMP/state.dir" > "$TMP/dir.txt" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "init --from-state of a directory: exit $rc (want 2): $(cat "$TMP/dir.txt")"
[ "$(cat "$TMP/dir.txt")" = "coordinator init: --from-state $TMP/state.dir: is a directory, not a file" ] \
  || fail "init --from-state of a directory: $(cat "$TMP/dir.txt")"
[ "$($RCLI EXISTS "dl:{fromdir}:config")" -eq 0 ] || fail "init --from-state of a directory made a run"
say "$(cat "$TMP/dir.txt") (exit 2)"

# init --force whose new settings are refused keeps the old run: it deleted the run's keys first, then refused
# the settings, and the run was gone (a walkthrough, 3 December). Refused here: 5 fragments over 4 shards
# (cut_run), a GPT width that does not divide by its heads (the model), a checkpoint that is not there.
init_run keep --trainer quadratic --numel 2000 --workers 2 --shards 4
made=$($RCLI HGET "dl:{keep}:config" created_ms)
keys=$($RCLI DBSIZE)
for bad in "--trainer quadratic --numel 2000 --shards 4 --fragments 5" "--trainer gpt --heads 3 --dim 128" \
  "--trainer quadratic --numel 2000 --shards 4 --from-checkpoint $TMP/none.safetensors"; do
  bin/coordinator init --redis "$URL" --run keep --force --workers 2 $bad > "$TMP/force.txt" 2>&1 &&
    fail "init --force $bad succeeded"
  grep -q "deleted" "$TMP/force.txt" && fail "init --force $bad deleted the run before refusing: $(cat "$TMP/force.txt")"
  [ "$($RCLI HGET "dl:{keep}:config" created_ms)" = "$made" ] && [ "$($RCLI DBSIZE)" -eq "$keys" ] ||
    fail "init --force $bad changed the run (keys $keys -> $($RCLI DBSIZE)): $(cat "$TMP/force.txt")"
done
bin/coordinator init --redis "$URL" --run keep --force --workers 2 --trainer quadratic --numel 2000 --shards 4 \
  --fragments 2 > "$TMP/force.txt" 2>&1 || fail "a valid init --force: $(cat "$TMP/force.txt")"
[ "$($RCLI HGET "dl:{keep}:config" fragments)" = 2 ] || fail "the valid --force did not replace the run"
say "init --force with refused settings left the run as it was (3 tries); a valid one replaced it"
