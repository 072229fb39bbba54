#!/bin/sh
# it_http_events_routine.sh: GET /status's `events` (the dashboard's list) are the run's last non-routine events
# in an async run too. Routine were commits and closes only: an async run's submissions (one `submit` event per
# shard per submission) filled all 30 places within a second, and the joins, leaves, evictions and settings
# an operator looks there for never showed. Now `submit` is routine too (submissions_applied counts them).
. "$(dirname "$0")/lib.sh"
RUN=evr
start_redis
init_run $RUN --async --trainer quadratic --numel 1000 --shards 4 --workers 2
start_server s1
HP=$(free_port)
bin/coordinator serve --redis "$URL" --run $RUN --http "127.0.0.1:$HP" --print-every 0 > "$TMP/serve.log" 2>&1 &
PIDS="$PIDS $!"
for w in w1 w2; do start_worker $w --sync-every 4 --steps 0 --step-delay-ms 50 --heartbeat-interval 0.5; done
subs() { $RCLI XLEN "dl:{$RUN}:events"; }
wait_until 30 '[ "$(subs)" -ge 100 ] 2>/dev/null' "100 events (the workers' submissions)"
# the list: no routine event, and both joins (made before the submissions, within /status's newest 500)
listed() {
  curl -s "http://127.0.0.1:$HP/status" > "$TMP/status.json" && python3 - "$TMP/status.json" <<'PY'
import collections, json, sys
d = json.load(open(sys.argv[1]))
kinds = collections.Counter(e["type"] for e in d["events"])
print(dict(kinds))
sys.exit(0 if not kinds["submit"] and not kinds["commit"] and kinds["join"] == 2 else 1)
PY
}
wait_until 20 'listed > "$TMP/kinds.txt"' "GET /status to list the joins and no submission: $(cat "$TMP/kinds.txt" 2>/dev/null)"
say "events listed: $(cat "$TMP/kinds.txt")"
