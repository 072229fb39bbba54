#!/bin/sh
# it_async_need_pause.sh: an async worker whose get is answered `need <itself>` for an earlier place of its
# own, which it cannot send, waits with pauses instead of sending its Δ again and asking at once.
# The stall: w1 (alone in the run) talks to Redis through tests/tools/drop_proxy.py, which loses the reply
# of every try of its 3rd dl_submit (5 tries, each sent twice: 10 writes). The first try ran and gave the
# submission its places; the worker, with no reply, trains on and its 4th submission takes the next places.
# Its get of those is answered `need w1` for the 3rd's place, which nobody will push: the shard's order
# waits until w1 registers again (after --max-sync-retries 1 + 1 failed syncs of --sync-timeout 2 s) and that
# place becomes a no-op. The shard-server's `need` reply carries the round it lacks (shard-server/
# commit_obj.c), and the worker pushes only its own (worker/diloco/fanout.c, get_job).
# Before: every `need` sent the Δ again and asked at once, with no look at the deadline either, so the
# sync timeout never came: the loop ran without end (2.7 million pushes, 54 GB in 10 minutes on loopback).
# Asserts: w1 finishes its steps, registered twice, each of its failed syncs says why, and the server took
# a handful of pushes (each submission's, the completions' resends), not thousands.
. "$(dirname "$0")/lib.sh"
H=10; STEPS=60
start_redis
RUN=stall
init_run $RUN --async --trainer quadratic --numel 20000 --shards 2 --workers 1
start_server s0
drop_proxy w1 "$PORT" --match dl_submit --skip 2 --drops 10 --lose reply
direct=$URL; URL=redis://127.0.0.1:$PPORT_w1
start_worker w1 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 2 --sync-timeout 2 \
  --max-sync-retries 1
URL=$direct
wait_until 30 "! alive $WRK_w1" "w1 to finish $STEPS steps (a stalled order's get that never pauses never ends)"
wait_workers w1
kill $SRV_s0; wait $SRV_s0
[ "$(grep -c "lost the reply" "$TMP/proxy-$RUN-w1.log")" = 10 ] || fail "the proxy did not lose 10 replies"
log="$TMP/worker-w1.log"
grep -q "an earlier place than ours" "$log" || fail "w1 did not say that the owner waits for an earlier place"
grep -q "registering again" "$log" || fail "w1 did not register again"
joins=$($RCLI XRANGE "dl:{$RUN}:events" - + | grep -c '^join$')
[ "$joins" = 2 ] || fail "$joins registrations, want 2"
pushes=$(sed -n 's/.*metrics:.* pushes \([0-9]*\),.*/\1/p' "$TMP/server-s0.log" | tail -n 1)
[ -n "$pushes" ] || fail "no metrics line in the server's log"
# 2 shards x (6 submissions + 2 completions' resends) = 16, and one more per shard where a `need` asked for
# our own round; thousands before
[ "$pushes" -le 40 ] || fail "the server took $pushes pushes, want at most 40"
say "w1 waited out the stalled order with pauses: $pushes pushes in all, registered again, finished"
