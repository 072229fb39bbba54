#!/bin/sh
# it_redis_refuses_writes.sh: Redis refuses every write for a while (maxmemory reached under noeviction: OOM;
# a failed RDB save with stop-writes-on-bgsave-error refuses the same way, MISCONF) under a sync run of one
# shard-server and two workers (--max-sync-retries 1: their second failed sync in a row registers them again;
# --sync-timeout 2: a get that waits for a commit Redis refuses fails in 2 s, not 120).
# Every process stays up and says what is wrong and what to do (rconn_error_hint: "raise maxmemory"); `coordinator
# status` (read-only) still answers; heartbeats and lease renewals still go through, so after more than the
# heartbeat timeout nobody is evicted and the shard-server keeps its shards; once maxmemory is raised the run goes on by itself and the workers finish
# their steps with every shard at one version and none marked corrupt. Before, a worker's registration after its
# failed syncs was refused too, and the worker exited at once ("sync failed for good: OOM ..."), a second after
# Redis stopped taking writes (worker/diloco/control.c, register_patient); and once the refusals outlasted the
# heartbeat timeout every worker was evicted (its round lost) and the shard-server lost its leases ("lease lost
# ...; dropping version N from memory") and loaded its shards again.
# test: light (it waits for Redis more than it computes)
. "$(dirname "$0")/lib.sh"
start_redis
RUN=oom
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 2 --seed 1 --heartbeat-timeout 3
start_server s1
for w in w1 w2; do
  start_worker $w --sync-every 5 --steps 300 --heartbeat-interval 1 --max-sync-retries 1 --sync-timeout 2 --step-delay-ms 5
done
wait_until 30 "[ \"\$($RCLI HGET 'dl:{$RUN}:shards' 1:version)\" -ge 3 ] 2>/dev/null" "three rounds committed"
$RCLI CONFIG SET maxmemory 1 > /dev/null || fail "CONFIG SET maxmemory"
say "maxmemory 1 (noeviction): Redis refuses every write"
# A worker whose sync Redis refuses registers again, is refused, and says so. One that had arrived at the barrier
# before the refusal waits there for the other, a wait that needs no write, and has nothing to say (seen once
# on a loaded machine: the test waited for its "registering again" in vain).
refused() { grep -q 'registering again after' "$TMP/worker-$1.log"; }
wait_until 40 "refused w1 || refused w2" "a worker to register again after its failed syncs"
for w in w1 w2; do
  eval "pid=\$WRK_$w"
  if refused $w; then
    wait_until 20 "grep -q 'Redis refuses our registration for now' $TMP/worker-$w.log || ! alive $pid" \
      "$w to say Redis refuses its registration"
    grep 'Redis refuses our registration for now' "$TMP/worker-$w.log" | grep -q 'raise maxmemory' ||
      fail "$w did not say what to do about the refusal: $(grep 'refuses' "$TMP/worker-$w.log" | head -n 1)"
  fi
  alive "$pid" || fail "$w exited while Redis refused writes: $(grep -E 'ERROR|WARN' "$TMP/worker-$w.log" | tail -n 3)"
done
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status-oom.txt" 2>&1 ||
  fail "coordinator status while Redis refuses writes: $(cat "$TMP/status-oom.txt")"
alive "$SRV_s1" || fail "the shard-server exited while Redis refused writes"
# Liveness goes on meanwhile (dl_heartbeat, dl_server_beat, dl_reap may run at maxmemory: lua/90_register.lua):
# after more than the heartbeat timeout (3 s) of refusals both workers are members and s1 still holds both shards
# under their epochs (and after, nobody was evicted: below).
epochs=$($RCLI HMGET "dl:{$RUN}:shards" 0:epoch 1:epoch | paste -sd' ')
sleep 4
wait_until 10 "[ \"\$($RCLI ZCARD 'dl:{$RUN}:heartbeats')\" = 2 ]" "both workers to be members"
[ "$($RCLI HMGET "dl:{$RUN}:shards" 0:owner 1:owner | paste -sd' ')" = "s1 s1" ] &&
  [ "$($RCLI HMGET "dl:{$RUN}:shards" 0:epoch 1:epoch | paste -sd' ')" = "$epochs" ] ||
  fail "s1 lost its leases while Redis refused writes: $($RCLI HGETALL "dl:{$RUN}:shards" | paste -sd' ' | cut -c1-200)"
grep -q 'lease lost' "$TMP/server-s1.log" && fail "s1 dropped shards while Redis refused writes: $(grep 'lease lost' "$TMP/server-s1.log" | head -n 1)"
say "every process up and saying why, members and leases kept; raising maxmemory again"
$RCLI CONFIG SET maxmemory 0 > /dev/null || fail "CONFIG SET maxmemory 0"
wait_workers w1 w2
# (the reaper's first call after the refusals, had the beats been refused, evicts everyone: their last beats are
# more than the timeout old)
[ "$($RCLI HGET "dl:{$RUN}:state" deaths)" = 0 ] ||
  fail "$($RCLI HGET "dl:{$RUN}:state" deaths) worker(s) evicted over the refusals: their heartbeats were refused"
for w in w1 w2; do
  grep -q 'Redis refuses our registration for now' "$TMP/worker-$w.log" || continue
  grep -q 'Redis took our registration after' "$TMP/worker-$w.log" || fail "$w did not say it registered"
done
v0=$($RCLI HGET "dl:{$RUN}:shards" 0:version); v1=$($RCLI HGET "dl:{$RUN}:shards" 1:version)
[ "$v0" = "$v1" ] && [ "$v0" -gt 3 ] || fail "shards at versions $v0 and $v1 after the workers finished"
[ -z "$($RCLI HGET "dl:{$RUN}:shards" 0:corrupt)$($RCLI HGET "dl:{$RUN}:shards" 1:corrupt)" ] || fail "a shard was marked corrupt"
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status.txt" 2>&1 || fail "coordinator status: $(cat "$TMP/status.txt")"
say "OK: both workers finished their steps after the refusal, shards at version $v0, none corrupt"
