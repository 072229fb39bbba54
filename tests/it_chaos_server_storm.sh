#!/bin/sh
# it_chaos_server_storm.sh: the stateless-server promise under a storm of server faults only. 3 workers
# train 25 rounds; 3 shard-servers are kill -9'd (restarted by the supervisor with the same --id) or
# SIGSTOPped for 0.3-1.5 s (longer than their 1 s lease ttl) every 1.5 s, and each also kills itself in
# 10% of its commits between writing the log entry and dl_commit (--fault-crash-before-commit 0.1).
# The final parameters must be bit-identical to the fault-free reference (tests/tools/ref_quadratic),
# every round committed exactly once per shard and counted all 3 workers.
# test: light (it waits more than it computes: 6 s of CPU in 40 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
OUT="$TMP/sstorm"; NUMEL=60000; SHARDS=6; SEED=21; H=20; ROUNDS=25
python3 tests/chaos/chaos.py --out "$OUT" --run sstorm --workers 3 --servers 3 --shards $SHARDS --numel $NUMEL \
  --seed $SEED --sync-every $H --steps $((ROUNDS * H)) --step-delay-ms 50 --heartbeat-timeout 30 --lease-ttl-ms 1000 \
  --faults kill:server=2,stop:server=1 --stop-min 0.3 --stop-max 1.5 --max-down-servers 1 --fault-every 1.5 \
  --duration 150 --settle-timeout 60 --server-arg=--fault-crash-before-commit --server-arg=0.1 > "$TMP/chaos.log" 2>&1
rc=$?
tail -n 1 "$TMP/chaos.log"
[ $rc -eq 3 ] && fail "the run did not finish (settle timeout): a hang"
[ $rc -eq 0 ] || fail "chaos harness exited with $rc: $(tail -n 5 "$TMP/chaos.log")"
python3 tests/chaos/audit.py "$OUT" --min-faults 8 > "$TMP/audit.log" 2>&1 || { cat "$TMP/audit.log"; fail "audit failed"; }
cat "$TMP/audit.log"
python3 - "$OUT" $ROUNDS > "$TMP/check.log" 2>&1 <<'PY' || { cat "$TMP/check.log"; fail "server storm checks"; }
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ch = [json.loads(l) for l in open(out + "/chaos.jsonl")]
assert sorted(e["target"] for e in ch if e["event"] == "done") == ["w1", "w2", "w3"], "not every worker finished"
assert not [e for e in ch if e["event"] == "restart" and e["role"] == "worker"], "a worker was restarted"
d = json.load(open(out + "/redis_dump.json"))
parts = [len(b.get("participants", "").split(",")) for b in d["barriers"].values() if b.get("state") == "closed"]
assert len(parts) == rounds and set(parts) == {3}, "closed rounds %d, participants %s" % (len(parts), sorted(set(parts)))
with open(out + "/got.txt", "w") as f:
    for k in range(int(d["config"]["shards"])):
        f.write("shard %d %s\n" % (k, d["shards"]["%d:digest" % k]))
crashes = 0
import glob
for p in glob.glob(out + "/server-*.log"):
    crashes += open(p).read().count("fault injection: exiting before dl_commit")
k = sum(1 for e in ch if e["event"] == "fault" and e["kind"] == "kill")
s = sum(1 for e in ch if e["event"] == "fault" and e["kind"] == "stop")
print("%d kill -9s, %d SIGSTOPs, %d self-crashes between log write and commit; %d rounds, each with all 3 workers" % (k, s, crashes, rounds))
PY
cat "$TMP/check.log"
BOUNDS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["shard_bounds"])' "$OUT/redis_dump.json")
build/tests/tools/ref_quadratic --numel $NUMEL --shards $SHARDS --seed $SEED --workers w1,w2,w3 --rounds $ROUNDS \
  --sync-every $H --bounds "$BOUNDS" > "$TMP/ref.txt" || fail "reference"
grep '^shard' "$TMP/ref.txt" | diff - "$OUT/got.txt" > "$TMP/diff.txt" || fail "shard digests differ from the fault-free reference: $(cat "$TMP/diff.txt")"
say "bit-identical to the fault-free reference after $ROUNDS rounds under the server storm"
