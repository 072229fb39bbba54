#!/bin/sh
# it_servers_gone_round_closed.sh: a worker whose round closed with nobody left to commit it waits for a
# shard-server at its registration's fetch, however long the outage, instead of exiting.
# it_servers_gone_keep_training covers a worker cut off from every shard-server while the run stands where it
# left it: its registration fetches nothing and it trains on. Here the run moved: the worker's only
# shard-server dies between the round's close and its commit (--fault-crash-before-commit 1), so the open round
# is one past the committed version, and the fetch after the worker registers again needs a server. That
# fetch used to fail after one sync timeout and the worker exited 1 ("sync failed for good"): with the
# defaults about 10 minutes after the server died, a timing the worker cannot choose (CI met it in
# it_servers_gone_keep_training). It now tries again until a server answers, the run is shut down or the
# worker is stopped (worker/diloco/round.c, fetch_after_register); training on meanwhile would be wasted, as
# the fetch replaces the parameters. A lone worker, 2 shards, H = 10, --max-sync-retries 1, --sync-timeout 2.
# Part 1: the worker is still up 8 s after it registered again (it used to exit 2 s after), says it waits, and
# once s2 starts the run moves on and the worker says so; the run's shutdown ends it with exit 0.
# Part 2: the same outage ended by the run's shutdown instead of a server: the worker exits 0, no error.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
start_redis
version() { $RCLI HGET "dl:{$RUN}:shards" 0:version; }
outage() { # RUN: a run whose only server dies in its first commit, and a worker w waiting to fetch again
  RUN=$1
  init_run $RUN --trainer quadratic --numel 4000 --shards 2 --workers 1
  start_server s1 --lease-ttl-ms 1000 --fault-crash-before-commit 1
  start_worker w --sync-every 10 --steps 0 --step-delay-ms 20 --max-sync-retries 1 --sync-timeout 2 \
    --heartbeat-interval 0.5
  wait_until 20 '! alive $SRV_s1' "s1 to die in the first round's commit" 0.05
  [ "$(shard_versions $RUN)" = "0 0" ] && [ "$($RCLI HGET "dl:{$RUN}:state" round:0)" = 1 ] ||
    fail "the round did not close uncommitted: versions $(shard_versions $RUN), open round $($RCLI HGET "dl:{$RUN}:state" round:0)"
  wait_until 30 'grep -q "registered again, but no shard-server gave us" "$TMP/worker-w.log"' \
    "the worker to register again and wait for a shard-server"
}
outage gone1
sleep 8
alive "$WRK_w" || fail "the worker exited while it waited for a shard-server: $(tail -n 5 "$TMP/worker-w.log")"
start_server s2 --lease-ttl-ms 1000
wait_until 40 '[ "$(version)" -ge 4 ] 2>/dev/null' "the run to move on once s2 is there"
grep -q "registered again: the run's parameters came after" "$TMP/worker-w.log" ||
  fail "the worker did not say it got the parameters: $(grep -E 'WARN|INFO reg' "$TMP/worker-w.log" | tail -n 5)"
bin/coordinator control --redis "$URL" --run $RUN shutdown > /dev/null || fail "coordinator control shutdown"
wait_workers w
grep -q "for good" "$TMP/worker-w.log" && fail "the worker gave up: $(grep 'for good' "$TMP/worker-w.log")"
say "part 1: waited $(grep -c 'registered again, but no shard-server' "$TMP/worker-w.log") time(s), went on with s2 (versions $(shard_versions $RUN)), exit 0 at the shutdown"
kill "$SRV_s2"
wait "$SRV_s2"
mv "$TMP/worker-w.log" "$TMP/worker-w-part1.log"
mv "$TMP/server-s1.log" "$TMP/server-s1-part1.log"
outage gone2
bin/coordinator control --redis "$URL" --run $RUN shutdown > /dev/null || fail "coordinator control shutdown"
wait_until 20 '! alive $WRK_w' "the worker to stop once the run is shut down"
wait_workers w
grep -q "ERROR.*for good" "$TMP/worker-w.log" && fail "the worker failed: $(grep 'for good' "$TMP/worker-w.log")"
grep -q "the run was shut down" "$TMP/worker-w.log" || fail "the worker did not say the run was shut down: $(tail -n 5 "$TMP/worker-w.log")"
say "part 2: shut down while the worker waited for a shard-server: exit 0"
