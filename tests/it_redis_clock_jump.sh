#!/bin/sh
# it_redis_clock_jump.sh: the clock of Redis's host is stepped an hour forward, then an hour back (NTP stepping
# it, an operator's `date -s`, a VM resumed from a snapshot; or a Sentinel failover to a replica whose host's
# clock differs), under a sync run of two shard-servers and three workers. Heartbeats, leases and barriers are
# timed on Redis's clock (lua/, TIME). The step is made in redis-server alone, by tests/tools/preload/
# clock_shift.c (LD_PRELOAD). Forward: nobody is evicted and no lease moves (every member and every server looks
# silent at once: an outage, forgiven). Back: a worker and a shard-server killed afterwards are still found dead
# within their timeouts, not an hour later (before the run's clock, lua/10_helpers.lua run_now, the killed worker
# was still a member 20 s after the step back), and the run goes on.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
RUN=clock
cc -shared -fPIC -O2 -o "$TMP/clock_shift.so" tests/tools/preload/clock_shift.c -ldl 2>"$TMP/cc.txt" ||
  fail "cannot build the clock shifter: $(cat "$TMP/cc.txt")"
echo 0 > "$TMP/shift"
export CLOCK_SHIFT_FILE="$TMP/shift"
LD_PRELOAD="$TMP/clock_shift.so" && export LD_PRELOAD
start_redis
unset LD_PRELOAD
init_run $RUN --trainer quadratic --numel 20000 --shards 4 --workers 2 --seed 3 --heartbeat-timeout 3
start_server s1 --lease-ttl-ms 1500
start_server s2 --lease-ttl-ms 1500
for w in w1 w2 w3; do
  start_worker $w --sync-every 5 --steps 100000 --heartbeat-interval 1 --step-delay-ms 5
done
version() { $RCLI HGET "dl:{$RUN}:shards" 0:version; }
owners() { for k in 0 1 2 3; do printf '%s:%s ' "$($RCLI HGET "dl:{$RUN}:shards" $k:owner)" "$($RCLI HGET "dl:{$RUN}:shards" $k:epoch)"; done; }
wait_until 30 "[ \"\$(version)\" -ge 3 ] 2>/dev/null" "three rounds committed"
wait_until 30 "owners | grep -q s1: && owners | grep -q s2:" "both servers to own shards"
before=$(owners); v=$(version)
echo 3600 > "$TMP/shift"
say "version $v, leases $before; Redis's clock now an hour ahead"
# the reaper's outage (every member silent: silent_ms) and the lease beats' (no server beat: seconds)
events() { $RCLI XRANGE "dl:{$RUN}:events" - +; }
wait_until 20 "events | grep -qx silent_ms && events | grep -qx seconds" "both outage events (members and leases)"
v=$(version)
wait_until 30 "[ \"\$(version)\" -ge $((v + 3)) ] 2>/dev/null" "three more rounds after the forward step"
deaths=$($RCLI HGET "dl:{$RUN}:state" deaths)
[ "$deaths" = 0 ] || fail "$deaths worker(s) evicted after Redis's clock stepped forward"
[ "$(owners)" = "$before" ] || fail "leases moved after the forward step: $before -> $(owners)"
echo 0 > "$TMP/shift"
v=$(version)
say "forward: nobody evicted, no lease moved; Redis's clock now back an hour"
wait_until 20 "events | grep -qx clock_back" "a clock_back event"
v=$(version)
wait_until 30 "[ \"\$(version)\" -ge $((v + 3)) ] 2>/dev/null" "three more rounds after the backward step"
kill -9 "$WRK_w3"
say "w3 killed"
wait_until 20 "! $RCLI HEXISTS 'dl:{$RUN}:workers' w3 | grep -q 1" "w3 to be evicted (heartbeat timeout 3 s)"
kill -9 "$SRV_s2"
say "w3 evicted; s2 killed"
wait_until 20 "! owners | grep -q s2:" "s2's shards to go to s1 (lease ttl 1.5 s)"
v=$(version)
wait_until 30 "[ \"\$(version)\" -ge $((v + 2)) ] 2>/dev/null" "two more rounds with s1 alone"
say "OK: no eviction or lease move on the forward step; after the backward step w3 evicted and s2's shards moved in time"
