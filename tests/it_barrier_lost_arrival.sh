#!/bin/sh
# it_barrier_lost_arrival.sh: a worker waiting on an open barrier that does not have its arrival arrives
# again. That is the state a Redis restart can leave: the worker's dl_arrive went out as Redis was
# killed, got no reply on both tries (the retry reached the dying Redis too) and never ran, or its write
# was lost (a failover, a restart without it); the worker took "no reply" for "open" and waited for a
# round that waited for it, for ever (the chaos test of Redis restarts hung that way). Two ways:
#  A. the write lost: w1 arrives at round 0 and waits (the run wants 2 workers), its arrival is deleted
#     from the barrier, then w2 comes. The round must close with both, and every round after it;
#  B. the reply lost: a proxy in front of Redis (tests/tools/drop_proxy.py) closes the connection of the
#     first two dl_arrive of a lone worker instead of relaying them (dl_arrive's first try and its retry
#     after reconnecting): no reply, nothing written. The worker must arrive again and finish;
#  C. the reply lost of an arrival that ran and closed the round (the proxy relays the first dl_arrive of
#     a lone worker, and drops the connection when the reply comes): the retry finds the round closed
#     (STALE). The worker must find itself among the participants, not count the round as lost.
# Both runs end bit-identical to a fault-free run of their workers (tests/tools/ref_quadratic): the
# arrival made again lost and duplicated nothing.
. "$(dirname "$0")/lib.sh"
NUMEL=20000; SHARDS=4; SEED=7; H=10; ROUNDS=3
# matches_reference WORKERS: the run's shard digests are those of a fault-free run of WORKERS
matches_reference() {
  build/tests/tools/ref_quadratic --numel $NUMEL --shards $SHARDS --seed $SEED --workers "$1" --rounds $ROUNDS \
    --sync-every $H --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref-$RUN.txt" || fail "reference"
  shard_digests $RUN > "$TMP/got-$RUN.txt"
  grep '^shard' "$TMP/ref-$RUN.txt" | diff - "$TMP/got-$RUN.txt" > "$TMP/diff.txt" ||
    fail "$RUN: shard digests differ from the reference: $(cat "$TMP/diff.txt")"
}
# lone_worker_behind_proxy DROPS LOSE: w1 alone in run $RUN, talking to Redis through drop_proxy.py,
# which loses the command or reply (LOSE) of its first DROPS dl_arrive; w1 must finish its rounds
lone_worker_behind_proxy() {
  init_run $RUN --trainer quadratic --numel $NUMEL --shards $SHARDS --workers 1 --seed $SEED
  start_server "s-$RUN"
  rm -f "$TMP/proxy.port" "$TMP/proxy.log"
  python3 tests/tools/drop_proxy.py --redis-port "$PORT" --match dl_arrive --drops "$1" --lose "$2" \
    --port-file "$TMP/proxy.port" --log "$TMP/proxy.log" > /dev/null 2>&1 &
  PIDS="$PIDS $!"
  wait_until 10 '[ -s "$TMP/proxy.port" ]' "the proxy"
  REDIS_URL=$URL; URL="redis://127.0.0.1:$(cat "$TMP/proxy.port")"
  start_worker w1 --sync-every $H --steps $((ROUNDS * H))
  URL=$REDIS_URL
  wait_until 30 '! alive $WRK_w1' "w1 to finish $ROUNDS rounds (a hang: it waits for a round that waits for it)"
  wait "$WRK_w1" || fail "worker w1 exited with status $?"
  [ "$(grep -c "lost the $2" "$TMP/proxy.log")" = "$1" ] || fail "the proxy did not lose $1 dl_arrive: $(cat "$TMP/proxy.log")"
  matches_reference w1
}
start_redis

say "A. an arrival lost from the barrier"
RUN=lostarrive; B="dl:{$RUN}:f0:r0"
init_run $RUN --trainer quadratic --numel $NUMEL --shards $SHARDS --workers 2 --seed $SEED
start_server s1
start_worker w1 --sync-every $H --steps $((ROUNDS * H))
wait_until 30 "[ \"\$($RCLI HEXISTS $B a:w1)\" = 1 ]" "w1's arrival at round 0"
[ "$($RCLI HGET $B state)" = open ] || fail "round 0 is not open after w1 arrived alone: $($RCLI HGETALL $B)"
$RCLI HDEL $B a:w1 > /dev/null
say "w1 waits on round 0; its arrival was removed from the barrier"
start_worker w2 --sync-every $H --steps $((ROUNDS * H))
wait_until 30 '! alive $WRK_w1 && ! alive $WRK_w2' "both workers to finish $ROUNDS rounds (a hang: w1 waits for a round that waits for it)"
wait_workers w1 w2
grep -q "the barrier does not have our arrival" "$TMP/worker-w1.log" || fail "w1 did not say it arrived again"
parts=$($RCLI HGET $B participants)
[ "$parts" = "w1:1,w2:2" ] || fail "round 0 closed with participants '$parts', want w1:1,w2:2"
matches_reference w1,w2
say "w1 arrived again; $ROUNDS rounds with w1 and w2, bit-identical to the fault-free reference"

say "B. dl_arrive's reply lost, on its first try and on its retry"
RUN=lostreply
lone_worker_behind_proxy 2 command
grep -q "the barrier does not have our arrival" "$TMP/worker-w1.log" || fail "w1 did not say it arrived again"
say "both tries of dl_arrive lost: w1 arrived again, $ROUNDS rounds bit-identical to the fault-free reference"

say "C. the reply lost of an arrival that closed the round"
RUN=lostreply2
lone_worker_behind_proxy 1 reply
grep -q '"stale":true' "$TMP/w1.jsonl" && fail "w1 counted a round it took part in as lost: $(grep stale "$TMP/worker-w1.log")"
grep -q "closed with us" "$TMP/worker-w1.log" || fail "w1 did not say the retry found the round closed with it"
say "the arrival ran, its reply was lost, the retry found the round closed: w1 knew it took part"
