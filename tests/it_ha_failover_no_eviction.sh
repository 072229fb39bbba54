#!/bin/sh
# it_ha_failover_no_eviction.sh: a failover of Redis evicts nobody, even with a short heartbeat timeout.
# A Streaming run (quadratic, 2 fragments, 3 workers, 2 shard-servers, min_replicas 1) on a Redis master + 2 replicas + 3
# Sentinels (tests/chaos/chaos.py --redis-ha, down-after 2 s as docs/deploy.md recommends), with a
# heartbeat timeout of 1 s and beats every 0.1 s. The master is kill -9'd, then SIGSTOPped past the
# failover: each time nobody can beat for 2.5 to 5 s, 2.5 to 5 timeouts. (0.5 s was too short for a loaded
# machine's start: in a full suite on 2 cores, the three workers' first fetch took 0.58 s and their
# heartbeats, on their own connections through the Sentinels, found them evicted 0.56 s after they
# registered, before the storm began.) The reaper measures silence from the later of the last heartbeat
# and the new master's first reap plus its grace (docs/PROTOCOL.md, "Heartbeats and failovers"), so the
# events stream has a 'failover' per switch and no 'evicted', every worker finishes in one incarnation,
# the chaos audit holds (no commit with a stale participant, every acknowledged commit kept), and the final
# parameters are bit-identical to the fault-free reference of the fragment schedule (it_ha_sentinel_failover
# checks a plain sync run through Sentinel failovers; it_stream_crash Streaming under shard-server kills).
# test: light (it waits more than it computes: 5 s of CPU in 26 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
OUT="$TMP/ha"; H=20; ROUNDS=40; NUMEL=20000; SHARDS=4; SEED=7
python3 tests/chaos/chaos.py --out "$OUT" --run hf --redis-ha --workers 3 --servers 2 --shards $SHARDS --numel $NUMEL \
  --seed $SEED --sync-every $H --steps $((ROUNDS * H)) --step-delay-ms 15 --heartbeat-interval 0.1 \
  --heartbeat-timeout 1 --sentinel-down-after-ms 2000 --lease-ttl-ms 3000 --duration 40 --fault-every 4 \
  --redis-down 2 --stop-min 3 --stop-max 3 --settle-timeout 60 --fault-plan kill:redis-master,stop:redis-master \
  --init-arg=--min-replicas --init-arg=1 --init-arg=--fragments --init-arg=2 > "$TMP/chaos.log" 2>&1
rc=$?
tail -n 1 "$TMP/chaos.log"
[ $rc -eq 3 ] && fail "the run did not finish after the failovers (settle timeout): a hang"
[ $rc -eq 0 ] || fail "chaos harness exited with $rc: $(tail -n 5 "$TMP/chaos.log")"
python3 tests/chaos/audit.py "$OUT" --min-faults 2 > "$TMP/audit.log" 2>&1 || { cat "$TMP/audit.log"; fail "audit failed"; }
grep -v '^figures' "$TMP/audit.log"
python3 - "$OUT" $((ROUNDS * H)) <<'PY' > "$TMP/check.log" 2>&1 || { cat "$TMP/check.log"; fail "failover check"; }
import glob, json, sys
out, steps = sys.argv[1], int(sys.argv[2])
ch = [json.loads(l) for l in open(out + "/chaos.jsonl")]
faults = [f["kind"] + ":" + f["role"] for f in ch if f["event"] == "fault"]
assert faults == ["kill:redis-master", "stop:redis-master"], faults
switches = max(open(f, errors="replace").read().count("+switch-master") for f in glob.glob(out + "/sentinel-*.log"))
assert switches >= 2, "%d failovers for a kill and a stop" % switches
for w in ("w1", "w2", "w3"):
    es = [json.loads(l) for l in open("%s/%s.jsonl" % (out, w))]
    joins = len([e for e in es if e["event"] == "join"])
    assert joins == 1, "%s joined %d times: it was evicted during a failover" % (w, joins)
    assert [e for e in es if e["event"] == "step"][-1]["step"] == steps
kinds = {}
for e in json.load(open(out + "/redis_dump.json"))["events"]:
    kinds[e.get("type")] = kinds.get(e.get("type"), 0) + 1
assert kinds.get("evicted", 0) == 0, "%d evictions during failovers" % kinds["evicted"]
assert kinds.get("failover", 0) >= 2, "the reaper saw %d failovers for %d switches" % (kinds.get("failover", 0), switches)
print("%d failovers (%d seen by the reaper) with a 1 s heartbeat timeout: no eviction; every worker "
      "finished %d steps in one incarnation" % (switches, kinds["failover"], steps))
PY
cat "$TMP/check.log"
assert_dump_matches_reference "$OUT"
say "bit-identical to the fault-free reference of the fragment schedule ($ROUNDS rounds of each of 2 fragments)"
