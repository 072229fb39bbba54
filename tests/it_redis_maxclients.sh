#!/bin/sh
# it_redis_maxclients.sh: a Redis at its maxclients refuses every new connection ("ERR max number of clients
# reached", the answer to our first command). A one-shot command (coordinator status) and a worker that waits for
# Redis at start (--connect-timeout 2) each say that maxclients is reached and what to do, and neither blames the
# login nor asks whether redis-server runs. Once maxclients is raised, the worker's next try connects. Before,
# every connect failure of this kind said "PING (the server wants a login in the URL: redis://USER:PASSWORD@...)
# failed: ERR max number of clients reached" and "(is redis-server running, and is the URL right?)".
# test: light
. "$(dirname "$0")/lib.sh"
start_redis
RUN=mc
init_run $RUN --trainer quadratic --numel 2000 --shards 2 --workers 1
# One connection holds the only slot (maxclients 1) until $TMP/release appears, then raises maxclients again.
python3 tests/tools/maxclients_holder.py "$PORT" "$TMP" > "$TMP/holder.log" 2>&1 &
PIDS="$PIDS $!"
wait_until 10 "[ -e $TMP/held ]" "the holder to set maxclients 1"
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status.txt" 2>&1 && fail "status connected past maxclients"
grep -q "maxclients is reached; raise it" "$TMP/status.txt" || fail "status did not say maxclients is reached: $(cat "$TMP/status.txt")"
grep -q "wants a login\|is redis-server running" "$TMP/status.txt" && fail "status blamed the login or the URL: $(cat "$TMP/status.txt")"
start_worker w1 --sync-every 5 --steps 10 --connect-timeout 30
wait_until 20 "grep -q 'maxclients is reached' $TMP/worker-w1.log" "the worker to say maxclients is reached"
grep 'maxclients is reached' "$TMP/worker-w1.log" | grep -q "wants a login\|is redis-server running" &&
  fail "the worker blamed the login or the URL: $(grep maxclients "$TMP/worker-w1.log" | head -n 1)"
touch "$TMP/release"
wait_until 30 "grep -q 'registered as w1' $TMP/worker-w1.log" "the worker to connect once maxclients is raised"
say "OK: maxclients named, with what to do; the worker connected once it was raised"
