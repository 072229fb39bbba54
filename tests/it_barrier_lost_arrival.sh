#!/bin/sh
# it_barrier_lost_arrival.sh: a worker waiting on an open barrier that does not have its arrival arrives
# again. That is the state a Redis restart can leave: the worker's dl_arrive went out as Redis was
# killed, got no reply (outcome unknown) and never ran, or its write was lost (a failover, a restart
# without it); the worker then waited for a round that waited for it, for ever (the chaos test of
# Redis restarts hung that way). Here the lost arrival is made exactly: w1 arrives at round 0 and
# waits (the run wants 2 workers), its arrival is deleted from the barrier, then w2 comes. The round
# must close with both, every round after it too, and the final parameters must be bit-identical to a
# fault-free run of w1 and w2 (tests/tools/ref_quadratic): the re-arrival lost and duplicated nothing.
. "$(dirname "$0")/lib.sh"
RUN=lostarrive; NUMEL=20000; SHARDS=4; SEED=7; H=10; ROUNDS=3
B="dl:{$RUN}:f0:r0"
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards $SHARDS --workers 2 --seed $SEED
start_server s1
start_worker w1 --sync-every $H --steps $((ROUNDS * H))
wait_until 30 "[ \"\$($RCLI HEXISTS $B a:w1)\" = 1 ]" "w1's arrival at round 0"
[ "$($RCLI HGET $B state)" = open ] || fail "round 0 is not open after w1 arrived alone: $($RCLI HGETALL $B)"
$RCLI HDEL $B a:w1 > /dev/null
say "w1 waits on round 0; its arrival was removed from the barrier"
start_worker w2 --sync-every $H --steps $((ROUNDS * H))
wait_until 30 '! alive $WRK_w1 && ! alive $WRK_w2' "both workers to finish $ROUNDS rounds (a hang: w1 waits for a round that waits for it)"
for w in w1 w2; do eval "pid=\$WRK_$w"; wait "$pid" || fail "worker $w exited with status $?"; done
grep -q "the barrier does not have our arrival" "$TMP/worker-w1.log" || fail "w1 did not say it arrived again"
parts=$($RCLI HGET $B participants)
[ "$parts" = "w1:1,w2:2" ] || fail "round 0 closed with participants '$parts', want w1:1,w2:2"
build/tests/tools/ref_quadratic --numel $NUMEL --shards $SHARDS --seed $SEED --workers w1,w2 --rounds $ROUNDS \
  --sync-every $H --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref.txt" || fail "reference"
shard_digests $RUN > "$TMP/got.txt"
grep '^shard' "$TMP/ref.txt" | diff - "$TMP/got.txt" > "$TMP/diff.txt" || fail "shard digests differ: $(cat "$TMP/diff.txt")"
say "w1 arrived again; $ROUNDS rounds with w1 and w2, bit-identical to the fault-free reference"
