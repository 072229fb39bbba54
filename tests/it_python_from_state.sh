#!/bin/sh
# it_python_from_state.sh: a run from a model's own weights, and back.
#   - rediloco.init_run(url, run, model, ...) (rediloco.save_state + `coordinator init --from-state`): the
#     run's trainer is "state", its config records the model's layout, and the shard digests Redis holds
#     are the XXH3 of the model's own fp32 values (computed in torch); a setting init warns about (outer_lr
#     1e6) comes back as a Python UserWarning;
#   - a PyTorch worker with the same architecture starts from exactly those values; a model with the same
#     parameter count but another layout is refused naming the tensor; bin/worker refuses the run clearly;
#   - `coordinator checkpoint save` then rediloco.load_checkpoint gives back the tensors bit for bit, under
#     the model's names; loading into another model is refused; bin/worker refuses a model of the same
#     size whose tensors differ, naming them;
#   - `python3 -m rediloco init --from-state`: a truncated file and an integer tensor get one clear error
#     (named python3 -m rediloco init, as its --help's usage line is)
#     each and create nothing; a BF16 file becomes its values widened to fp32;
#   - `python3 -m rediloco [init] --help`, `version` and an init whose stdout reader is gone (`| head`):
#     exit 0 without a BrokenPipeError traceback, and the init still makes its run;
#   - `coordinator init --from-checkpoint` of the state run's checkpoint: same trainer, layout and values.
. "$(dirname "$0")/lib.sh"
PY="$PYTHON tests/python/from_state.py"
start_redis
RUN=fs
mkdir "$TMP/odd"
$PY init "$URL" $RUN "$TMP/odd" > "$TMP/init.txt" 2>&1 || fail "init_run: $(cat "$TMP/init.txt")"
grep -q "version 0 = the 6 tensors of" "$TMP/init.txt" || fail "init_run said: $(cat "$TMP/init.txt")"
grep -q "ok init_run(outer_lr=1e6) warns: --outer-lr 1e+06 is far above" "$TMP/init.txt" || fail "init_run(outer_lr=1e6): $(cat "$TMP/init.txt")"
grep -q "ok coordinator not found: .*on PATH" "$TMP/init.txt" || fail "the coordinator's absence: $(cat "$TMP/init.txt")"
[ "$($RCLI HGET "dl:{$RUN}:config" trainer)" = state ] || fail "trainer $($RCLI HGET "dl:{$RUN}:config" trainer)"
layout=$($RCLI HGET "dl:{$RUN}:config" layout)
[ "$layout" = '[["0.weight",[32,16],0],["0.bias",[32],512],["1.weight",[32],544],["1.bias",[32],576],["3.weight",[4,32],608],["3.bias",[4],736]]' ] \
  || fail "layout field: $layout"
start_server s1
bin/worker --redis "$URL" --run $RUN --connect-timeout 0 > "$TMP/cworker.txt" 2>&1 && fail "bin/worker joined a state run"
grep -q "created from a model's own weights (coordinator init --from-state): join it with a PyTorch" "$TMP/cworker.txt" \
  || fail "bin/worker's message: $(cat "$TMP/cworker.txt")"
bin/worker --redis "$URL" --run $RUN --trainer quadratic --connect-timeout 0 > "$TMP/cquad.txt" 2>&1 && fail "a quadratic worker joined"
grep -q "tensor 0 of the run is '0.weight' \[32, 16\] at offset 0, the quadratic trainer's is 'x' \[740\]" "$TMP/cquad.txt" \
  || fail "layout refusal of bin/worker: $(cat "$TMP/cquad.txt")"

# the command line: bad files get one clear error each and create nothing; a BF16 file is converted
for bad in truncated int; do
  PYTHONPATH=python $PYTHON -m rediloco init --redis "$URL" --run bad$bad --from-state "$TMP/odd/$bad.safetensors" \
    > "$TMP/bad$bad.txt" 2>&1 && fail "init accepted $bad.safetensors"
  [ "$(wc -l < "$TMP/bad$bad.txt")" -eq 1 ] || fail "$bad: more than one line: $(cat "$TMP/bad$bad.txt")"
  grep -q "$bad.safetensors" "$TMP/bad$bad.txt" || fail "$bad: the message does not name the file"
  [ "$($RCLI EXISTS "dl:{bad$bad}:config")" -eq 0 ] || fail "$bad: a run was created"
  say "$bad: $(cat "$TMP/bad$bad.txt")"
