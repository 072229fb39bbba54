#!/bin/sh
# it_bad_input.sh: while two workers train, a misbehaving client (tests/tools/dp_client) sends a
# pseudo-gradient of the wrong size, one with a NaN, one with a corrupted payload (checksum), one from
# a worker that never registered, one for a stale round, a frame with a huge length prefix and
# garbage bytes; and two clients without the run's secret (a wrong answer to the challenge, a push with
# no handshake). Each is rejected with a clear error and recorded in dl:{R}:events; the shard-servers
# stay up; and the run's final parameters are bit-identical to the reference run without the bad
# client: nothing it sent changed anything.
. "$(dirname "$0")/lib.sh"
RUN=bad; NUMEL=40000; SEED=3; ROUNDS=10; H=20
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 2 --workers 2 --seed $SEED
start_server s1 --lease-ttl-ms 2000
start_server s2 --lease-ttl-ms 2000
wait_until 10 '[ -n "$($RCLI HGET "dl:{$RUN}:shards" 0:owner)" ] && [ -n "$($RCLI HGET "dl:{$RUN}:shards" 1:owner)" ]' "leases"
for w in w1 w2; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 0.5 --step-delay-ms 20; done
wait_until 20 '[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -ge 2 ]' "two rounds"
i=0
for c in badsize nan checksum unknown stale oversize garbage wrongsecret nohello; do
  i=$((i + 1))
  out=$(build/tests/tools/dp_client --redis "$URL" --run $RUN --case $c --shard $((i % 2)) 2>&1) || \
    fail "case $c was not rejected as it must be: $out"
  say "$c -> $out"
done
wait_workers w1 w2
alive "$SRV_s1" && alive "$SRV_s2" || fail "a shard-server died from bad input"
rej=$($RCLI HGET "dl:{$RUN}:state" rejections)
[ "$rej" -ge 5 ] || fail "expected at least 5 recorded rejections, saw $rej"
$RCLI XRANGE "dl:{$RUN}:events" - + > "$TMP/events.txt"
for code in BADSIZE NAN CHECKSUM UNKNOWN_WORKER STALE AUTH; do
  grep -qx "$code" "$TMP/events.txt" || fail "no reject event with code $code in dl:{$RUN}:events"
done
build/tests/tools/ref_quadratic --numel $NUMEL --shards 2 --seed $SEED --workers w1,w2 --rounds $ROUNDS \
  --sync-every $H --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref.txt" || fail "reference"
shard_digests $RUN > "$TMP/got.txt"
grep '^shard' "$TMP/ref.txt" | diff - "$TMP/got.txt" > "$TMP/diff.txt" || fail "bad input changed the parameters: $(cat "$TMP/diff.txt")"
say "$rej rejections recorded; parameters identical to the run without bad input"
