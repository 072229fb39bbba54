#!/bin/sh
# it_python_exactness.sh: PyTorch workers joined through the rediloco package make the same bytes as C
# workers. Two runs (bf16 and fp32 pseudo-gradients), each with one C quadratic worker (w1) and two
# PyTorch workers (w2, w3: tests/python/quad_worker.py, the same problem and AdamW in torch fp32 ops),
# 2 shard-servers, 8 shards, 4 rounds. The run's shard digests equal tests/tools/ref_quadratic's for
# workers w1,w2,w3 (which replays three C trainers in-process), every worker's last sync reports the
# reference's digest of the whole vector, and the PyTorch workers saw the same digest every round.
. "$(dirname "$0")/lib.sh"
NUMEL=100000; SEED=11; ROUNDS=4; H=10
start_redis
for mode in bf16 fp32; do
  RUN=py$mode
  flag=""; [ $mode = fp32 ] && flag=--no-bf16
  init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED
  start_server a$mode --lease-ttl-ms 2000
  start_server b$mode --lease-ttl-ms 2000
  start_worker w1 --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 $flag
  for w in w2 w3; do
    /usr/bin/python3 tests/python/quad_worker.py "$URL" $RUN $w $((ROUNDS * H)) $H --numel $NUMEL --seed $SEED \
      $flag --digests "$TMP/$w-$mode.digests" > "$TMP/py-$w-$mode.log" 2>&1 &
    eval "PY_$w=$!"; PIDS="$PIDS $!"
  done
  wait "$WRK_w1" || fail "C worker w1 ($mode) exited with status $?"
  for w in w2 w3; do eval "pid=\$PY_$w"; wait "$pid" || fail "PyTorch worker $w ($mode) exited with status $?"; done
  [ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS" ] \
    || fail "$mode: shard versions $(shard_versions $RUN)"
  build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers w1,w2,w3 --rounds $ROUNDS \
    --sync-every $H $flag --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref-$mode.txt" \
    || fail "reference"
  shard_digests $RUN > "$TMP/got-$mode.txt"
  grep '^shard' "$TMP/ref-$mode.txt" | diff - "$TMP/got-$mode.txt" > "$TMP/diff.txt" \
    || fail "$mode: shard digests differ from the reference: $(cat "$TMP/diff.txt")"
  want=$(awk '/^all/ {print $2}' "$TMP/ref-$mode.txt")
  c=$(grep '"event":"sync"' "$TMP/w1.jsonl" | tail -n 1 | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/')
  [ "$c" = "$want" ] || fail "$mode: C worker ends at $c, reference $want"
  [ "$(wc -l < "$TMP/w2-$mode.digests")" -eq $ROUNDS ] || fail "$mode: w2 logged $(wc -l < "$TMP/w2-$mode.digests") syncs"
  cmp -s "$TMP/w2-$mode.digests" "$TMP/w3-$mode.digests" || fail "$mode: the PyTorch workers' digests differ"
  py=$(tail -n 1 "$TMP/w2-$mode.digests" | cut -d' ' -f2)
  [ "$py" = "$want" ] || fail "$mode: PyTorch workers end at $py, reference $want"
  say "$mode: C + 2 PyTorch workers bit-identical to the reference after $ROUNDS rounds: $want"
  rm -f "$TMP/w1.jsonl"
done
