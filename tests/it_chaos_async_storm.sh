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
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
OUT="$TMP/storm"
S=${STORM_SECONDS:-45}
say "async storm: 6 workers, 3 shard-servers, 2 fragments, a fault every 2 s for $S s"
python3 tests/chaos/chaos.py --out "$OUT" --run astorm --workers 6 --servers 3 --shards 6 --numel 30000 \
  --sync-every 20 --step-delay-ms 25 --heartbeat-timeout 3 --lease-ttl-ms 1500 \
  --duration "$S" --fault-every 2 --seed "${STORM_SEED:-6}" --aof --keep-redis-dir \
  --faults stop:worker=3,kill:worker=2,kill:server=2,stop:server=2,kill:coordinator=1,stop:coordinator=1,kill:redis=1 \
  --coordinators 1 --max-down-workers 2 --max-down-servers 1 --stop-min 0.5 --stop-max 5 --group-ranks 2 \
  --init-arg=--async --init-arg=--dn-buffer-size --init-arg=3 --init-arg=--fragments --init-arg=2 \
  --init-arg=--async-lookahead --init-arg=0.5 --init-arg=--weight-by --init-arg=tokens --init-arg=--weight-ref-tokens \
  --init-arg=20 --init-arg=--staleness-weight --init-arg=sqrt > "$TMP/chaos.log" 2>&1
rc=$?
tail -n 1 "$TMP/chaos.log"
[ $rc -eq 3 ] && fail "the run did not make progress after the storm (settle timeout): a hang; see $OUT/chaos.jsonl"
[ $rc -eq 0 ] || fail "chaos harness exited with $rc: $(tail -n 5 "$TMP/chaos.log")"
python3 tests/chaos/audit.py "$OUT" --min-faults $((S / 3)) > "$TMP/audit.log" 2>&1 ||
  fail "audit failed: $(grep -E 'FAIL' "$TMP/audit.log")"
grep -v '^figures' "$TMP/audit.log"
# the run's Redis again, from its append-only file (the harness shut it down after its dump)
[ -d "$OUT/redis/appendonlydir" ] || fail "no append-only file kept in $OUT/redis"
start_redis --dir "$OUT/redis" --appendonly yes
wait_until 30 '[ "$($RCLI PING 2>&1)" = PONG ]' "Redis to load the run's append-only file"
RUN=astorm
ref_async_check astorm 20 "(async Streaming under a storm of $(grep -c '"event": "fault"' "$OUT/chaos.jsonl") faults)" \
  --async-lookahead 0
grep -q ' [1-9][0-9]* new registrations' "$TMP/ref-astorm.log" ||
  fail "no worker registered again: the storm evicted and killed nobody ($(cat "$TMP/ref-astorm.log"))"
