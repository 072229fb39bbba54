#!/bin/sh
# it_topk_exactness.sh: --compress topk (SparseLoCo: each worker's accumulator e = beta*e + Δ, the top 2%
# of every chunk of 4096 at 2 bits (--topk-bits), the rest kept in e; the servers' weighted mean of the
# sparse sets, outer momentum 0). Five runs at once: --download params, --download update, update with
# --weight-by tokens, update at --topk-bits 4 and params at --topk-bits 8; each 2 workers, 2
# shard-servers, 4 shards of uneven sizes (chunks restart at each shard, the last one shorter), 4 rounds.
# Every shard's digest in Redis and each worker's last digest equal those of a numpy reference written
# from the algorithm (tests/python/topk_reference.py), bit for bit; coordinator init says outer momentum
# 0 and the bits with their bytes per parameter, and refuses --async with its reason; `coordinator
# status` shows density and bits; forged frames (a bad chunk, another codec, another width's payload, a
# chunk claiming another width) are refused with BADCODEC or BADSIZE and recorded, the servers staying up.
. "$(dirname "$0")/lib.sh"
NUMEL=30011; SEED=7; ROUNDS=4; H=5
start_redis
out=$(bin/coordinator init --redis "$URL" --run tkasync --trainer quadratic --numel 100 --compress topk --async 2>&1) \
  && fail "coordinator init took --compress topk --async"
echo "$out" | grep -q "for sync runs" || fail "the refusal of async topk does not say why: $out"
# tkweighted: --weight-by tokens (each worker's H steps of H: weight 1/2, the reference's 1/W, through the
# token-weight path of the servers and the weights the update carries)
RUNS="params update weighted bits4 bits8"
bits_of() { case $1 in bits4) echo 4 ;; bits8) echo 8 ;; *) echo 2 ;; esac; }
# H of a run: the quadratic trainer's AdamW moves every coordinate by nearly the same amount in 5 steps,
# so a chunk's top 2% are within 1/16 of each other and 4 bits would round them as 2 bits do (the same
# digest); in 20 steps they spread, and the reference checks that 4 bits give other parameters than 2.
h_of() { [ $1 = bits4 ] && echo 20 || echo $H; }
for dl in $RUNS; do
  RUN=tk$dl; mode=$dl; wb=""; bits=$(bits_of $dl)
  [ $dl = weighted ] && mode=update && wb="--weight-by tokens"
  [ $dl = bits4 ] && mode=update
  [ $dl = bits8 ] && mode=params
  bflag=""; [ $bits != 2 ] && bflag="--topk-bits $bits"   # (2 bits: the default, without the flag)
  init_run $RUN --trainer quadratic --numel $NUMEL --shards 4 --workers 2 --seed $SEED --compress topk \
    --topk-density 0.02 --download $mode $wb $bflag
  grep -q "outer momentum 0 (the default for topk.*outer lr 2 (the default for topk" "$TMP/init-$RUN.log" \
    || fail "init's summary: $(cat "$TMP/init-$RUN.log")"
  grep -q "at $bits bits and keeps the rest: 0\.0[0-9]* bytes per parameter per round up" "$TMP/init-$RUN.log" \
    || fail "init's summary does not say the bits and their bytes: $(cat "$TMP/init-$RUN.log")"
  start_server "a$dl" --lease-ttl-ms 2000
  start_server "b$dl" --lease-ttl-ms 2000
  for w in w1 w2; do
    bin/worker --redis "$URL" --run $RUN --worker-id $w --quiet --log "$TMP/$w-$dl.jsonl" --sync-every "$(h_of $dl)" \
      --steps $((ROUNDS * $(h_of $dl))) --heartbeat-interval 1 > "$TMP/worker-$w-$dl.log" 2>&1 &
    eval "W_${w}_$dl=$!"; PIDS="$PIDS $!"
  done
