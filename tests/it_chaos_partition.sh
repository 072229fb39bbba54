#!/bin/sh
# it_chaos_partition.sh: a network partition. Worker w1 runs in its own network namespace, joined to
# the host by a veth pair the harness creates (10.213.1.0/30; Redis and the shard-servers listen on
# 127.0.0.1 and on the host end 10.213.1.1); w2..w4 run on the host. Mid-run the link is cut both ways
# (tc pfifo limit 0 on both ends: every packet dropped, links stay up) for 7 s, longer than the 3 s
# heartbeat timeout, then healed. Checks: w1 is evicted while cut off; the three others keep closing
# rounds without it; after the heal w1 registers again (new incarnation), gets the current parameters
# (its first sync begun after the cut and ended after the heal is at the current version, same digest as
# everyone) and is a participant again; no closed round ever counts the incarnation that was cut off after
# its eviction (its stale pseudo-gradient is never applied; the servers reject its late pushes). It guards against
# bug 1 of docs/chaos.md (the evicted worker never registering again). Skips (77) where network
# namespaces or tc are not available (needs root). "After the heal" means after the heal began (the heal
# event's `begun`, before its tc commands): w1 can register again before the harness has logged the heal,
# and on a busy machine it did (the clean-clone run of 43fc4b5: joined at +7.04 s, heal logged later).
# test: light (it waits more than it computes: 5 s of CPU in 31 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
if ! { ip netns add "dlprobe$$" 2>/dev/null && ip netns del "dlprobe$$"; }; then
  echo "SKIP: network namespaces not available here (ip netns add failed; needs root)"; exit 77
fi
command -v tc >/dev/null || { echo "SKIP: tc not found (apt-get install iproute2)"; exit 77; }
OUT="$TMP/part"
python3 tests/chaos/chaos.py --out "$OUT" --run part --workers 4 --servers 2 --shards 4 --numel 20000 \
  --netns-workers 1 --faults cut:worker=1 --cut-method pfifo --fault-every 8 --max-faults 1 --duration 24 \
  --cut-min 7 --cut-max 7 --heartbeat-timeout 3 --sync-every 20 --step-delay-ms 25 > "$TMP/chaos.log" 2>&1
rc=$?
tail -n 1 "$TMP/chaos.log"
ip netns list 2>/dev/null | grep -q "^dc" && fail "a namespace was left behind: $(ip netns list)"
[ $rc -eq 3 ] && fail "the run did not make progress after the partition healed (a hang)"
[ $rc -eq 0 ] || fail "chaos harness exited with $rc: $(tail -n 5 "$TMP/chaos.log")"
python3 tests/chaos/audit.py "$OUT" --min-faults 1 --skip participate > "$TMP/audit.log" 2>&1 || { cat "$TMP/audit.log"; fail "audit failed"; }
cat "$TMP/audit.log"
python3 - "$OUT" <<'PY' > "$TMP/check.log" 2>&1
import json, sys
out = sys.argv[1]
ch = [json.loads(l) for l in open(out + "/chaos.jsonl")]
d = json.load(open(out + "/redis_dump.json"))
ev = d["events"]
cut = next(e for e in ch if e["event"] == "fault" and e["kind"] == "cut")
heal = next(e for e in ch if e["event"] == "heal")
tc, th = cut["t"], heal.get("begun", heal["t"])  # packets may flow from `begun` on
joins = [e for e in ev if e["type"] == "join" and e["worker"] == "w1"]
old = [e for e in joins if e["t"] < tc][-1]["inc"]
evs = [e for e in ev if e["type"] == "evicted" and e["worker"] == "w1" and tc < e["t"] < th]
assert evs and evs[0]["inc"] == old, "w1 (incarnation %s) was not evicted during the cut: %s" % (old, evs)
tev = evs[0]["t"]
assert tev - tc >= 2.0, "evicted %.2f s after the cut: sooner than the heartbeat timeout" % (tev - tc)
def parts(e):
    return [p for p in d["barriers"]["%s:%s" % (e["frag"], e["round"])].get("participants", "").split(",") if p]
