#!/bin/sh
# it_python_exactness.sh: PyTorch workers joined through the rediloco package make the same bytes as C
# workers. Five runs at once (bf16 and fp32 pseudo-gradients, each with one C quadratic worker w1 and
# two PyTorch workers w2, w3; Streaming DiLoCo with 4 fragments and fragment_update_alpha 0.5, and an
# async run, each with w1 and one PyTorch worker w2), 2 shard-servers and 8 shards each; the PyTorch
# workers are tests/python/quad_worker.py: the C trainer's problem and AdamW in torch fp32 ops; and the
# Streaming run again with 2 fragments in flight (fragments_in_flight; the worker's --fragments-in-flight),
# its PyTorch worker through a host mirror of its parameters (REDILOCO_HOST_COPY=1: the path of a model on a
# GPU without device hooks, e.g. a process group's rank; copied to the mirror before each boundary, back
# for each fragment applied).
# Each run's shard digests equal those of the in-process reference that replays C trainers of the same ids
# (tests/tools/ref_quadratic; for the async run tests/tools/ref_async, in the order
# Redis applied the submissions); in the plain runs every worker's last sync also reports the
# reference's digest of the whole vector, and the PyTorch workers saw the same digest every round.
. "$(dirname "$0")/lib.sh"
need_torch
NUMEL=50000; SEED=11; ROUNDS=4; H=10
start_redis
flags_of() { case $1 in fp32) echo --no-bf16;; stream) echo --fragment-alpha 0.5;; stream2) echo --fragment-alpha 0.5 --fragments-in-flight 2;; esac; }
pyworkers_of() { case $1 in bf16|fp32) echo w2 w3;; *) echo w2;; esac; }   # (time: torch starts slowly)
ids_of() { echo w1 $(pyworkers_of $1) | tr ' ' ,; }
# the three runs train at the same time (each its own run, servers and workers); then each is checked
for mode in bf16 fp32 stream stream2 async; do
  RUN=py$mode; flag=$(flags_of $mode)
  frags=1; case $mode in stream*) frags=4 ;; esac
  async=""; [ $mode = async ] && async=--async
  init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --fragments $frags --seed $SEED $async \
    --workers $(( 1 + $(pyworkers_of $mode | wc -w) ))
  start_server a$mode --lease-ttl-ms 2000
  start_server b$mode --lease-ttl-ms 2000
  bin/worker --redis "$URL" --run $RUN --worker-id w1 --quiet --log "$TMP/w1-$mode.jsonl" --sync-every $H \
    --steps $((ROUNDS * H)) --heartbeat-interval 1 $flag > "$TMP/worker-w1-$mode.log" 2>&1 &
  eval "C_$mode=$!"; PIDS="$PIDS $!"
  for w in $(pyworkers_of $mode); do
    REDILOCO_HOST_COPY=$([ $mode = stream2 ] && echo 1) $PYTHON tests/python/quad_worker.py "$URL" $RUN $w $((ROUNDS * H)) $H --numel $NUMEL --seed $SEED \
      $flag --digests "$TMP/$w-$mode.digests" > "$TMP/py-$w-$mode.log" 2>&1 &
    eval "PY_${w}_$mode=$!"; PIDS="$PIDS $!"
  done
done
for mode in bf16 fp32 stream stream2 async; do
  RUN=py$mode; flag=$(flags_of $mode)
  eval "pid=\$C_$mode"; wait "$pid" || fail "C worker w1 ($mode) exited with status $?"
  for w in $(pyworkers_of $mode); do eval "pid=\$PY_${w}_$mode"; wait "$pid" || fail "PyTorch worker $w ($mode) exited with status $?"; done
  if [ $mode = async ]; then
    build/tests/tools/ref_async --redis "$URL" --run $RUN --sync-every $H > "$TMP/ref-$mode.txt" 2> "$TMP/ref-$mode.log" \
      || fail "async reference: $(cat "$TMP/ref-$mode.log")"
  elif [ $mode = stream ] || [ $mode = stream2 ]; then
    d=1; [ $mode = stream2 ] && d=2
    build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers $(ids_of $mode) --sync-every $H \
      --steps $((ROUNDS * H)) --alpha 0.5 --in-flight $d --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" \
      --frag-bounds "$($RCLI HGET "dl:{$RUN}:config" frag_bounds)" > "$TMP/ref-$mode.txt" || fail "reference"
  else
    [ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS" ] \
      || fail "$mode: shard versions $(shard_versions $RUN)"
    build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers w1,w2,w3 --rounds $ROUNDS \
      --sync-every $H $flag --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref-$mode.txt" \
      || fail "reference"
  fi
  shard_digests $RUN > "$TMP/got-$mode.txt"
  grep '^shard' "$TMP/ref-$mode.txt" | diff - "$TMP/got-$mode.txt" > "$TMP/diff.txt" \
    || fail "$mode: shard digests differ from the reference: $(cat "$TMP/diff.txt")"
  if [ $mode = async ]; then
    say "async: a C and a PyTorch worker bit-identical to the replay of $(sed 's/.*replayed //' "$TMP/ref-$mode.log")"
    continue
  fi
  if [ $mode = stream2 ]; then
    grep -q 'over pinned host copy' "$TMP/py-w2-$mode.log" || fail "stream2: w2 not through the host mirror: $(cat "$TMP/py-w2-$mode.log")"
  fi
  if [ $mode = stream ] || [ $mode = stream2 ]; then
    say "$mode: a C and a PyTorch worker, 4 fragments, $flag: shards bit-identical to the fragment-schedule reference ($(shard_versions $RUN))"
    continue
  fi
  want=$(awk '/^all/ {print $2}' "$TMP/ref-$mode.txt")
  c=$(grep '"event":"sync"' "$TMP/w1-$mode.jsonl" | tail -n 1 | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/')
  [ "$c" = "$want" ] || fail "$mode: C worker ends at $c, reference $want"
  [ "$(wc -l < "$TMP/w2-$mode.digests")" -eq $ROUNDS ] || fail "$mode: w2 logged $(wc -l < "$TMP/w2-$mode.digests") syncs"
  cmp -s "$TMP/w2-$mode.digests" "$TMP/w3-$mode.digests" || fail "$mode: the PyTorch workers' digests differ"
  py=$(tail -n 1 "$TMP/w2-$mode.digests" | cut -d' ' -f2)
  [ "$py" = "$want" ] || fail "$mode: PyTorch workers end at $py, reference $want"
  say "$mode: C + 2 PyTorch workers bit-identical to the reference after $ROUNDS rounds: $want"
done
