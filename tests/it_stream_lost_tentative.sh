#!/bin/sh
# it_stream_lost_tentative.sh: a Streaming round that a worker got tentatively from an owner that died before
# its commit, and a worker whose syncs then fail registers again. Streaming, 2 fragments (one shard each),
# workers w1 and w2 (sync timeout 3 s). The only shard-server serves versions tentatively to w1 alone and dies
# before any commit (--fault-tentative-to w1); a plain server takes over (a new epoch, version 0) and needs
# w1's and w2's pseudo-gradients of fragment 0's round 0 again. w1 got that round tentatively and went on to
# fragment 1's round, at whose barrier it waits for w2; w2's get of fragment 0 waits for w1's Δ, which w1
# sends only with a get of that fragment: the two wait for each other until w2's syncs time out (a stall not
# fixed yet: docs/PROTOCOL.md, the tentative resend). Then w2 registers again, and this checks that it can:
# its shard whose get failed holds no version (-1), which its registration used to send as held and
# dl_register refused (BADARG: "sync failed for good", the worker gave up). Checks: w2 registered again,
# nothing failed for good, both workers ended their steps (exit 0), and the run went on past the stalled
# round.
. "$(dirname "$0")/lib.sh"
RUN=losttent
start_redis
init_run $RUN --trainer quadratic --numel 4000 --shards 2 --fragments 2 --workers 2 --seed 5
start_server bad --lease-ttl-ms 1000 --fault-tentative-to w1
wait_until 10 '[ "$($RCLI HGET "dl:{$RUN}:shards" 0:owner)" = bad ] && [ "$($RCLI HGET "dl:{$RUN}:shards" 1:owner)" = bad ]' \
  "the fault-injected server to hold both shards"
for w in w1 w2; do start_worker $w --sync-every 10 --steps 40 --heartbeat-interval 1 --step-delay-ms 20 --sync-timeout 3; done
wait_until 20 '! alive $SRV_bad' "the fault-injected server to die (w1 got a version tentatively)"
start_server good --lease-ttl-ms 1000
t0=$(date +%s)
wait_workers w1 w2
grep -q "for good" "$TMP/worker-w2.log" && fail "w2 gave up: $(grep 'for good' "$TMP/worker-w2.log")"
grep -q "registering again after" "$TMP/worker-w2.log" || fail "w2 did not register again: $(grep -v 'still trying' "$TMP/worker-w2.log" | tail -n 5)"
grep -q "registered as w2 (incarnation" "$TMP/worker-w2.log" || fail "w2's second registration did not succeed"
[ "$(grep -c "registered as w2 (incarnation" "$TMP/worker-w2.log")" -ge 2 ] || fail "w2 registered only once: $(grep 'registered as' "$TMP/worker-w2.log")"
v0=$($RCLI HGET "dl:{$RUN}:shards" 0:version)
[ "$v0" -ge 1 ] || fail "fragment 0's shard is still at version $v0"
say "w2 registered again after its failed syncs and both workers ended their 40 steps $(( $(date +%s) - t0 )) s after the new owner came (fragment 0 at version $v0)"
