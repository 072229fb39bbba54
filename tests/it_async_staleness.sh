#!/bin/sh
# it_async_staleness.sh: staleness in async mode. A fast worker (1 ms per step) and a slow one (40 ms)
# submit every 10 steps, so the fast one applies several submissions while the slow one trains.
#  - every submission's staleness (version at apply - the version the worker started from) is in
#    dl:{R}:events, equals seq - base, and the per-worker aggregates in status (last, mean, max) match
#    the events;
#  - with --max-staleness 3 the slow worker's too-old submissions are rejected with a clear error,
#    recorded, never applied; it fetches the current parameters and keeps going.
. "$(dirname "$0")/lib.sh"
start_redis
events() { $RCLI XRANGE "dl:{$1}:events" - + > "$TMP/events-$1.txt"; }
# "worker seq base staleness" per submit event (one line per shard)
submits() {
  awk '/^type$/ {getline; t = $0} t == "submit" && /^worker$/ {getline; w = $0}
       t == "submit" && /^seq$/ {getline; s = $0} t == "submit" && /^base$/ {getline; b = $0}
       t == "submit" && /^staleness$/ {getline; print w, s, b, $0; t = ""}' "$TMP/events-$1.txt"
}
status_of() { # RUN WORKER FIELD
  $RCLI FCALL dl_status 1 "dl:{$1}:config" | python3 -c "
import json, sys
d = json.load(sys.stdin)
print([w.get('$3', -1) for w in d['workers'] if w['id'] == '$2'][0])"; }

RUN=stale
init_run $RUN --async --trainer quadratic --numel 20000 --shards 2 --workers 2
start_server a --lease-ttl-ms 2000
start_worker fast --sync-every 10 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 1
start_worker slow --sync-every 10 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 40
wait_until 30 '[ "$(grep -c "\"event\":\"sync\"" "$TMP/slow.jsonl" 2>/dev/null)" -ge 4 ]' "four submissions of the slow worker"
kill -STOP "$WRK_fast" "$WRK_slow"; sleep 0.5   # frozen, still members: status and events agree
events $RUN
submits $RUN > "$TMP/submits.txt"
awk '$4 != $2 - $3 { bad = 1 } END { exit bad }' "$TMP/submits.txt" || fail "a staleness is not seq - base"
max_slow=$(awk '$1 == "slow" && $4 > m { m = $4 } END { print m + 0 }' "$TMP/submits.txt")
[ "$max_slow" -ge 2 ] || fail "the slow worker's submissions were not stale (max $max_slow): the test forced nothing"
st_max=$(status_of $RUN slow stale_max)
[ "$st_max" = "$max_slow" ] || fail "status says max staleness $st_max for slow, the events say $max_slow"
say "slow worker's staleness up to $max_slow (status agrees: max $st_max, mean $(status_of $RUN slow stale_mean), last $(status_of $RUN slow stale_last))"
kill -9 "$WRK_fast" "$WRK_slow"

RUN=limit
init_run $RUN --async --trainer quadratic --numel 20000 --shards 2 --workers 2 --max-staleness 3
start_server b --lease-ttl-ms 2000
start_worker fast --sync-every 10 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 1
start_worker slow --sync-every 10 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 40
wait_until 30 'grep -q "would be .* versions stale" "$TMP/worker-slow.log"' "a rejection of the slow worker"
sleep 1
alive "$WRK_slow" || fail "the slow worker died after a rejection"
events $RUN
submits $RUN > "$TMP/submits2.txt"
awk '$4 > 3 { bad = 1 } END { exit bad }' "$TMP/submits2.txt" || fail "a submission more than 3 versions stale was accepted"
rejected=$(grep -c '^STALE$' "$TMP/events-$RUN.txt")
[ "$rejected" -ge 1 ] || fail "no STALE rejection recorded in the events"
say "--max-staleness 3: $rejected stale submissions rejected and recorded, none applied; the slow worker goes on"
