#!/bin/sh
# it_ha_sentinel_failover.sh: a sync run (quadratic, 3 workers, 2 shard-servers, 4 shards, min_replicas 1)
# on a Redis master + 2 replicas (AOF) + 3 Sentinels (tests/chaos/chaos.py --redis-ha), everyone given
# the redis+sentinel:// URL. Worker w1 is a process group of 2 ranks (--group-ranks 2: a multi-GPU node,
# each rank with its own connections to Redis and the servers, following the master on its own). The master is kill -9'd three times (each time the Sentinels promote a
# replica; the old master comes back as a replica of the new one), then SIGSTOPped past the failover and
# resumed (a partitioned old master). Nobody restarts a worker or a server. Every worker (the group: both
# ranks, at the same steps) finishes its steps in one incarnation, every round commits exactly once per shard, the round never goes back, every
# commit a shard-server acknowledged is in the final stream (audit "acks"), and the final parameters are
# bit-identical to the fault-free reference.
# test: light (it waits more than it computes: 14 s of CPU in 64 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
# 15 ms a step: the 4 faults (each waits for the Sentinels to see both replicas again) must fit in the
# run on a quiet machine too, where 60 rounds otherwise take under 20 s
OUT="$TMP/ha"; NUMEL=60000; SHARDS=4; SEED=5; H=20; ROUNDS=60
python3 tests/chaos/chaos.py --out "$OUT" --run ha --redis-ha --aof --workers 3 --servers 2 --shards $SHARDS \
  --numel $NUMEL --seed $SEED --sync-every $H --steps $((ROUNDS * H)) --step-delay-ms 15 --heartbeat-timeout 10 \
  --lease-ttl-ms 3000 --duration 90 --fault-every 4 --redis-down 2 --stop-min 5 --stop-max 6 --settle-timeout 60 \
  --fault-plan kill:redis-master,kill:redis-master,kill:redis-master,stop:redis-master \
  --init-arg=--min-replicas --init-arg=1 --group-ranks 2 > "$TMP/chaos.log" 2>&1
rc=$?
tail -n 1 "$TMP/chaos.log"
[ $rc -eq 3 ] && fail "the run did not finish after the failovers (settle timeout): a hang"
[ $rc -eq 0 ] || fail "chaos harness exited with $rc: $(tail -n 5 "$TMP/chaos.log")"
python3 tests/chaos/audit.py "$OUT" --min-faults 4 > "$TMP/audit.log" 2>&1 || { cat "$TMP/audit.log"; fail "audit failed"; }
grep -v '^figures' "$TMP/audit.log"
python3 - "$OUT" $((ROUNDS * H)) <<'PY' > "$TMP/check.log" 2>&1 || { cat "$TMP/check.log"; fail "failover check"; }
import json, sys
out, steps = sys.argv[1], int(sys.argv[2])
ch = [json.loads(l) for l in open(out + "/chaos.jsonl")]
faults = [e for e in ch if e["event"] == "fault"]
assert [f["kind"] + ":" + f["role"] for f in faults] == ["kill:redis-master"] * 3 + ["stop:redis-master"], faults
assert len({f["target"] for f in faults[:3]}) >= 2, "the kills did not hit different nodes: no failover happened"
import glob
switches = max(open(f, errors="replace").read().count("+switch-master") for f in glob.glob(out + "/sentinel-*.log"))
assert switches >= 4, "%d failovers for 3 kills and a stop (the stop did not outlast the failover?)" % switches
bad = [e for e in ch if e["event"] in ("restart", "exit") and e["role"] not in ("redis", "sentinel")]
assert not bad, "a worker or server died or was restarted: %s" % bad
assert sorted(e["target"] for e in ch if e["event"] == "done") == ["w1", "w2", "w3"]
sys.path.insert(0, "tests/chaos")
import group_log
group_log.check(out, steps)  # w1, the group: one registration, its ranks at the same steps, none stale
for w in ("w2", "w3"):
    es = [json.loads(l) for l in open("%s/%s.jsonl" % (out, w))]
    assert len([e for e in es if e["event"] == "join"]) == 1, "%s joined more than once" % w
    assert [e for e in es if e["event"] == "step"][-1]["step"] == steps
    assert not [e for e in es if e["event"] == "sync" and e.get("stale")], "%s lost a round" % w
print("3 master kills on %d nodes and a stopped master, %d failovers; every worker (w1 a group of 2) finished %d "
      "steps in one incarnation" % (len({f["target"] for f in faults[:3]}), switches, steps))
PY
cat "$TMP/check.log"
assert_dump_matches_reference "$OUT"
say "bit-identical to the fault-free reference after $ROUNDS rounds, 3 failovers and a partitioned master"
