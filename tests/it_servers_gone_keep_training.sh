#!/bin/sh
# it_servers_gone_keep_training.sh: a worker cut off from every shard-server, in a run that did not move
# since its last sync, keeps training and syncs again once a server is back. Its syncs fail (nobody to push
# to), and after --max-sync-retries + 1 of them in a row it registers again; the registration's fetch leaves
# out the shards it holds at their committed version (worker/diloco/fetch.c: digest equal), so it needs no
# server and the worker trains on (before, that fetch failed after the sync timeout and the worker exited with
# an error, though nothing was lost). A lone worker, 2 shards, H = 10 at 20 ms a step; its only shard-server
# is killed after 2 rounds; 6 s later (at least two registrations) a new shard-server with another id starts,
# takes the expired leases, and the worker's next rounds commit.
# test: light (it waits more than it computes: 3 s of CPU in 13 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
start_redis
RUN=gone
init_run $RUN --trainer quadratic --numel 4000 --shards 2 --workers 1
start_server s1 --lease-ttl-ms 1000
start_worker w --sync-every 10 --steps 0 --step-delay-ms 20 --max-sync-retries 1 --sync-timeout 2 --heartbeat-interval 0.5
version() { $RCLI HGET "dl:{$RUN}:shards" 0:version; }
wait_until 20 '[ "$(version)" -ge 2 ] 2>/dev/null' "the worker's first two rounds"
# killed while no round is in flight (the run did not move since the worker's last sync): with the worker
# stopped inside its local steps, its open round is the committed version of both shards. Killed after a
# round's barrier closed and before its commit (a few ms of each 200 ms round; seen in 2 of 10 runs), or
# after the worker pushed its pseudo-gradient and before it arrived at the barrier (its arrival then closes
# the round with nobody to commit it; seen in CI and in 1 of 10 runs beside three busy loops), the run moved
# past what the worker holds, and its registration's fetch needs a server: a different test. So the worker is
# stopped less than 150 ms after its last sync ended (its log's line; the next push is 10 steps of at least
# 20 ms later) and the shards are at its open round.
last_sync_t() { grep '"event":"sync"' "$TMP/w.jsonl" | tail -n 1 | sed 's/.*"t":\([0-9.]*\).*/\1/'; }
quiet=0
for _ in $(seq 40); do
  kill -STOP "$WRK_w"
  now=$(date +%s.%N); open=$($RCLI HGET "dl:{$RUN}:state" round:0)
  if [ "$(shard_versions $RUN)" = "$open $open" ] && awk "BEGIN { exit !($now - $(last_sync_t) < 0.15) }"; then
    quiet=1; break
  fi
  kill -CONT "$WRK_w"; sleep 0.05
done
[ $quiet = 1 ] || fail "could not stop the worker inside its local steps in 40 tries (versions $(shard_versions $RUN))"
kill -9 "$SRV_s1"
kill -CONT "$WRK_w"
at=$(version)
say "the only shard-server killed at version $at"
wait_until 20 '[ "$(grep -c "registering again after 2 failed syncs" "$TMP/worker-w.log")" -ge 2 ]' \
  "the worker to register again twice"
alive "$WRK_w" || fail "the worker exited without a shard-server: $(tail -n 5 "$TMP/worker-w.log")"
grep -q "held at their committed version already" "$TMP/worker-w.log" || fail "the registration fetched (no 'held' line)"
[ "$(version)" = "$at" ] || fail "the version moved without a shard-server: $(version)"
say "no shard-server: the worker registered again $(grep -c 'registering again' "$TMP/worker-w.log") times and trains on"
start_server s2 --lease-ttl-ms 1000
wait_until 30 '[ "$(version)" -ge $((at + 2)) ]' "the worker's rounds to commit again through s2 (version $at + 2)"
alive "$WRK_w" || fail "the worker exited"
say "a new shard-server: the worker synced again (version $(version))"
