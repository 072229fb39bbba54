#!/bin/sh
# it_sync_exactness.sh: 3 workers, 2 shard-servers, 8 shards, 5 sync rounds of the quadratic trainer.
# The final global parameters in Redis (every shard's digest) and on every worker are bit-identical
# to the in-process reference (tests/tools/ref_quadratic), and every shard was committed exactly once
# per round (audited from dl:{R}:events).
. "$(dirname "$0")/lib.sh"
RUN=exact; NUMEL=200000; SEED=7; ROUNDS=5; H=20
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED
start_server s1 --lease-ttl-ms 2000
start_server s2 --lease-ttl-ms 2000
for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1; done
for w in w1 w2 w3; do
  eval "pid=\$WRK_$w"
  wait "$pid" || fail "worker $w exited with status $?"
done
[ "$(shard_versions $RUN)" = "5 5 5 5 5 5 5 5" ] || fail "shard versions: $(shard_versions $RUN)"
build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers w1,w2,w3 --rounds $ROUNDS \
  --sync-every $H --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref.txt" || fail "reference"
shard_digests $RUN > "$TMP/got.txt"
grep '^shard' "$TMP/ref.txt" | diff - "$TMP/got.txt" > "$TMP/diff.txt" || fail "shard digests differ: $(cat "$TMP/diff.txt")"
want=$(awk '/^all/ {print $2}' "$TMP/ref.txt")
for w in w1 w2 w3; do
  got=$(grep '"event":"sync"' "$TMP/$w.jsonl" | tail -n 1 | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/')
  [ "$got" = "$want" ] || fail "worker $w ends with digest $got, reference $want"
done
commits=$($RCLI XRANGE "dl:{$RUN}:events" - + | grep -c '^commit$')
[ "$commits" -eq $((8 * ROUNDS)) ] || fail "expected $((8 * ROUNDS)) commits in the events stream, saw $commits"
say "bit-identical to the reference after $ROUNDS rounds: $want"
