#!/bin/sh
# it_sync_liveness.sh: kill -9 one of three workers mid-round. The two others must be released from
# the barrier within heartbeat timeout + 1 s and keep training; the dead worker is evicted, and no
# round after its eviction counts it (its pending pseudo-gradient is dropped, never applied).
. "$(dirname "$0")/lib.sh"
RUN=live; TIMEOUT=3
start_redis
init_run $RUN --trainer quadratic --numel 50000 --shards 4 --workers 3 --heartbeat-timeout $TIMEOUT
start_server s1 --lease-ttl-ms 2000
start_server s2 --lease-ttl-ms 2000
for w in w1 w2 w3; do start_worker $w --sync-every 20 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 10; done
wait_until 30 '[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -ge 3 ]' "three rounds"
sleep 0.1   # somewhere inside round 3's training
kill -9 "$WRK_w3"
T=$(date +%s.%N)
say "killed w3"
last_sync() { grep '"event":"sync"' "$TMP/$1.jsonl" | tail -n 1 | sed 's/.*"t":\([0-9.]*\).*/\1/'; }
after() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }
wait_until 15 'after "$(last_sync w1)" $T && after "$(last_sync w2)" $T' "both survivors to sync again"
for w in w1 w2; do
  dt=$(awk -v a="$(last_sync $w)" -v b="$T" 'BEGIN { printf "%.2f", a - b }')
  say "$w released and synced $dt s after the kill"
  awk -v d="$dt" -v lim="$TIMEOUT" 'BEGIN { exit !(d <= lim + 1 + 0.5) }' || \
    fail "$w synced $dt s after the kill: more than heartbeat timeout $TIMEOUT s + 1 s (+0.5 s of training)"
done
v=$($RCLI HGET "dl:{$RUN}:state" round:0)
wait_until 20 '[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -ge $((v + 3)) ]' "three more rounds with two workers"
$RCLI HEXISTS "dl:{$RUN}:workers" w3 | grep -q 0 || fail "w3 is still a member"
# every barrier closed after the eviction has exactly the two survivors
$RCLI XRANGE "dl:{$RUN}:events" - + > "$TMP/events.txt"
awk '/^evicted$/ {getline; getline; if ($0 == "w3") ev = 1} ev && /^close$/ {getline; getline; getline; getline; getline; getline; print}' \
  "$TMP/events.txt" > "$TMP/after.txt"
[ -s "$TMP/after.txt" ] || fail "no evicted event for w3 followed by closed rounds"
if grep -v '^2$' "$TMP/after.txt" >/dev/null; then fail "a round closed after w3's eviction with participants: $(sort -u "$TMP/after.txt" | tr '\n' ' ')"; fi
for r in $(seq "$v" $((v + 2))); do
  $RCLI HGET "dl:{$RUN}:f0:r$r" participants | grep -q w3 && fail "round $r counted w3 after its death"
done
say "survivors released within the timeout, $(wc -l < "$TMP/after.txt") rounds closed without w3"