done
grep -q "tensor 'steps' is I64" "$TMP/badint.txt" || fail "int: $(cat "$TMP/badint.txt")"
# the command is python3 -m rediloco init, in its usage and its messages (they said bin/coordinator init)
grep -q "^python3 -m rediloco init: " "$TMP/badint.txt" || fail "int: not named python3 -m rediloco init: $(cat "$TMP/badint.txt")"
PYTHONPATH=python $PYTHON -m rediloco init --help > "$TMP/help.txt" 2>&1 || fail "init --help: exit $?"
head -n 1 "$TMP/help.txt" | grep -q "^usage: python3 -m rediloco init --redis URL" || fail "init --help: $(head -n 1 "$TMP/help.txt")"
# its output into a pipe whose reader is gone (`... --help | head -n 1`): no BrokenPipeError traceback,
# exit 0, and an init so piped still creates its run (the reader's going ends the copy, not the command)
cat > "$TMP/closed_pipe.py" <<'PY'
import os, subprocess, sys
r, w = os.pipe()
os.close(r)  # the reader is gone before the first write: EPIPE at once, as `| head` gives it sooner or later
p = subprocess.run([sys.executable, "-m", "rediloco"] + sys.argv[1:], stdout=w, stderr=subprocess.PIPE, text=True)
print("exit %d, stderr %r" % (p.returncode, p.stderr))
PY
for args in "--help" "init --help" "version" "init --redis $URL --run piped --trainer quadratic --numel 1000 --workers 1"; do
  PYTHONPATH=python $PYTHON "$TMP/closed_pipe.py" $args > "$TMP/pipe.txt" 2>&1
  grep -q "^exit 0, stderr ''$" "$TMP/pipe.txt" || fail "python3 -m rediloco $args into a closed pipe: $(cat "$TMP/pipe.txt")"
done
[ "$($RCLI HGET "dl:{piped}:config" trainer)" = quadratic ] || fail "init into a closed pipe made no run"
(cd python && $PYTHON -m rediloco init --redis "$URL" --run bf --workers 1 --shards 2 \
  --from-state "$TMP/odd/bf16.safetensors") > "$TMP/bf.txt" 2>&1 || fail "bf16 init: $(cat "$TMP/bf.txt")"
RUN=bf start_server sbf

$PY check "$URL" fs "$($RCLI HGET "dl:{fs}:config" shard_bounds)" "$TMP/odd" > "$TMP/check.txt" 2>&1 \
  || fail "check: $(grep -v INFO "$TMP/check.txt")"
shard_digests fs > "$TMP/got.txt"
diff "$TMP/odd/want.txt" "$TMP/got.txt" > "$TMP/diff.txt" || fail "Redis's shard digests are not the model's values: $(cat "$TMP/diff.txt")"
say "run from the model's state: 4 shard digests = XXH3 of the torch values; layout recorded"
grep '^ok' "$TMP/check.txt"
[ "$(grep -c '^ok' "$TMP/check.txt")" -eq 5 ] || fail "check: $(cat "$TMP/check.txt")"

# a state run resumes from its checkpoint: same trainer, layout and values
bin/coordinator init --redis "$URL" --run fs2 --from-checkpoint "$TMP/odd/ck.safetensors" > "$TMP/resume.txt" 2>&1 \
  || fail "init --from-checkpoint of a state run: $(cat "$TMP/resume.txt")"
[ "$($RCLI HGET "dl:{fs2}:config" trainer)" = state ] && [ "$($RCLI HGET "dl:{fs2}:config" layout)" = "$layout" ] \
  || fail "the resumed run's trainer/layout: $($RCLI HGET "dl:{fs2}:config" trainer) $($RCLI HGET "dl:{fs2}:config" layout)"
shard_digests fs2 | diff "$TMP/got.txt" - > /dev/null || fail "the resumed run's values differ from the checkpoint's"
say "a checkpoint of the state run starts a new run with the same layout and values"
