#!/bin/sh
# it_status_no_report.sh: a worker's speed and loss before it reported any. w1 beats every 120 s, so its
# only beat so far is the one it sends at start, before its first step; w2 beats every 0.5 s. While both
# train: `coordinator status` prints `-` for w1's steps/s and loss (it printed 0.00 and 0.0000, the
# placeholders of that first beat), GET /status gives null for its `steps_per_second` and `loss`
# (docs/http.md; it gave 0.0) and /metrics has no speed or loss sample for it, while w2's are numbers.
# After w1 is kicked and registers again (dl_register starts a record over), the same: `-`, not -1.0000.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl is not installed"; exit 77; }
RUN=noreport
start_redis
init_run $RUN --trainer quadratic --numel 1000 --shards 1 --workers 1 --heartbeat-timeout 600
start_server s1
start_worker w1 --steps 0 --sync-every 5 --step-delay-ms 10 --heartbeat-interval 120
start_worker w2 --steps 0 --sync-every 5 --step-delay-ms 10 --heartbeat-interval 0.5
HP=$(free_port)
bin/coordinator serve --redis "$URL" --run $RUN --http "127.0.0.1:$HP" --print-every 0 > "$TMP/serve.log" 2>&1 &
PIDS="$PIDS $!"
wait_until 10 "curl -s -o /dev/null http://127.0.0.1:$HP/status" "coordinator serve listening"

# row WORKER: its steps/s and loss in the status table
row() { bin/coordinator status --redis "$URL" --run $RUN | awk -v w="$1" '$1 == w {print $5, $6}'; }
syncs() { grep -c '"event":"sync"' "$TMP/$1.jsonl" 2>/dev/null || echo 0; }
inc_of() { $RCLI FCALL dl_member 1 "dl:{$RUN}:config" "$1" 2>/dev/null; }
check_w1() { # WHEN: w1 shows no speed and no loss anywhere, w2 shows both
  wait_until 20 '[ "$(syncs w1)" -ge 2 ] && [ "$(syncs w2)" -ge 2 ]' "both workers to sync ($1)"
  wait_until 10 'case "$(row w2)" in "- "*|*" -"|"") false;; esac' "w2's speed and loss in the status table ($1)"
  [ "$(row w1)" = "- -" ] || fail "$1: status shows w1's steps/s and loss as '$(row w1)', want '- -'"
  curl -s "http://127.0.0.1:$HP/status" > "$TMP/status.json"
  python3 - "$TMP/status.json" <<'EOF' || fail "$1: /status: $(head -c 1500 "$TMP/status.json")"
import json, sys
ws = {w["worker_id"]: w for w in json.load(open(sys.argv[1]))["workers"]}
assert ws["w1"]["loss"] is None and ws["w1"]["steps_per_second"] is None and ws["w1"]["speed"] is None, ws["w1"]
assert ws["w2"]["loss"] is not None and ws["w2"]["steps_per_second"] > 0, ws["w2"]
EOF
  curl -s "http://127.0.0.1:$HP/metrics" > "$TMP/metrics.txt"
  grep -E '^diloco_worker_(loss|steps_per_second)\{.*worker="w1"' "$TMP/metrics.txt" &&
    fail "$1: /metrics has a speed or loss sample for w1"
  [ "$(grep -cE '^diloco_worker_(loss|steps_per_second)\{.*worker="w2"' "$TMP/metrics.txt")" = 2 ] ||
    fail "$1: /metrics lacks w2's speed or loss: $(grep diloco_worker_ "$TMP/metrics.txt")"
  say "$1: w1 (no report yet) '$(row w1)', w2 '$(row w2)'"
}
check_w1 "after the first beat"

inc=$(inc_of w1)
bin/coordinator control --redis "$URL" --run $RUN kick w1 > "$TMP/kick.log" 2>&1 || fail "kick w1: $(cat "$TMP/kick.log")"
wait_until 20 '[ -n "$(inc_of w1)" ] && [ "$(inc_of w1)" != "$inc" ]' "w1 to register again"
n=$(syncs w1)
wait_until 20 '[ "$(syncs w1)" -ge $((n + 1)) ]' "w1 to sync again"
check_w1 "registered again"