closes = [e for e in ev if e["type"] == "close"]
before = [e for e in closes if e["t"] < tc and "w1:%s" % old in parts(e)]
assert before, "w1 never participated before the cut"
during = [e for e in closes if tev < e["t"] < th]
assert len(during) >= 3, "only %d rounds closed while w1 was cut off" % len(during)
assert all(not any(p.startswith("w1:") for p in parts(e)) for e in during), "a round closed during the cut counted w1"
stale = [e["round"] for e in closes if e["t"] > tev and "w1:%s" % old in parts(e)]
assert not stale, "rounds %s counted the evicted incarnation w1:%s" % (stale, old)
w1 = [json.loads(l) for l in open(out + "/w1.jsonl")]
# (a sync begun before the cut and ended after the heal is the old incarnation's round, closed with it before
# its eviction: a full suite showed one, round 18 begun 0.06 s before the cut, its version 19 got at +7.41 s)
s = next(e for e in w1 if e["event"] == "sync" and e["t"] > th and e["t"] - e["seconds"] > tc)
rnd = max(int(e["round"]) for e in closes if e["t"] <= s["t"])
assert s["version"] >= rnd, "w1's first sync after the heal is at version %d, the run was at %d" % (s["version"], rnd + 1)
others = set()
for w in ("w2", "w3", "w4"):
    for e in (json.loads(l) for l in open("%s/%s.jsonl" % (out, w))):
        if e["event"] == "sync" and e["version"] == s["version"]:
            others.add(e["digest"])
assert others <= {s["digest"]}, "w1's parameters after the heal differ: %s vs %s" % (s["digest"], others)
new = [e for e in joins if e["t"] > th]
if not new:
    after_heal = [e for e in w1 if e["event"] == "sync" and e["t"] > th]
    lost = sum(1 for e in after_heal if e.get("stale"))
    print("BUG (worker): after the heal (begun at +%.2f s, logged at +%.2f s) w1 never registered again: its joins "
          "at %s (s after the cut), %d syncs after the heal, %d of them lost as STALE; it kept training as evicted "
          "incarnation %s (bug 1 of docs/chaos.md: an evicted worker must register again). Everything else held "
          "(eviction, %d rounds closed without it, no stale pseudo-gradient applied, current parameters fetched)." % (
          th - tc, heal["t"] - tc, ", ".join("%+.2f" % (e["t"] - tc) for e in joins), len(after_heal), lost, old,
          len(during)))
    sys.exit(77)
inc = new[0]["inc"]
assert int(inc) > int(old), "w1 registered again with incarnation %s <= %s" % (inc, old)
after = [e for e in closes if e["t"] > th and "w1:%s" % inc in parts(e)]
assert after, "w1 (incarnation %s) never participated after the heal" % inc
rej = [e for e in ev if e["type"] == "reject" and e["worker"] == "w1" and e["t"] > tc]
print("cut at +0, w1:%s evicted at +%.1f s; %d rounds closed without it; healed at +%.1f s; w1 back as "
      "incarnation %s, synced at +%.1f s (version %d, digest %s), participant of %d rounds since; "
      "%d late pushes/arrivals of w1 rejected (%s); no round ever applied w1:%s after its eviction" % (
      old, tev - tc, len(during), th - tc, inc, s["t"] - tc, s["version"], s["digest"], len(after), len(rej),
      ",".join(sorted(set(e["code"] for e in rej))) or "-", old))
PY
crc=$?
[ $crc -eq 77 ] && { cat "$TMP/check.log"; fail "bug 1 of docs/chaos.md is back: an evicted worker never registered again after the heal"; }
[ $crc -eq 0 ] || { cat "$TMP/check.log"; fail "partition checks"; }
cat "$TMP/check.log"
