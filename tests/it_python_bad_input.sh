#!/bin/sh
# it_python_bad_input.sh: a PyTorch worker with bad input gets one clear Python exception each, never a
# crash of the interpreter, and the run is untouched (tests/python/bad_input.py): a model of the wrong
# size, an fp64 parameter, an unknown run, a dead Redis, a URL that is not Redis's, an outer optimizer,
# sync_every 0, a sync or request timeout of 0 or less, fragments_in_flight 0 or more than the run's fragments;
# arguments of the wrong kind (model "x" or a list, inner_optimizer None or a class, url
# None, run 7) get a TypeError before Redis is touched. NaN in the parameters at a sync is not sent:
# libdiloco logs it (through the package's log callback) and resets the worker to the global
# parameters, as it does for a C worker. Afterwards
# the run is still at version 0 with no worker left registered, and a good worker syncs round 0.
. "$(dirname "$0")/lib.sh"
RUN=pybad; NUMEL=5000
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 2 --workers 1
start_server s1
dead="redis://127.0.0.1:$(free_port)"
$PYTHON tests/python/bad_input.py "$URL" $RUN $NUMEL "$dead" > "$TMP/bad.log" 2>&1 \
  || fail "bad_input.py: $(grep -v '^ok' "$TMP/bad.log" | tail -n 20)"
cat "$TMP/bad.log" | grep '^ok' | cut -c1-200
n=$(grep -c '^ok' "$TMP/bad.log")
[ "$n" -eq 19 ] || fail "expected 19 ok lines, got $n"
[ "$(shard_versions $RUN)" = "1 1" ] || fail "shard versions $(shard_versions $RUN), want 1 1 (only the good worker's round)"
[ "$($RCLI HLEN "dl:{$RUN}:workers")" -eq 0 ] || fail "workers left registered: $($RCLI HKEYS "dl:{$RUN}:workers")"
$RCLI XRANGE "dl:{$RUN}:events" - + | grep -q '^bad$' && fail "worker 'bad' reached the run's events"
say "every bad input refused with a clear exception; the run took only the good worker's round"
