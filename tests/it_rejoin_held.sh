#!/bin/sh
# it_rejoin_held.sh: a worker that registers again after an eviction does not fetch the shards it holds
# already at their committed version (worker/diloco/fetch.c, mark_held). Three workers, min workers 3: no round
# closes without w3. Half a second into round 1 w3 is SIGSTOPped, evicted, and continued; at its next inner
# step it registers again, into round 1 (the barrier cannot close without it), and takes every shard at
# version 1, which it holds since its sync of round 0: each shard's digest in Redis is that of its copy.
# Before, it fetched all 8 shards again (the whole vector, 160 KB); now none.
# Checks: w3 registered again during round 1's interval and its new incarnation joined round 1; its rejoin
# (the stale sync record) received 0 bytes and its log says the 8 shards were held; shard digests, commits and
# the final digests equal tests/tools/ref_quadratic with w3 having trained its steps of round 1 before the stop,
# dropped them and trained round 1 again from version 1 (--redo, --redo-steps).
# test: light (it waits more than it computes: 3 s of CPU in 13 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=held; NUMEL=40000; SEED=11; ROUNDS=4; H=10; A=1
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --min-workers 3 --seed $SEED \
  --heartbeat-timeout 0.8
start_server s1 --lease-ttl-ms 2000
for w in w1 w2; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 0.2 --step-delay-ms 200; done
start_worker w3 --sync-every $H --steps 0 --heartbeat-interval 0.2 --step-delay-ms 200
round() { $RCLI HGET "dl:{$RUN}:state" round:0; }

wait_until 15 '[ "$(round)" -ge $A ]' "round 0 to close"
sleep 0.5
kill -STOP "$WRK_w3"
say "w3 stopped during round $A"
wait_until 5 '[ "$($RCLI HEXISTS "dl:{$RUN}:workers" w3)" = 0 ]' "w3 to be evicted"
kill -CONT "$WRK_w3"
[ "$(round)" -eq $A ] || fail "round $A closed without w3 (min workers 3)"
wait_until 5 'grep -q "during inner step" "$TMP/worker-w3.log"' "w3 to register again during the interval"
wait_workers w1 w2
wait_until 10 '[ "$(shard_versions $RUN)" = "4 4 4 4 4 4 4 4" ]' "every shard at version $ROUNDS"
kill -TERM "$WRK_w3"
wait "$WRK_w3" || fail "w3 exited with status $? after SIGTERM"

trained=$(sed -n "s/.*during inner step \([0-9]*\) of $H; registering again now.*/\1/p" "$TMP/worker-w3.log" | head -n 1)
[ -n "$trained" ] || fail "w3's warning names no inner step: $(grep evicted "$TMP/worker-w3.log")"
rejoin_check_joined() {
  $RCLI XRANGE "dl:{$RUN}:events" - + |
    awk '/^join$/ {j = 1; next} j && /^worker$/ {getline; w = $0; next} j && /^joined$/ {getline; if (w == "w3") print $0; j = 0}'
}
joined=$(rejoin_check_joined | tail -n 1)
[ "$(rejoin_check_joined | wc -l)" -eq 2 ] && [ "$joined" = $A ] ||
  fail "w3 joined rounds $(rejoin_check_joined | tr '\n' ' '), expected 0 then $A"
down=$(sync_field w3 '"stale":true' bytes_down)
[ "$down" = 0 ] || fail "w3's rejoin fetched $down bytes of shards it held at their committed version"
grep -q "fragment 0: 8 of its 8 shard(s) held at their committed version" "$TMP/worker-w3.log" ||
  fail "w3 does not say it held its 8 shards: $(grep -i held "$TMP/worker-w3.log")"
say "w3 registered again after inner step $trained of round $A, into round $A, and fetched nothing"

REF_ARGS="--redo w3=$A --redo-steps w3=$trained" assert_matches_reference
assert_workers_end_at "$REF_DIGEST"
say "digests equal the reference with w3's $trained steps of round $A dropped and the round trained again"
