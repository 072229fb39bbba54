#!/bin/sh
# it_reject_flood.sh: a peer that knows the run's secret and sends 2000 requests that are refused (an unknown
# operation, pipelined) gets 2000 `err BADOP` replies, but the shard-server logs and records in dl:{R}:events
# (capped at 100000 entries) only the first 100 and 10 a second after that, and says so in one line;
# rejections_total counts all 2000. Before, each was logged and recorded: 20000 in 0.3 s from one connection,
# a run's whole history pushed out of the stream in 1.5 s and megabytes of log a second.
# test: light
. "$(dirname "$0")/lib.sh"
RUN=rflood
start_redis
init_run $RUN --trainer quadratic --numel 1000 --shards 1 --workers 1
pick_ports MP
start_server s1 --metrics $MP
wait_until 20 "grep -q 'shard 0: loaded' $TMP/server-s1.log" "s1 to load its shard"
P1=$(sed -n 's/.*advertised as 127\.0\.0\.1:\([0-9]*\)).*/\1/p' "$TMP/server-s1.log")
SECRET=$($RCLI HGET "dl:{$RUN}:config" secret)
ev0=$($RCLI XLEN "dl:{$RUN}:events")
python3 tests/tools/hostile_peer.py refused --auth $RUN "$SECRET" 127.0.0.1 "$P1" 2000 > "$TMP/refused.out" 2>&1 ||
  fail "the refused requests: $(cat "$TMP/refused.out")"
grep -q '^replies 2000: BADOP' "$TMP/refused.out" || fail "every request must be answered BADOP: $(cat "$TMP/refused.out")"
# (each line is written before its reply is sent: all there once the replies were read)
n=$(grep -c 'rejected frob from hostile' "$TMP/server-s1.log")
[ "$n" -ge 100 ] && [ "$n" -le 150 ] || fail "s1 logged $n of 2000 refusals, want the first 100 and 10 a second"
grep -q 'refusals beyond 100 at once or 10 a second are counted (rejections_total) but not logged' "$TMP/server-s1.log" ||
  fail "s1 did not say that it left refusals out: $(grep WARN "$TMP/server-s1.log" | tail -2)"
wait_until 10 "[ \$($RCLI XLEN dl:{$RUN}:events) -ge $((ev0 + n)) ]" "the $n logged refusals to be recorded"
ev=$(($($RCLI XLEN "dl:{$RUN}:events") - ev0))
[ "$ev" = "$n" ] || fail "$ev refusals recorded in dl:{$RUN}:events, want the $n logged"
metric() { python3 -c "import urllib.request, sys; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())" \
  "http://127.0.0.1:$MP/metrics" | awk -v n="diloco_shardserver_$1" '$1 ~ "^"n"[{]" { print $2 }'; }
[ "$(metric rejections_total)" = 2000 ] || fail "rejections_total $(metric rejections_total), want 2000"
say "OK: 2000 refusals answered; $n logged and recorded; rejections_total 2000"
