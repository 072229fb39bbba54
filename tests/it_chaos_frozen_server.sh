#!/bin/sh
# it_chaos_frozen_server.sh: liveness when a shard-server freezes (SIGSTOP: a VM stall, a long pause, a
# server cut off without RST). 3 workers, 3 shard-servers (lease ttl 1.5 s); one server is frozen for
# 12 s. Its leases expire and move after ~1.5 s; the run must go on within a few seconds of that
# (the next round must close less than 5 s after the freeze), and everything must still be exact
# (the audit: commits once each, identical digests). It guards against bug 2 of docs/chaos.md: workers
# blocked on their open connection to the frozen server (per-request timeout 60 s, no reaction to the
# lease change), which stalls the whole run for the length of the freeze.
# test: light (it waits more than it computes: 4 s of CPU in 27 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
OUT="$TMP/frozen"; FREEZE=12
python3 tests/chaos/chaos.py --out "$OUT" --run frozen --workers 3 --servers 3 --shards 6 --numel 20000 \
  --faults stop:server=1 --stop-min $FREEZE --stop-max $FREEZE --fault-every 5 --max-faults 1 --duration 20 \
  --lease-ttl-ms 1500 --heartbeat-timeout 20 > "$TMP/chaos.log" 2>&1
rc=$?
tail -n 1 "$TMP/chaos.log"
[ $rc -eq 3 ] && fail "the run did not make progress after the server woke up (a hang)"
[ $rc -eq 0 ] || fail "chaos harness exited with $rc: $(tail -n 5 "$TMP/chaos.log")"
python3 tests/chaos/audit.py "$OUT" --min-faults 1 > "$TMP/audit.log" 2>&1 || { cat "$TMP/audit.log"; fail "audit failed"; }
cat "$TMP/audit.log"
stall=$(python3 - "$OUT" <<'PY'
import json, sys
ch = [json.loads(l) for l in open(sys.argv[1] + "/chaos.jsonl")]
d = json.load(open(sys.argv[1] + "/redis_dump.json"))
f = next(e for e in ch if e["event"] == "fault")
moved = [e["t"] - f["t"] for e in d["events"] if e["type"] == "lease" and e["t"] > f["t"] and e["server"] != f["target"]]
nxt = min(e["t"] for e in d["events"] if e["type"] == "close" and e["t"] > f["t"]) - f["t"]
print("%.2f %.2f" % (nxt, min(moved) if moved else -1))
PY
)
set -- $stall
say "froze a shard-server for $FREEZE s: its leases moved after $2 s, the next round closed after $1 s"
awk -v s="$1" 'BEGIN { exit !(s >= 5) }' && \
  fail "a frozen shard-server stalled the run $1 s of a $FREEZE s freeze although its leases moved after $2 s (bug 2 of docs/chaos.md is back: workers wait on the dead connection instead of following the lease)"
say "the run went on $1 s after the freeze"
