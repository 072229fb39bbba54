#!/bin/sh
# it_topk_exactness.sh: --compress topk (SparseLoCo: each worker's accumulator e = beta*e + Δ, the top 2%
# of every chunk of 4096 at 2 bits, the rest kept in e; the servers' weighted mean of the sparse sets,
# outer momentum 0). Three runs at once: --download params, --download update, and update with
# --weight-by tokens; each 2 workers, 2 shard-servers, 4 shards of uneven sizes (chunks restart at each
# shard, the last one shorter), 4 rounds. Every shard's digest in Redis and each worker's last digest
# equal those of a numpy reference written from the algorithm (tests/python/topk_reference.py), bit for
# bit; coordinator init says outer momentum 0 and refuses --async with its reason; `coordinator status`
# shows the density; forged frames are refused with BADCODEC and recorded, the servers staying up.
. "$(dirname "$0")/lib.sh"
NUMEL=30011; SEED=7; ROUNDS=4; H=5
start_redis
out=$(bin/coordinator init --redis "$URL" --run tkasync --trainer quadratic --numel 100 --compress topk --async 2>&1) \
  && fail "coordinator init took --compress topk --async"
echo "$out" | grep -q "for sync runs" || fail "the refusal of async topk does not say why: $out"
# tkweighted: --weight-by tokens (each worker's H steps of H: weight 1/2, the reference's 1/W, through the
# token-weight path of the servers and the weights the update carries)
for dl in params update weighted; do
  RUN=tk$dl; mode=$dl; wb=""
  [ $dl = weighted ] && mode=update && wb="--weight-by tokens"
  init_run $RUN --trainer quadratic --numel $NUMEL --shards 4 --workers 2 --seed $SEED --compress topk \
    --topk-density 0.02 --download $mode $wb
  grep -q "outer momentum 0 (the default for topk.*outer lr 2 (the default for topk" "$TMP/init-$RUN.log" \
    || fail "init's summary: $(cat "$TMP/init-$RUN.log")"
  start_server "a$dl" --lease-ttl-ms 2000
  start_server "b$dl" --lease-ttl-ms 2000
  for w in w1 w2; do
    bin/worker --redis "$URL" --run $RUN --worker-id $w --quiet --log "$TMP/$w-$dl.jsonl" --sync-every $H \
      --steps $((ROUNDS * H)) --heartbeat-interval 1 > "$TMP/worker-$w-$dl.log" 2>&1 &
    eval "W_${w}_$dl=$!"; PIDS="$PIDS $!"
  done
done
for dl in params update weighted; do
  RUN=tk$dl
  for w in w1 w2; do eval "pid=\$W_${w}_$dl"; wait "$pid" || fail "worker $w ($dl) exited with status $?: $(tail -n 3 "$TMP/worker-$w-$dl.log")"; done
  [ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS $ROUNDS $ROUNDS" ] || fail "$dl: shard versions $(shard_versions $RUN)"
  lr=$($RCLI HGET "dl:{$RUN}:tunables" outer_lr)
  /usr/bin/python3 tests/python/topk_reference.py --outer-lr "$lr" --numel $NUMEL --seed $SEED --workers w1,w2 --rounds $ROUNDS \
    --sync-every $H --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" --density 0.02 > "$TMP/ref-$dl.txt" \
    || fail "the numpy reference failed"
  shard_digests $RUN > "$TMP/got-$dl.txt"
  grep '^shard' "$TMP/ref-$dl.txt" | diff - "$TMP/got-$dl.txt" > "$TMP/diff.txt" \
    || fail "$dl: shard digests differ from the numpy reference: $(cat "$TMP/diff.txt")"
  want=$(awk '/^all/ {print $2}' "$TMP/ref-$dl.txt")
  for w in w1 w2; do
    got=$(grep '"event":"sync"' "$TMP/$w-$dl.jsonl" | tail -n 1 | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/')
    [ "$got" = "$want" ] || fail "$dl: worker $w ends at $got, the reference at $want"
  done
  say "topk/$dl: 2 workers, 4 rounds: Redis and both workers bit-identical to the numpy reference ($want)"
done
bin/coordinator status --redis "$URL" --run tkupdate > "$TMP/status.txt" 2>&1 || fail "coordinator status: $(cat "$TMP/status.txt")"
grep -q 'pseudo-gradients topk (density 0.02, beta 0.95)  download update' "$TMP/status.txt" \
  || fail "status does not show the codec: $(cat "$TMP/status.txt")"
# Forged frames against the update run's servers: a topk chunk with its indices out of order, another codec.
for c in badtopk badcodec; do
  out=$(build/tests/tools/dp_client --redis "$URL" --run tkupdate --case $c --shard 1 2>&1) || fail "case $c was not rejected as it must be: $out"
  say "$c -> $out"
done
$RCLI XRANGE "dl:{tkupdate}:events" - + > "$TMP/events.txt"
[ "$(grep -cx BADCODEC "$TMP/events.txt")" -ge 2 ] || fail "the BADCODEC rejections were not recorded"
alive "$SRV_aupdate" && alive "$SRV_bupdate" || fail "a shard-server died from a forged frame"
