#!/bin/sh
# it_http_dashboard_long.sh: a dashboard left open through a run of weeks goes on drawing (headless Debian
# chromium driven by playwright-core: tests/browser/dashboard_long.mjs, which says what it checks and what
# went wrong before). A live run (redis-server, a shard-server, a quadratic worker, `coordinator serve --http`);
# the page's memory of an hour of churn is seeded in the browser.
# Skips (exit 77) when node, /usr/bin/chromium or playwright-core is missing and cannot be installed.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
need_browser
RUN=dashlong
start_redis
init_run $RUN --trainer quadratic --numel 2000 --shards 2 --workers 1
start_server s1
start_worker w1 --steps 0 --sync-every 20 --heartbeat-interval 0.5 --step-delay-ms 5
HP=$(free_port)
bin/coordinator serve --redis "$URL" --run $RUN --http "127.0.0.1:$HP" --print-every 0 > "$TMP/coord.log" 2>&1 &
PIDS="$PIDS $!"
wait_until 20 "curl -s http://127.0.0.1:$HP/status | grep -q '\"loss\": *[0-9]'" "the worker's loss in /status"
DASH_URL="http://127.0.0.1:$HP/dashboard" CHROMIUM=$CHROMIUM timeout 90 node tests/browser/dashboard_long.mjs \
  > "$TMP/browser.log" 2>&1
rc=$?
cat "$TMP/browser.log"
[ $rc -eq 0 ] || fail "browser test (exit $rc)"
