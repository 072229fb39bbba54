#!/bin/sh
# it_stream_max_retries.sh: a Streaming worker cut off from every shard-server stops after
# --max-sync-retries failed syncs, as a plain DiLoCo worker does. Its inner training diverges at every
# fragment (a huge --quad-lr), so each boundary resets the fragment to the global parameters instead
# of sending a pseudo-gradient; once the only shard-server is killed, that reset (a fetch) fails. Such a
# failure used to be dropped by the Streaming schedule (streaming.c mapped it to "nothing changed"), so
# the worker trained on forever without syncing; now it counts: after 3 failures in a row
# (--max-sync-retries 2) it registers again and cannot fetch the parameters. It used to exit with an error
# there; since 3 December it waits for a shard-server at that fetch, saying so, and trains no more
# (worker/diloco/round.c fetch_after_register; tests/it_servers_gone_round_closed.sh), so the test then
# stops it with SIGTERM (exit 0).
# A fetch leaves out the shards whose committed version the worker holds already (fetch.c: digest equal), and
# a lone worker's resets hold every shard: with the server gone they succeeded without it and the worker
# trained on. So, once the server is killed, each shard's committed digest is changed in Redis, as another
# worker's commit would have changed it: the worker's copy is no longer the committed one, and every reset
# must fetch from a shard-server.
# test: light (it waits more than it computes: 2 s of CPU in 10 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
start_redis
init_run st --trainer quadratic --numel 4000 --shards 2 --fragments 2 --workers 1
RUN=st
start_server s1 --lease-ttl-ms 1000
start_worker w --sync-every 20 --steps 1000000 --step-delay-ms 20 --heartbeat-interval 1 \
  --max-sync-retries 2 --sync-timeout 2 --quad-lr 1e30
wait_until 30 'grep -q "resetting to the global parameters" "$TMP/worker-w.log"' "the worker's first reset"
kill -9 "$SRV_s1"
for k in 0 1; do $RCLI HSET "dl:{$RUN}:shards" "$k:digest" 0123456789abcdef > /dev/null; done
say "shard-server killed, the committed digests no longer the worker's copy; the worker's fetches now fail"
wait_until 45 'grep -q "registered again, but no shard-server gave us" "$TMP/worker-w.log"' \
  "the worker to register again after --max-sync-retries failed syncs and wait for a shard-server"
grep -q "sync failed (3 in a row, limit 2)" "$TMP/worker-w.log" || fail "the third failed sync was not counted"
grep -q "registering again after 3 failed syncs" "$TMP/worker-w.log" || fail "the worker did not register again"
alive "$WRK_w" || fail "the worker exited instead of waiting for a shard-server: $(tail -n 3 "$TMP/worker-w.log")"
kill -TERM "$WRK_w"
wait "$WRK_w" || fail "the worker stopped by SIGTERM while it waited exited $?"
say "the worker counted its failed syncs, registered again and waited for a shard-server: $(grep -c 'sync failed (' "$TMP/worker-w.log") counted"
