#!/bin/sh
# it_hostile_peers.sh: peers that hold a shard-server's data-plane connections without using them are closed
# after --peer-timeout (here 4 s), while two real workers train through it all and keep their connections
# (idle between rounds for longer than the timeout: never closed between requests):
#   - 5 connections that send nothing (no hello within min(4 s, 10 s));
#   - after the handshake: a frame header sent a byte every 0.5 s (slowloris: a frame must be whole 4 s after
#     its first byte), a big frame's length (300000 bytes, read straight into its buffer) and then nothing,
#     and 200 gets whose replies are never read (libevent's write timeout);
#   - 500 idle connections to the other server, closed in one log line;
#   - 3 idle connections to s1's --metrics port (evhttp had no timeout there: kept for ever, and enough of them
#     take every descriptor of the process, the data plane's too).
# connections_timed_out_total counts exactly the hostile connections. Before, every one of them stayed open
# for ever (12 s here without a sign of closing; each an fd, the big frame its 300 KB buffer), and the flag
# did not exist.
# test: light
. "$(dirname "$0")/lib.sh"
RUN=hostile
start_redis
init_run $RUN --trainer quadratic --numel 200000 --shards 2 --workers 2
pick_ports MP
start_server s1 --peer-timeout 4 --metrics $MP
wait_until 20 "grep -q 'advertised as' $TMP/server-s1.log" "s1 to listen"
start_server s2 --peer-timeout 4
wait_until 20 "grep -q 'advertised as' $TMP/server-s2.log" "s2 to listen"
port_of() { sed -n 's/.*advertised as 127\.0\.0\.1:\([0-9]*\)).*/\1/p' "$TMP/server-$1.log"; }
P1=$(port_of s1); P2=$(port_of s2)
SECRET=$($RCLI HGET "dl:{$RUN}:config" secret)
[ -n "$SECRET" ] || fail "the run has no secret"
# idle 5 s between rounds (20 steps of 250 ms), longer than the peer timeout
start_worker w1 --sync-every 20 --steps 60 --step-delay-ms 250 --heartbeat-interval 1
start_worker w2 --sync-every 20 --steps 60 --step-delay-ms 250 --heartbeat-interval 1

HP="python3 tests/tools/hostile_peer.py"
$HP idle 127.0.0.1 "$P1" 5 20 > "$TMP/idle.out" 2>&1 &
$HP trickle --auth $RUN "$SECRET" 127.0.0.1 "$P1" 400000008362000000000000000000 0.5 > "$TMP/trickle.out" 2>&1 &
$HP stall --auth $RUN "$SECRET" 127.0.0.1 "$P1" 300000 > "$TMP/stall.out" 2>&1 &
$HP noread --auth $RUN "$SECRET" 127.0.0.1 "$P1" 0,1 20 > "$TMP/noread.out" 2>&1 &
NR=$!; PIDS="$PIDS $NR"
$HP idle 127.0.0.1 "$P2" 500 20 > "$TMP/idle500.out" 2>&1 &
$HP idle 127.0.0.1 "$MP" 3 20 > "$TMP/idlem.out" 2>&1 &
wait_until 25 "grep -q '^closed' $TMP/idle.out && grep -q '^closed' $TMP/trickle.out && grep -q '^closed' $TMP/stall.out &&
  grep -q '^closed' $TMP/idle500.out && grep -q '^closed' $TMP/idlem.out" "the hostile connections to end"
grep -q '^closed 3 of 3 after' "$TMP/idlem.out" || fail "idle connections to the metrics port: $(cat "$TMP/idlem.out")"
grep -q '^closed 5 of 5 after' "$TMP/idle.out" || fail "idle connections: $(cat "$TMP/idle.out")"
grep -q '^closed 500 of 500 after' "$TMP/idle500.out" || fail "500 idle connections: $(cat "$TMP/idle500.out")"
for f in trickle stall; do
  grep -q '^handshake done' "$TMP/$f.out" || fail "$f: no handshake: $(cat "$TMP/$f.out")"
  s=$(sed -n 's/^closed after \([0-9.]*\) s/\1/p' "$TMP/$f.out")
  awk -v s="$s" 'BEGIN { exit !(s >= 3.5 && s < 15) }' || fail "$f closed after $s s, want about 4"
done
grep -q '^sent [0-9]* gets' "$TMP/noread.out" || fail "noread: $(cat "$TMP/noread.out")"
metric() { python3 -c "import urllib.request, sys; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())" \
  "http://127.0.0.1:$MP/metrics" | awk -v n="diloco_shardserver_$1" '$1 ~ "^"n"[{]" { print $2 }'; }
# 5 idle + trickle + stall + noread
wait_until 20 "[ \"\$(metric connections_timed_out_total)\" = 8 ]" \
  "s1 to close the 8 hostile connections (connections_timed_out_total $(metric connections_timed_out_total))"
kill "$NR" 2>/dev/null

wait_workers w1 w2
v=$($RCLI HGET "dl:{$RUN}:shards" 0:version)
[ "$v" = 3 ] || fail "shard 0 at version $v after 60 steps at H 20, want 3"
n=$(metric connections_timed_out_total)
[ "$n" = 8 ] || fail "s1 closed $n connections for their silence, want the 8 hostile ones (a worker's was closed?)"
for s in s1 s2; do
  l=$(grep -c 'closed connection' "$TMP/server-$s.log")
  [ "$l" -ge 1 ] && [ "$l" -le 2 ] || fail "$s wrote $l lines about the connections it closed, want 1 or 2"
done
grep -q 'closed connection .*(no hello): no hello within 4000 ms of connecting' "$TMP/server-s2.log" ||
  fail "s2 did not say why: $(grep 'closed connection' "$TMP/server-s2.log")"
say "OK: 8 + 500 hostile connections closed; shard 0 at version $v; $(grep -c 'closed connection' "$TMP/server-s1.log") + $(grep -c 'closed connection' "$TMP/server-s2.log") log lines"
