#!/bin/sh
# it_server_before_run.sh: a shard-server started before its run is made waits for it ("start as many as
# you like, any time"): it says so once, stays up while Redis has no function library and while other
# runs are made, takes the run's shards once `coordinator init` made it, and the run trains. A stop while
# it waits ends it at once with status 0. A config it cannot parse is no reason to wait: it exits 1.
. "$(dirname "$0")/lib.sh"
start_redis
RUN=early
start_server s1
wait_until 10 "grep -q 'waiting for run early to be made' $TMP/server-s1.log" "the waiting line"
sleep 1
alive $SRV_s1 || fail "the shard-server exited before its run was made: $(cat "$TMP/server-s1.log")"
init_run other --trainer quadratic --numel 1000 --shards 1 # the library is loaded now, our run still missing
sleep 1.2
alive $SRV_s1 || fail "the shard-server exited once another run was made: $(cat "$TMP/server-s1.log")"
[ "$(grep -c 'waiting for run' "$TMP/server-s1.log")" -eq 1 ] || fail "the wait is said more than once a minute"
init_run $RUN --trainer quadratic --numel 4000 --shards 2 --workers 1
wait_until 10 '[ "$($RCLI HGET "dl:{$RUN}:shards" 1:owner)" = s1 ]' "s1 to take the run's shards"
start_worker w1 --trainer quadratic --steps 40 --sync-every 10
wait_workers w1
[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -ge 4 ] || fail "the run did not train: round $($RCLI HGET "dl:{$RUN}:state" round:0)"

# a stop while it waits: exit 0 at once
RUN=never
start_server s2
wait_until 10 "grep -q 'waiting for run never to be made' $TMP/server-s2.log" "s2's waiting line"
term_and_time $SRV_s2 "s2 to stop"
wait $SRV_s2 || fail "s2 exited with status $? on SIGTERM while it waited"
awk -v t="$TERM_SECS" 'BEGIN { exit !(t < 2) }' || fail "s2 took $TERM_SECS s to stop"
grep -q "stopped while waiting for run never" "$TMP/server-s2.log" || fail "s2: $(cat "$TMP/server-s2.log")"
say "s2 stopped while waiting, in $TERM_SECS s"

# a config that does not parse is an error, not a wait
$RCLI HSET "dl:{bad}:config" numel not-a-number > /dev/null
RUN=bad
start_server s3
wait_until 10 "! alive $SRV_s3" "s3 to exit"
wait $SRV_s3; rc=$?
[ "$rc" = 1 ] || fail "s3 exited with $rc on a bad config: $(cat "$TMP/server-s3.log")"
grep -q "waiting for run" "$TMP/server-s3.log" && fail "s3 waited on a bad config"
say "a server started before its run waited, took its shards and trained it; a bad config exits 1: $(grep ERROR "$TMP/server-s3.log" | head -1)"
