#!/bin/sh
# it_shutdown_servers_gone.sh: a worker whose syncs fail because the run's shard-servers are gone, and whose
# run is then shut down, stops cleanly (exit 0) at its registration's SHUTDOWN refusal. Its heartbeat (every
# 30 s by default) would tell it of the shutdown only later, and meanwhile its syncs fail, so the first word
# it gets is dl_register refusing SHUTDOWN after --max-sync-retries + 1 failures (worker/diloco/round.c,
# on_failure). That refusal used to end the worker with "ERROR sync failed for good: SHUTDOWN ..." and exit 1,
# as if something had broken, when an operator had ended the run (shutdown first and the servers stopped
# after it is the common order; here the server goes first, so that no Function refuses a sync before).
# Then the order a user takes, with a heartbeat that tells the worker: the server killed, the run shut down,
# and a --sync-timeout of 60 s. The worker's push to the gone owner retried until that timeout (120 s by
# default) before it stopped; now a push or get gives up 5 s after the session was told of the shutdown
# (worker/diloco/owners.c, SHUTDOWN_GRACE_MS): the worker exits 0 within 15 s.
# test: light (it waits on sync timeouts)
. "$(dirname "$0")/lib.sh"
start_redis
RUN=sgone
init_run $RUN --trainer quadratic --numel 4000 --shards 1 --workers 1
start_server s1 --lease-ttl-ms 1000
start_worker w --sync-every 10 --steps 0 --step-delay-ms 5 --heartbeat-interval 30 --max-sync-retries 1 --sync-timeout 1
wait_until 20 '[ "$($RCLI HGET "dl:{$RUN}:shards" 0:version)" -ge 2 ] 2>/dev/null' "the worker's first two rounds"
kill -9 "$SRV_s1"
bin/coordinator control --redis "$URL" --run $RUN shutdown > "$TMP/shutdown.log" 2>&1 ||
  fail "coordinator control shutdown: $(cat "$TMP/shutdown.log")"
wait_until 20 '! alive "$WRK_w"' "the worker to stop after the shutdown (its heartbeat is 30 s away)"
wait "$WRK_w" || fail "the worker exited with status $? after the shutdown: $(grep -v DEBUG "$TMP/worker-w.log" | tail -n 3)"
grep -q "the run was shut down; the worker does not register again" "$TMP/worker-w.log" ||
  fail "the worker did not stop at its registration's SHUTDOWN: $(grep -v DEBUG "$TMP/worker-w.log" | tail -n 3)"
grep -q "for good" "$TMP/worker-w.log" && fail "the worker called the shutdown a failure: $(grep "for good" "$TMP/worker-w.log")"
say "stopped cleanly: $(grep -o 'stopped after .*' "$TMP/worker-w.log")"

RUN=sgone2
init_run $RUN --trainer quadratic --numel 4000 --shards 1 --workers 1
start_server s2 --lease-ttl-ms 1000
start_worker w2 --sync-every 10 --steps 0 --step-delay-ms 5 --heartbeat-interval 0.5 --sync-timeout 60
wait_until 20 '[ "$($RCLI HGET "dl:{$RUN}:shards" 0:version)" -ge 2 ] 2>/dev/null' "w2's first two rounds"
kill -9 "$SRV_s2"
sleep 0.5 # (w2's next sync is on its way to the gone server: 10 steps of 5 ms)
bin/coordinator control --redis "$URL" --run $RUN shutdown > "$TMP/shutdown2.log" 2>&1 ||
  fail "coordinator control shutdown: $(cat "$TMP/shutdown2.log")"
t0=$(date +%s)
wait_until 15 '! alive "$WRK_w2"' "w2 to stop within 15 s of the shutdown (its sync timeout is 60 s)"
wait "$WRK_w2" || fail "w2 exited with status $? after the shutdown: $(grep -v DEBUG "$TMP/worker-w2.log" | tail -n 3)"
grep -q "had not succeeded 5000 ms later" "$TMP/worker-w2.log" ||
  fail "w2 did not give up its sync at the shutdown's grace: $(grep -v DEBUG "$TMP/worker-w2.log" | tail -n 3)"
say "w2 stopped $(( $(date +%s) - t0 )) s after the shutdown: $(grep -o 'stopped after .*' "$TMP/worker-w2.log")"
