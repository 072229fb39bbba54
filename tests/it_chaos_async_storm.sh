#!/bin/sh
# it_chaos_async_storm.sh: async DiLoCo under a fault storm, checked bit for bit. An async Streaming run (2
# fragments of 3 shards, Delayed Nesterov with a buffer of 3, --async-lookahead 0.5, each pseudo-gradient
# weighed by its tokens and by its staleness: --weight-by tokens, --staleness-weight sqrt) of 6 quadratic workers
# (w1 a process group of 2 ranks), 3 shard-servers and a coordinator; one fault every 2 s for 45 s: workers
# stopped (a stop longer than the 3 s heartbeat timeout evicts: the worker registers again) and killed (-9:
# the supervisor starts a new process under the same id, with a trainer of its own), shard-servers
# killed and stopped, the coordinator killed and stopped, Redis killed (-9; its append-only file fsyncs
# every write, and it comes back on the same port and directory); the supervisor restarts what dies
# (tests/chaos).
# Afterwards:
#   - tests/chaos/audit.py: each (shard, version) committed once with no gap, no worker went back to an older
#     version, every faulted process came back and synced, the loss fell (the round checks are n/a: an async
#     run closes no rounds);
#   - the run's Redis, kept on disk (AOF), is read by tests/tools/ref_async, which replays the order Redis
#     placed every submission in with the same trainer and outer math, the new registrations, the restarted
#     processes and the no-op places included (a worker evicted while it delivered a submission: applied
#     where its Δ had arrived, a no-op elsewhere; a group's tokens, its ranks' sum, counting anew when it
#     registers again: a group that registered again at a failed round kept its count until 1 December,
#     which this storm found): every shard's digest must equal the replay's.
# STORM_HA=1 (it_chaos_async_ha_storm.sh) runs Redis as a master, 2 replicas and 3 Sentinels with
# --min-replicas 1 and kills the master (-9) instead of the one Redis: the replay then reads the node whose
# append-only file holds the most versions. (A master SIGSTOPped past its failover is not among the faults:
# WAIT is not consensus, and a write it takes once it runs again can be lost after a replica acknowledged
# it: docs/PROTOCOL.md, "Durable means replicated".)
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
OUT="$TMP/storm"
S=${STORM_SECONDS:-45}
if [ "${STORM_HA:-0}" = 1 ]; then
  set -- --redis-ha --init-arg=--min-replicas --init-arg=1; redis_fault=kill:redis-master=2; what="Redis with Sentinel"
else
  set --; redis_fault=kill:redis=1; what="one Redis"
fi
say "async storm: 6 workers, 3 shard-servers, 2 fragments, $what, a fault every 2 s for $S s"
python3 tests/chaos/chaos.py --out "$OUT" --run astorm --workers 6 --servers 3 --shards 6 --numel 30000 \
  --sync-every 20 --step-delay-ms 25 --heartbeat-timeout 3 --lease-ttl-ms 1500 \
  --duration "$S" --fault-every 2 --seed "${STORM_SEED:-6}" --aof --keep-redis-dir \
  --faults stop:worker=3,kill:worker=2,kill:server=2,stop:server=2,kill:coordinator=1,stop:coordinator=1,$redis_fault \
  --coordinators 1 --max-down-workers 2 --max-down-servers 1 --stop-min 0.5 --stop-max 5 --group-ranks 2 \
  --init-arg=--async --init-arg=--dn-buffer-size --init-arg=3 --init-arg=--fragments --init-arg=2 \
  --init-arg=--async-lookahead --init-arg=0.5 --init-arg=--weight-by --init-arg=tokens --init-arg=--weight-ref-tokens \
  --init-arg=20 --init-arg=--staleness-weight --init-arg=sqrt "$@" > "$TMP/chaos.log" 2>&1
rc=$?
tail -n 1 "$TMP/chaos.log"
[ $rc -eq 3 ] && fail "the run did not make progress after the storm (settle timeout): a hang; see $OUT/chaos.jsonl"
[ $rc -eq 0 ] || fail "chaos harness exited with $rc: $(tail -n 5 "$TMP/chaos.log")"
python3 tests/chaos/audit.py "$OUT" --min-faults $((S / 3)) > "$TMP/audit.log" 2>&1 ||
  fail "audit failed: $(grep -E 'FAIL' "$TMP/audit.log")"
grep -v '^figures' "$TMP/audit.log"
# the run's Redis again, from its append-only file (the harness shut it down after its dump)
RUN=astorm
load_aof() { # DIR: Redis on the append-only file kept in DIR
  [ -d "$1/appendonlydir" ] || fail "no append-only file kept in $1"
  start_redis --dir "$1" --appendonly yes
  wait_until 30 '[ "$($RCLI PING 2>&1)" = PONG ]' "Redis to load the run's append-only file in $1"
}
if [ "${STORM_HA:-0}" = 1 ]; then # (the last master's, or a replica's as far: every version summed)
  best=; most=-1
  for node in "$OUT"/redis/node-*; do
    load_aof "$node"
    n=$(shard_versions $RUN | awk '{for (i = 1; i <= NF; i++) s += $i} END {print s + 0}')
    [ "$n" -gt "$most" ] && most=$n && best=$node
    $RCLI SHUTDOWN NOSAVE > /dev/null 2>&1
  done
  say "the node with the most versions: $(basename "$best") ($most summed over the shards)"
  load_aof "$best"
else
  load_aof "$OUT/redis"
fi
ref_async_check astorm 20 "(async Streaming under a storm of $(grep -c '"event": "fault"' "$OUT/chaos.jsonl") faults)" \
  --async-lookahead 0
grep -q ' [1-9][0-9]* new registrations' "$TMP/ref-astorm.log" ||
  fail "no worker registered again: the storm evicted and killed nobody ($(cat "$TMP/ref-astorm.log"))"
