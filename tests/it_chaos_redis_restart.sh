#!/bin/sh
# it_chaos_redis_restart.sh: Redis with AOF (appendonly yes, appendfsync always) is kill -9'd every
# 6 s while 3 workers train 1200 steps (60 rounds) and 2 shard-servers commit; each time it comes back
# on the same port with the same directory 1 s later (worker w1 is a process group of 2 ranks: chaos.py
# --group-ranks). Nothing else is touched: no worker or server is restarted by anyone. The run must continue from exactly where it was: the open round never goes
# back, every worker finishes its 1200 steps (exit 0), every round is committed once per shard, all
# 60 rounds counted all 3 workers, and the final parameters are bit-identical to the fault-free
# reference (tests/tools/ref_quadratic): nothing was lost, nothing applied twice. Each server's metrics
# count the reconnects: 3 (control, bulk, bulk-write) per Redis restart.
# test: light (it waits more than it computes: 8 s of CPU in 46 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
OUT="$TMP/redis"; NUMEL=60000; SHARDS=4; SEED=5; H=20; ROUNDS=60
python3 tests/chaos/chaos.py --out "$OUT" --run rr --aof --workers 3 --servers 2 --shards $SHARDS --numel $NUMEL \
  --seed $SEED --sync-every $H --steps $((ROUNDS * H)) --step-delay-ms 25 --heartbeat-timeout 10 --lease-ttl-ms 3000 \
  --duration 120 --fault-every 6 --faults kill:redis=1 --redis-down 1 --settle-timeout 60 --keep-redis-dir \
  --group-ranks 2 > "$TMP/chaos.log" 2>&1
rc=$?
tail -n 1 "$TMP/chaos.log"
[ $rc -eq 3 ] && fail "the run did not finish after the Redis restarts (settle timeout): a hang"
[ $rc -eq 0 ] || fail "chaos harness exited with $rc: $(tail -n 5 "$TMP/chaos.log")"
python3 tests/chaos/audit.py "$OUT" --min-faults 3 > "$TMP/audit.log" 2>&1 || { cat "$TMP/audit.log"; fail "audit failed"; }
cat "$TMP/audit.log"
python3 - "$OUT" $ROUNDS $((ROUNDS * H)) <<'PY' > "$TMP/check.log" 2>&1 || { cat "$TMP/check.log"; fail "Redis restart check"; }
import json, sys
out, rounds, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ch = [json.loads(l) for l in open(out + "/chaos.jsonl")]
bad = [e for e in ch if e["event"] in ("restart", "exit") and e["role"] != "redis"]
assert not bad, "a worker or server died or was restarted: %s" % bad
done = sorted(e["target"] for e in ch if e["event"] == "done")
assert done == ["w1", "w2", "w3"], "workers that finished: %s" % done
sys.path.insert(0, "tests/chaos")
import group_log
group_log.check(out, steps)  # w1, the group: one registration, its ranks at the same steps, none stale
for w in ("w2", "w3"):
    es = [json.loads(l) for l in open("%s/%s.jsonl" % (out, w))]
    joins = [e for e in es if e["event"] == "join"]
    last = [e for e in es if e["event"] == "step"][-1]["step"]
    syncs = [e for e in es if e["event"] == "sync"]
    assert len(joins) == 1, "%s joined %d times" % (w, len(joins))
    assert last == steps, "%s stopped at step %d" % (w, last)
    lost = [e["round"] for e in syncs if e.get("stale")]
    assert not lost, "%s lost rounds %s" % (w, lost)
d = json.load(open(out + "/redis_dump.json"))
parts = [len(b.get("participants", "").split(",")) for k, b in d["barriers"].items() if b.get("state") == "closed"]
assert len(parts) == rounds and set(parts) == {3}, "closed rounds %d, participants %s" % (len(parts), sorted(set(parts)))
kills = [e["t"] for e in ch if e["event"] == "fault"]
# each server logs its counters every 30 s: by then, each kill at least 5.5 s old (Redis is back after
# about 1 s; the links retry with backoff) had its 3 connections (control, bulk, bulk-write) re-established
# once, and no more than the kills so far can have been
import datetime, re
for s in ("s1", "s2"):
    lines = [l for l in open("%s/server-%s.log" % (out, s)) if " INFO metrics: " in l]
    assert lines, "server %s logged no metrics line" % s
    for l in lines:
        t = datetime.datetime.strptime(l.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
        got = int(re.search(r"redis reconnects (\d+)", l).group(1))
        over = sum(1 for k in kills if k + 5.5 < t)
        began = sum(1 for k in kills if k < t)
        assert 3 * over <= got <= 3 * began, "server %s at %.1f: redis reconnects %d, want %d..%d (%d kills over, %d begun)" % (
            s, t, got, 3 * over, 3 * began, over, began)
    print("server %s: redis reconnects %d in its last metrics line" % (s, got))
print("%d Redis kill -9s; every worker (w1 a group of 2) finished %d steps in one incarnation; %d rounds, each with all 3 workers" % (len(kills), steps, rounds))
PY
cat "$TMP/check.log"
# the final state equals the fault-free reference
assert_dump_matches_reference "$OUT"
say "bit-identical to the fault-free reference after $ROUNDS rounds and the Redis restarts"
