#!/bin/sh
# it_ha_heartbeat_follows.sh: after a Redis master kill, every worker's heartbeat reaches the new master
# as soon as its commands do, even with a long heartbeat interval. A sync run (quadratic, 4 workers,
# 1 shard-server, min_replicas 1) on a master + 2 replicas + 3 Sentinels (down-after 2 s), beats every
# 6 s (timeout 30 s: nobody is evicted, the point is when the beats come), 10 s inner phases (so the
# training thread, whose submissions count as beats too, is silent while Redis fails over). The master
# is kill -9'd 1 s into the second round; the harness reads dl:{R}:heartbeats every 0.1 s
# (--sample-beats). Each worker's first beat after the kill (necessarily on the new master) must come
# within 1 s of the Sentinels' announcement of the new master (+promoted-slave, in the leader's log).
# The heartbeat thread reconnects at once when a beat fails and, while Redis is away, watches the
# Sentinels' announcements (worker/diloco/heartbeat.c); before, it tried again one interval later, so
# its first beat on the new master came 0 to 6 s after the switch.
# test: light (it waits more than it computes: 3 s of CPU in 22 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
OUT="$TMP/ha"; H=100; ROUNDS=3
python3 tests/chaos/chaos.py --out "$OUT" --run hb --redis-ha --workers 4 --servers 1 --shards 2 --numel 2000 \
  --seed 5 --sync-every $H --steps $((ROUNDS * H)) --step-delay-ms 100 --heartbeat-interval 6 \
  --heartbeat-timeout 30 --sentinel-down-after-ms 2000 --lease-ttl-ms 3000 --duration 8 --fault-every 1 \
  --schedule fixed --redis-down 2 --settle-timeout 40 --settle-rounds 1 --fault-plan kill:redis-master \
  --sample-beats 0.1 --init-arg=--min-replicas --init-arg=1 > "$TMP/chaos.log" 2>&1
rc=$?
tail -n 1 "$TMP/chaos.log"
[ $rc -eq 0 ] || fail "chaos harness exited with $rc: $(tail -n 5 "$TMP/chaos.log")"
python3 - "$OUT" <<'PY' > "$TMP/check.log" 2>&1 || { cat "$TMP/check.log"; fail "heartbeats late on the new master"; }
import datetime, glob, json, re, sys
out = sys.argv[1]
ch = [json.loads(l) for l in open(out + "/chaos.jsonl")]
kill = [e["t"] for e in ch if e["event"] == "fault"]
assert len(kill) == 1, "%d faults" % len(kill)
kill = kill[0]
def ts(s):  # redis-sentinel's log time (the harness runs it with TZ unset: UTC)
    return datetime.datetime.strptime(s, "%d %b %Y %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()
promo = sorted(t for f in glob.glob(out + "/sentinel-*.log")
               for t in (ts(m.group(1)) for m in re.finditer(r" (\d+ \w+ \d+ [\d:.]+) # \+promoted-slave", open(f).read()))
               if t > kill)
assert promo, "no +promoted-slave in the Sentinels' logs after the kill"
first = {}
for e in ch:
    if e["event"] == "beats":
        for w, ms in e["scores"].items():
            if ms / 1000.0 > kill and w not in first:
                first[w] = ms / 1000.0
assert sorted(first) == ["w1", "w2", "w3", "w4"], "beats after the kill seen from %s only" % sorted(first)
late = {w: round(t - promo[0], 3) for w, t in sorted(first.items())}
print("new master announced %.2f s after the kill; each worker's first beat there, s after that: %s" % (promo[0] - kill, late))
assert max(late.values()) <= 1.0, "a worker's heartbeat reached the new master %.2f s after the switch" % max(late.values())
PY
cat "$TMP/check.log"
