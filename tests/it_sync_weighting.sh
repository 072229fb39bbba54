#!/bin/sh
# it_sync_weighting.sh: --weight-by tokens. Worker w1 syncs every 10 steps, w2 every 30 (sync mode:
# both take part in every round), so each round w2's pseudo-gradient stands for 3x the tokens of
# w1's. With weighting, the mean is 1/4 w1 + 3/4 w2; the final parameters are bit-identical to the
# in-process reference with those weights, and differ from the unweighted mean.
. "$(dirname "$0")/lib.sh"
RUN=weighted; NUMEL=40000; SEED=9; ROUNDS=5
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 2 --workers 2 --seed $SEED --weight-by tokens
start_server s1 --lease-ttl-ms 2000
start_worker w1 --sync-every 10 --steps $((ROUNDS * 10)) --heartbeat-interval 1
start_worker w2 --sync-every 30 --steps $((ROUNDS * 30)) --heartbeat-interval 1
wait_workers w1 w2
bounds=$($RCLI HGET "dl:{$RUN}:config" shard_bounds)
ref() { build/tests/tools/ref_quadratic --numel $NUMEL --shards 2 --seed $SEED --workers w1,w2 --rounds $ROUNDS \
          --sync-every 10 --h-of w1=10,w2=30 --bounds "$bounds" "$@" | grep '^shard'; }
ref --weight-tokens > "$TMP/ref.txt" || fail "reference"
ref > "$TMP/unweighted.txt" || fail "unweighted reference"
shard_digests $RUN > "$TMP/got.txt"
diff "$TMP/ref.txt" "$TMP/got.txt" > "$TMP/diff.txt" || fail "digests differ from the token-weighted reference: $(cat "$TMP/diff.txt")"
cmp -s "$TMP/unweighted.txt" "$TMP/got.txt" && fail "weighted and unweighted means gave the same parameters: the test proves nothing"
say "token-weighted mean bit-identical to the reference (and different from the plain mean)"
