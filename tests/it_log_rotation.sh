#!/bin/sh
# it_log_rotation.sh: a run's logs can be rotated while it trains (logrotate, weeks-long runs).
# SIGHUP (logrotate's usual `postrotate kill -HUP`, a closed terminal or ssh session) used to kill every
# process at once (its default action): a worker left without deregistering, and the others waited for it at
# the barrier until the heartbeat timeout evicted it. Now a worker, a shard-server and `coordinator serve`
# take no notice of it. A worker follows its --log by name: moved away (logrotate's `create`), the file
# goes on being written until a new one appears under the name, then the lines go there; cut to nothing in
# place (`copytruncate`) it goes on from the start (it appends, O_APPEND), with no hole of zeros; deleted
# (`rm`), it is made anew, where the lines went to the deleted file until the worker's exit.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
RUN=rot
start_redis
init_run $RUN --trainer quadratic --numel 2000 --shards 2 --workers 1
start_server s1
bin/coordinator serve --redis "$URL" --run $RUN --print-every 1 > "$TMP/serve.log" 2>&1 &
SERVE=$!; PIDS="$PIDS $SERVE"
start_worker w --sync-every 5 --steps 0 --step-delay-ms 20 --heartbeat-interval 0.5
version() { $RCLI HGET "dl:{$RUN}:shards" 0:version; }
wait_until 30 '[ "$(version)" -ge 2 ] 2>/dev/null' "the worker's first rounds"
kill -HUP "$WRK_w" "$SRV_s1" "$SERVE"
v=$(version)
wait_until 20 '[ "$(version)" -ge $((v + 3)) ] 2>/dev/null' "rounds to commit after SIGHUP"
for p in "$WRK_w:worker" "$SRV_s1:shard-server" "$SERVE:coordinator serve"; do
  alive "${p%%:*}" || fail "SIGHUP stopped the ${p#*:}"
done
say "SIGHUP: the worker, shard-server and serve trained and served on"
# logrotate's create: the file moved away, a new one made under the name
L=$TMP/w.jsonl
mv "$L" "$L.1"
n1=$(wc -l < "$L.1")
wait_until 10 '[ "$(wc -l < "$L.1")" -gt "$n1" ]' "the worker to write on into the moved file until a new one is made"
: > "$L"
wait_until 10 '[ -s "$L" ]' "the worker to write its lines to the new $L"
n1=$(wc -l < "$L.1"); sleep 1
[ "$(wc -l < "$L.1")" = "$n1" ] || fail "the worker still writes to the rotated file"
grep -q '"event":"sync"' "$L" || wait_until 10 'grep -q "\"event\":\"sync\"" "$L"' "a sync line in the new file"
# copytruncate: cut in place
: > "$L"
wait_until 10 '[ -s "$L" ]' "lines after the truncation"
head -c 1 "$L" | od -An -c | grep -q '{' || fail "the truncated --log starts with $(head -c 16 "$L" | od -An -c): a hole"
rm "$L"
wait_until 10 '[ -s "$L" ]' "the worker to make its deleted --log anew"
say "--log followed through a move, a truncation and a deletion"
