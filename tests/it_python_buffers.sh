#!/bin/sh
# it_python_buffers.sh: a model's buffers are not part of a run, and the package says so
# (tests/python/buffers.py): a BatchNorm model in train mode gets one BuffersNotSynced warning at its first
# sync naming the running statistics training changed; in eval mode (nothing changed) none;
# load_checkpoint(strict=True) refuses it naming the buffers the checkpoint does not hold, changing
# nothing; strict=False loads the parameters and keeps the buffers; a shape mismatch changes nothing.
. "$(dirname "$0")/lib.sh"
RUN=pybuf
PY="$PYTHON tests/python/buffers.py"
start_redis
$PY init "$URL" $RUN > "$TMP/init.txt" 2>&1 || fail "init: $(cat "$TMP/init.txt")"
start_server s1
$PY check "$URL" $RUN "$TMP" > "$TMP/check.txt" 2>&1 || fail "check: $(grep -v ' INFO ' "$TMP/check.txt")"
grep '^ok' "$TMP/check.txt" | cut -c1-240
[ "$(grep -c '^ok' "$TMP/check.txt")" -eq 5 ] || fail "expected 5 ok lines: $(cat "$TMP/check.txt")"
say "buffers: warned when changed, never silently loaded"
