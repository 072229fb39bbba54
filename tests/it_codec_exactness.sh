#!/bin/sh
# it_codec_exactness.sh: int8 and int4 runs (coordinator init --compress), with and without worker
# --error-feedback, an int8 run with --download update (it_update_download has int4), an int3 run with
# error feedback and --download update (the under-1-byte configuration) and an int2 run with error
# feedback: 3 workers, 2 shard-servers, 8 shards of uneven sizes (blocks restart at each shard),
# 4 rounds. The final parameters in Redis (every shard's digest) and on every worker are bit-identical
# to the in-process reference of the same codec (tests/tools/ref_quadratic --codec), and a push in
# another codec is refused with BADCODEC and recorded, the run going on.
. "$(dirname "$0")/lib.sh"
NUMEL=100003; SEED=5; ROUNDS=4; H=10
start_redis
one_run() { # CODEC EF [DOWNLOAD]
  RUN=$1$2${3:-}; REF_ARGS="--codec $1${2:+ --error-feedback} --download ${3:-params}"
  init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED --compress $1 --download ${3:-params}
  start_server "a$RUN" --lease-ttl-ms 2000
  start_server "b$RUN" --lease-ttl-ms 2000
  for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 ${2:+--error-feedback}; done
  wait_workers w1 w2 w3
  grep -q ", $1$([ -n "$2" ] && echo ' with error feedback'))" "$TMP/worker-w1.log" || fail "$RUN: worker w1 does not say it sends $1"
  assert_matches_reference
  assert_workers_end_at "$REF_DIGEST"
  say "$RUN: bit-identical to the reference after $ROUNDS rounds: $REF_DIGEST"
}
one_run int8 ""
one_run int4 ""
one_run int8 ef
one_run int4 ef
one_run int8 "" update
one_run int3 ef update
one_run int2 ef
# Against the last run's servers: a push in another codec and one with a NaN block scale.
for c in badcodec nanscale; do
  out=$(build/tests/tools/dp_client --redis "$URL" --run $RUN --case $c --shard 3 2>&1) || fail "case $c was not rejected as it must be: $out"
  say "$c -> $out"
done
$RCLI XRANGE "dl:{$RUN}:events" - + > "$TMP/events.txt"
for code in BADCODEC NAN; do grep -qx "$code" "$TMP/events.txt" || fail "no reject event with code $code"; done
eval "a=\$SRV_a$RUN b=\$SRV_b$RUN"
alive "$a" && alive "$b" || fail "a shard-server died from bad input"
