#!/bin/sh
# it_topk_crash.sh: a --compress topk --download update run while shard-servers die (as it_codec_crash.sh:
# the harness kill -9s a random one every 1 to 1.5 s, and each kills itself in 10% of its commits between
# the log write and dl_commit; snapshots every 3 versions, so loads replay logs of sparse updates).
# Workers resend the sparse pseudo-gradients they keep (the accumulator is updated once per round, when
# Δ is made), shard loads replay the log of sparse updates, and a worker whose update's server died
# falls back to parameters with momentum: the final parameters in Redis and on every worker are
# bit-identical to the numpy reference of the fault-free run (tests/python/topk_reference.py).
. "$(dirname "$0")/lib.sh"
RUN=tkcrash; NUMEL=100000; SEED=17; ROUNDS=6; H=20
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED --snapshot-every 3 --compress topk --download update
for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --step-delay-ms 25; done
crash_storm w1 w2 w3
[ "$KILLS" -ge 2 ] || fail "only $KILLS kills happened: the test proved too little"
v="$ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS"
[ "$(shard_versions $RUN)" = "$v" ] || fail "versions: $(shard_versions $RUN)"
lr=$($RCLI HGET "dl:{$RUN}:tunables" outer_lr)
$PYTHON tests/python/topk_reference.py --outer-lr "$lr" --numel $NUMEL --seed $SEED --workers w1,w2,w3 --rounds $ROUNDS \
  --sync-every $H --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref.txt" || fail "the numpy reference failed"
shard_digests $RUN > "$TMP/got.txt"
grep '^shard' "$TMP/ref.txt" | diff - "$TMP/got.txt" > "$TMP/diff.txt" || fail "shard digests differ from the reference: $(cat "$TMP/diff.txt")"
commits=$($RCLI XRANGE "dl:{$RUN}:events" - + | grep -c '^commit$')
[ "$commits" -eq $((8 * ROUNDS)) ] || fail "expected $((8 * ROUNDS)) commits (each round once per shard), saw $commits"
assert_workers_end_at "$(awk '/^all/ {print $2}' "$TMP/ref.txt")"
say "topk/update under kill -9s: bit-identical to the numpy reference after $ROUNDS rounds"