done
for dl in $RUNS; do
  RUN=tk$dl; bits=$(bits_of $dl)
  for w in w1 w2; do eval "pid=\$W_${w}_$dl"; wait "$pid" || fail "worker $w ($dl) exited with status $?: $(tail -n 3 "$TMP/worker-$w-$dl.log")"; done
  [ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS $ROUNDS $ROUNDS" ] || fail "$dl: shard versions $(shard_versions $RUN)"
  lr=$($RCLI HGET "dl:{$RUN}:tunables" outer_lr)
  $PYTHON tests/python/topk_reference.py --outer-lr "$lr" --numel $NUMEL --seed $SEED --workers w1,w2 --rounds $ROUNDS \
    --sync-every "$(h_of $dl)" --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" --density 0.02 --bits $bits \
    > "$TMP/ref-$dl.txt" || fail "the numpy reference failed"
  if [ $bits != 2 ]; then # the width must change the outcome, or this run would not test it
    $PYTHON tests/python/topk_reference.py --outer-lr "$lr" --numel $NUMEL --seed $SEED --workers w1,w2 \
      --rounds $ROUNDS --sync-every "$(h_of $dl)" --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" \
      --density 0.02 --bits 2 > "$TMP/ref2-$dl.txt" || fail "the numpy reference failed"
    [ "$(tail -n 1 "$TMP/ref2-$dl.txt")" != "$(tail -n 1 "$TMP/ref-$dl.txt")" ] \
      || fail "$dl: the reference gives the same parameters at 2 and $bits bits: the run does not test the width"
  fi
  shard_digests $RUN > "$TMP/got-$dl.txt"
  grep '^shard' "$TMP/ref-$dl.txt" | diff - "$TMP/got-$dl.txt" > "$TMP/diff.txt" \
    || fail "$dl: shard digests differ from the numpy reference: $(cat "$TMP/diff.txt")"
  want=$(awk '/^all/ {print $2}' "$TMP/ref-$dl.txt")
  for w in w1 w2; do
    got=$(grep '"event":"sync"' "$TMP/$w-$dl.jsonl" | tail -n 1 | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/')
    [ "$got" = "$want" ] || fail "$dl: worker $w ends at $got, the reference at $want"
  done
  say "topk/$dl ($bits bits): 2 workers, 4 rounds: Redis and both workers bit-identical to the numpy reference ($want)"
done
for r in update bits4; do
  bits=$(bits_of $r)
  bin/coordinator status --redis "$URL" --run tk$r > "$TMP/status.txt" 2>&1 || fail "coordinator status: $(cat "$TMP/status.txt")"
  grep -q "pseudo-gradients topk (density 0.02, $bits bits, beta 0.95)  download update" "$TMP/status.txt" \
    || fail "status does not show the codec: $(cat "$TMP/status.txt")"
done
# Forged frames against the update runs' servers (2 and 4 bits): a topk chunk with its index bitmap
# emptied, another codec, a payload encoded at the other width (its size), a chunk whose head claims the
# other width (its size right).
for r in update bits4; do
  cases="topkbits topkwidth"; [ $r = update ] && cases="badtopk badcodec $cases"
  for c in $cases; do
    out=$(build/tests/tools/dp_client --redis "$URL" --run tk$r --case $c --shard 1 2>&1) || fail "case $c ($r) was not rejected as it must be: $out"
    say "$c ($r) -> $out"
  done
  $RCLI XRANGE "dl:{tk$r}:events" - + > "$TMP/events.txt"
  want=1; [ $r = update ] && want=3
  [ "$(grep -cx BADCODEC "$TMP/events.txt")" -ge $want ] || fail "$r: the BADCODEC rejections were not recorded"
  grep -qx BADSIZE "$TMP/events.txt" || fail "$r: the BADSIZE rejection was not recorded"
  eval "a=\$SRV_a$r b=\$SRV_b$r"
  alive "$a" && alive "$b" || fail "a shard-server of $r died from a forged frame"
done
