#!/bin/sh
# it_redis_misconf.sh: Redis stops taking writes after a failed RDB save (stop-writes-on-bgsave-error, MISCONF:
# here its dir is removed under it, so BGSAVE cannot write its file) under a sync run of one shard-server and two
# workers, then is put right (a writable dir, BGSAVE). Every process stays up and says what is wrong and what to
# do ("fix what its log names"); the shard-server says it once, not at every beat; after the fix the workers
# finish their steps, every shard at one version, none corrupt. Before, the workers exited within a second of the
# refusal ("sync failed for good: MISCONF ..."), and the shard-server logged the 330-character refusal at every
# beat (every ttl/3). The refusal outlasts the run's heartbeat timeout (3 s): once it is over, nobody is evicted
# (the first call after it evicted every worker, each losing its round: the reaper saw them all silent).
# test: light (it waits for Redis more than it computes)
. "$(dirname "$0")/lib.sh"
start_redis --enable-protected-configs yes
RUN=misconf
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 2 --seed 3 --heartbeat-timeout 3
start_server s1 --lease-ttl-ms 1500
for w in w1 w2; do
  start_worker $w --sync-every 5 --steps 300 --heartbeat-interval 1 --max-sync-retries 1 --sync-timeout 2 --step-delay-ms 5
done
wait_until 30 "[ \"\$($RCLI HGET 'dl:{$RUN}:shards' 1:version)\" -ge 3 ] 2>/dev/null" "three rounds committed"
mkdir "$TMP/rdb"
$RCLI CONFIG SET dir "$TMP/rdb" > /dev/null || fail "CONFIG SET dir"
rmdir "$TMP/rdb"
$RCLI CONFIG SET save "3600 1" > /dev/null
$RCLI BGSAVE > /dev/null
wait_until 10 "$RCLI SET probe 1 | grep -q MISCONF" "Redis to refuse writes (MISCONF)"
say "BGSAVE failed: Redis refuses writes (MISCONF)"
# (a worker that had arrived at the barrier before the refusal waits there for the other, a wait that needs no
# write, and has nothing to say: at least one worker is refused)
refused() { grep -q 'registering again after' "$TMP/worker-$1.log"; }
wait_until 30 "refused w1 || refused w2" "a worker to register again after its failed syncs"
for w in w1 w2; do
  eval "pid=\$WRK_$w"
  refused $w &&
    wait_until 30 "grep -q 'Redis refuses our registration for now: MISCONF.*fix what its log names' $TMP/worker-$w.log || ! alive $pid" \
      "$w to say Redis refuses its registration, and what to do"
  alive "$pid" || fail "$w exited while Redis refused writes: $(grep -E 'ERROR|WARN' "$TMP/worker-$w.log" | tail -n 2 | cut -c1-200)"
done
wait_until 10 "grep -q 'lease renewal failed: MISCONF.*fix what its log names' $TMP/server-s1.log" "s1 to say why its leases lapse"
sleep 4 # (a rate: a beat every 0.5 s said it 8 times more)
n=$(grep -c 'lease renewal failed: MISCONF' "$TMP/server-s1.log")
[ "$n" -le 2 ] || fail "s1 said its renewal failed $n times in about 4 s"
alive "$SRV_s1" || fail "s1 exited while Redis refused writes"
say "every process up, each saying why once; fixing the disk"
mkdir "$TMP/rdb"
$RCLI CONFIG SET dir "$TMP/rdb" > /dev/null # (Redis's working directory was the removed one)
$RCLI BGSAVE > /dev/null
wait_until 10 "$RCLI SET probe 1 | grep -q OK" "Redis to take writes again"
wait_workers w1 w2
# the refusal outlasted the heartbeat timeout (3 s): the first call after it, a heartbeat that reaps before it
# beats, evicted every worker (their rounds lost); the reaper now counts a silence of every member as an outage
[ "$($RCLI HGET "dl:{$RUN}:state" deaths)" = 0 ] ||
  fail "$($RCLI HGET "dl:{$RUN}:state" deaths) worker(s) evicted once Redis took writes again"
$RCLI XRANGE "dl:{$RUN}:events" - + | grep -qx outage || fail "no outage event"
v0=$($RCLI HGET "dl:{$RUN}:shards" 0:version); v1=$($RCLI HGET "dl:{$RUN}:shards" 1:version)
[ "$v0" = "$v1" ] && [ "$v0" -gt 3 ] || fail "shards at versions $v0 and $v1 after the workers finished"
[ -z "$($RCLI HGET "dl:{$RUN}:shards" 0:corrupt)$($RCLI HGET "dl:{$RUN}:shards" 1:corrupt)" ] || fail "a shard was marked corrupt"
say "OK: both workers finished after the save was fixed, shards at version $v0, none corrupt"
