#!/bin/sh
# it_http_dashboard.sh: the dashboard in a real browser. Headless Debian chromium, driven by
# playwright-core (tests/browser/dashboard.mjs), loads the dashboard of a live run (redis-server,
# 2 shard-servers, 2 quadratic workers, `coordinator serve --http --token-file`), sees the workers, is
# refused a change until the token is entered, changes the outer lr, kicks a worker and saves a
# checkpoint through the page, and the changes are checked in Redis (and on disk); an evaluator
# (bin/worker --evaluate-every 1) runs too and the validation-loss chart has points. Saves a
# screenshot to build/dashboard.png (or $SCREENSHOT; SCREENSHOT=docs/dashboard.png refreshes the docs).
# Then an async run (2 fragments, Delayed Nesterov 3, DyLU): /status has dn_buffer_size 3 and dn_buffered
# per fragment, fragment_versions and submissions_applied (their sum); the page (tests/browser/
# dashboard_async.mjs) shows the DN buffer tile, submissions applied (not pending submissions) and each
# worker's staleness; `coordinator status` and `serve --print-every` say submissions applied, not rounds
# (and the status text: DyLU, "max staleness no limit", shard commits).
#
# Skips (exit 77) when node, /usr/bin/chromium or playwright-core is missing and cannot be installed
# (`npm ci` in tests/browser, from its package-lock.json).
. "$(dirname "$0")/lib.sh"
need_browser
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl is not installed"; exit 77; }
COORD_BIN=${COORD_BIN:-bin/coordinator}
RUN=httpdash
start_redis
init_run $RUN --trainer quadratic --numel 10000 --shards 2 --workers 2
start_server A
start_server B
for w in w1 w2; do start_worker $w --steps 0 --sync-every 20 --heartbeat-interval 0.5 --step-delay-ms 5; done
bin/worker --redis "$URL" --run $RUN --evaluate-every 1 > "$TMP/evaluator.log" 2>&1 &
PIDS="$PIDS $!"
HP=$(free_port)
printf 'dash-token-%s\n' "$$" > "$TMP/token"
$COORD_BIN serve --redis "$URL" --run "$RUN" --http "127.0.0.1:$HP" --print-every 0 \
  --save-dir "$TMP/ckpt" --keep 2 --token-file "$TMP/token" > "$TMP/coord.log" 2>&1 &
COORD=$!; PIDS="$PIDS $COORD"
wait_until 20 "[ \"\$(curl -s http://127.0.0.1:$HP/status | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(1 for w in d[\"workers\"] if w[\"loss\"] is not None), d[\"rounds_closed\"]>=2)' 2>/dev/null)\" = '2 True' ]" \
  "2 workers reporting and 2 rounds closed"

say "headless chromium on http://127.0.0.1:$HP/dashboard"
DASH_URL="http://127.0.0.1:$HP/dashboard" REDIS_PORT=$PORT RUN=$RUN CHROMIUM=$CHROMIUM TOKEN=$(cat "$TMP/token") \
  SCREENSHOT=${SCREENSHOT:-$ROOT/build/dashboard.png} SETTLE_MS=${SETTLE_MS:-5000} \
  timeout 90 node tests/browser/dashboard.mjs > "$TMP/browser.log" 2>&1
rc=$?
cat "$TMP/browser.log"
[ $rc -eq 0 ] || fail "browser test (exit $rc)"
[ "$($RCLI HGET "dl:{$RUN}:tunables" outer_lr)" = 0.45 ] || fail "outer_lr in Redis after the page changed it"
ls "$TMP"/ckpt/checkpoint-*.safetensors >/dev/null 2>&1 || fail "the page's Save state wrote no checkpoint"
alive "$COORD" || fail "coordinator died"
kill -TERM "$COORD"
wait "$COORD" || fail "coordinator did not exit cleanly on SIGTERM"

say "async run: 2 fragments, Delayed Nesterov 3"
ARUN=httpdash-async
init_run $ARUN --async --fragments 2 --dn-buffer-size 3 --dylu --trainer quadratic --numel 10000 --shards 2 --workers 2
RUN=$ARUN; start_server C
for w in a1 a2; do start_worker $w --steps 0 --sync-every 10 --heartbeat-interval 0.5 --step-delay-ms 5; done
AP=$(free_port)
$COORD_BIN serve --redis "$URL" --run "$ARUN" --http "127.0.0.1:$AP" --print-every 1 > "$TMP/coord-async.log" 2>&1 &
ACOORD=$!; PIDS="$PIDS $ACOORD"
wait_until 20 "[ \"\$(curl -s http://127.0.0.1:$AP/status | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(1 for w in d[\"workers\"] if w.get(\"stale_n\")), min(d[\"fragment_versions\"])>=3)' 2>/dev/null)\" = '2 True' ]" \
  "2 async workers submitting to both fragments"
curl -s "http://127.0.0.1:$AP/status" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["dn_buffer_size"] == 3, d.get("dn_buffer_size")
b, v = d["dn_buffered"], d["fragment_versions"]
assert len(b) == 2 and all(0 <= x < 3 for x in b) and b == [x % 3 for x in v], (b, v)
assert d["submissions_applied"] == sum(v), (d["submissions_applied"], v)
assert d["dylu_enabled"] and d["dylu_base_sync_every"] == 500, (d["dylu_enabled"], d.get("dylu_base_sync_every"))
print("async /status: dn_buffered", b, "of", d["dn_buffer_size"], "fragment versions", v)
' || fail "async /status: DN buffer and submissions applied"
DASH_URL="http://127.0.0.1:$AP/dashboard" DN=3 CHROMIUM=$CHROMIUM timeout 60 node tests/browser/dashboard_async.mjs \
  > "$TMP/browser-async.log" 2>&1
rc=$?
cat "$TMP/browser-async.log"
[ $rc -eq 0 ] || fail "async dashboard (exit $rc)"
$COORD_BIN status --redis "$URL" --run $ARUN > "$TMP/astatus.txt" 2>&1 || fail "status: $(cat "$TMP/astatus.txt")"
head -5 "$TMP/astatus.txt"
grep -q "^run $ARUN .* DyLU (base H [0-9]*)$" "$TMP/astatus.txt" || fail "the status run line does not say DyLU"
grep -Eq '^submissions applied [0-9]+ \(fragment versions [0-9]+/[0-9]+\)  shard commits [0-9]+ ' "$TMP/astatus.txt" ||
  fail "async status: submissions applied and each fragment's version"
! grep -q "workers needed\|open round" "$TMP/astatus.txt" || fail "async status shows the sync barrier"
grep -q "max staleness no limit$" "$TMP/astatus.txt" || fail "async status: max staleness 0 is no limit"
grep -q "run $ARUN: status running, submissions applied [0-9]* (fragment versions" "$TMP/coord-async.log" ||
  fail "serve --print-every of an async run: $(grep 'status running' "$TMP/coord-async.log" | tail -1)"
! grep -q "status running, round" "$TMP/coord-async.log" || fail "serve --print-every prints a round for an async run"
kill -TERM "$ACOORD"; wait "$ACOORD" || fail "async coordinator exit"
say "PASS"
