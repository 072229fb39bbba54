#!/bin/sh
# it_peer_bounds.sh: what a peer that has proved the run's secret can make a shard-server hold is bounded,
# while two workers train through it (--peer-timeout 4):
#   - flood: a get that waits (for a round of a run nobody trains) and then 96 MiB more sent at once. The server
#     stops reading the connection about 1 MiB in (a read high-watermark) until its request is handled: its
#     RSS grows by a few MiB at most. Before, it read everything into the connection's input: +96 MiB, and as
#     much as the peer sent;
#   - slowframe: a big frame (300000 bytes, read straight into its buffer) whose bytes come one a second. It is
#     closed 4 s after its first byte (a frame's whole-arrival deadline). Before, each byte started the timeout
#     again: still open (its buffer held) for as long as the peer went on;
#   - a request to s1's --metrics port sent a byte every 0.5 s: cut 10 s after it connected
#     (common/net/http_deadline.c, as `coordinator serve`'s port). Before, evhttp's timeout started again at
#     every byte: held for ever.
#   - slowread: gets sent as fast as the server takes them, their replies read a byte every 1.5 s (so the write
#     timeout never ends it). The server takes no further frame while the connection's output holds more than
#     16 MiB: it grows by a few MiB. Before, it answered every get and queued the reply: +600 MiB in 5 s.
#   - bigsend: a frame of 8 MB, over the largest legal blob, sent whole: refused from its length (BADSIZE), and
#     the peer's send completes and it reads why (the server reads and drops the rest, for 2 s at most, before
#     it closes). Before, the socket was closed with the frame unread, so reset: "send failed: connection reset".
#   - ahead: 200 gets for a version far ahead of any, and pushes for such a round, one after the other: each
#     answered (`wait`, STALE) after one question to Redis, with no reload. Before, each made the shard reload
#     from Redis (its other requests parked meanwhile: two workers trained 3 times slower against such a peer).
# And a peer that has not proved the secret gets one refusal per connection, for a frame no longer than a hello:
#   - a frame of 300000 bytes first is refused from its length (AUTH) and the connection closed. Before, the
#     server read it whole (and as many as there were connections: 8 of the largest frame of a run of 20M
#     parameters made it grow by 550 MB), then refused it;
#   - 200 malformed frames at once: one BADFRAME, recorded once, and the connection closed. Before, each was
#     refused, logged and recorded in dl:{R}:events (capped at 100000: the run's history pushed out).
# test: light
. "$(dirname "$0")/lib.sh"
RUN=bounds
start_redis
init_run $RUN --trainer quadratic --numel 200000 --shards 2 --workers 2
init_run idle --trainer quadratic --numel 1000 --shards 1 --workers 1
pick_ports MP
start_server s1 --peer-timeout 4 --metrics $MP
start_server s2 --peer-timeout 4
bin/shard-server --redis "$URL" --run idle --id s3 --peer-timeout 4 > "$TMP/server-s3.log" 2>&1 &
S3=$!; PIDS="$PIDS $S3"
for s in s1 s2 s3; do wait_until 20 "grep -q 'advertised as' $TMP/server-$s.log" "$s to listen"; done
wait_until 20 "grep -q 'shard 0: loaded' $TMP/server-s3.log" "s3 to load the idle run's shard"
port_of() { sed -n 's/.*advertised as 127\.0\.0\.1:\([0-9]*\)).*/\1/p' "$TMP/server-$1.log"; }
P1=$(port_of s1); P3=$(port_of s3)
SECRET=$($RCLI HGET "dl:{$RUN}:config" secret)
SECRET3=$($RCLI HGET "dl:{idle}:config" secret)
[ -n "$SECRET" ] && [ -n "$SECRET3" ] || fail "a run has no secret"
start_worker w1 --sync-every 20 --steps 60 --step-delay-ms 250 --heartbeat-interval 1
start_worker w2 --sync-every 20 --steps 60 --step-delay-ms 250 --heartbeat-interval 1

HP="python3 tests/tools/hostile_peer.py"
rss() { awk '/^VmRSS/ { print int($2 / 1024) }' /proc/$S3/status; }
rss0=$(rss)
$HP flood --auth idle "$SECRET3" 127.0.0.1 "$P3" 0 96 > "$TMP/flood.out" 2>&1 &
FL=$!; PIDS="$PIDS $FL"
$HP slowframe --auth $RUN "$SECRET" 127.0.0.1 "$P1" 300000 1 > "$TMP/slowframe.out" 2>&1 &
$HP bigsend --auth $RUN "$SECRET" 127.0.0.1 "$P1" 8000000 > "$TMP/bigsend.out" 2>&1 &
$HP stall 127.0.0.1 "$P1" 300000 > "$TMP/bigfirst.out" 2>&1 &
$HP garbage 127.0.0.1 "$P1" 200 > "$TMP/garbage.out" 2>&1 &
req=$(printf 'GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n' | od -An -v -tx1 | tr -d ' \n')
$HP trickle 127.0.0.1 "$MP" "$req" 0.5 > "$TMP/trickle.out" 2>&1 &

wait_until 20 "grep -q '^sent' $TMP/flood.out" "the flood to end"
grep -q '^handshake done' "$TMP/flood.out" || fail "flood: no handshake: $(cat "$TMP/flood.out")"
grow=$(($(rss) - rss0))
[ "$grow" -le 24 ] ||
  fail "s3 grew by $grow MiB while a peer sent $(sed -n 's/^sent //p' "$TMP/flood.out") behind a waiting get, want a few"
alive "$S3" || fail "s3 died"
kill "$FL" 2>/dev/null
rss0=$(rss)
$HP slowread --auth idle "$SECRET3" 127.0.0.1 "$P3" 0 5 1.5 > "$TMP/slowread.out" 2>&1 &
$HP ahead --auth idle "$SECRET3" 127.0.0.1 "$P3" 0 200 > "$TMP/ahead.out" 2>&1 &

wait_until 25 "grep -q '^closed' $TMP/slowframe.out" "the slow frame to end"
grep -q '^handshake done' "$TMP/slowframe.out" || fail "slowframe: no handshake: $(cat "$TMP/slowframe.out")"
s=$(sed -n 's/^closed after \([0-9.]*\) s/\1/p' "$TMP/slowframe.out")
awk -v s="$s" 'BEGIN { exit !(s >= 3.5 && s < 15) }' || fail "the slow frame was closed after $s s, want about 4"
grep -q 'closed connection .*(hostile): a 300000-byte frame not whole 4000 ms after its first' "$TMP/server-s1.log" ||
  fail "s1 did not say why: $(grep 'closed connection' "$TMP/server-s1.log")"
wait_until 20 "grep -q '^reply\|^no reply' $TMP/bigsend.out" "the big frame's reply"
grep -q '^sent whole' "$TMP/bigsend.out" && grep -q '^reply BADSIZE: frame of 8000000 bytes' "$TMP/bigsend.out" ||
  fail "a frame over the largest legal blob: $(cat "$TMP/bigsend.out")"
wait_until 20 "grep -q '^closed' $TMP/bigfirst.out && grep -q '^replies' $TMP/garbage.out" \
  "the unauthenticated peers to end"
grep -q "rejected ? from ? .*AUTH frame of 300000 bytes from .* before the handshake" "$TMP/server-s1.log" ||
  fail "s1 did not refuse the big frame before the handshake: $(grep WARN "$TMP/server-s1.log")"
grep -q '^replies 1, closed' "$TMP/garbage.out" ||
  fail "malformed frames before the handshake: $(cat "$TMP/garbage.out"), want 1 refusal"
n=$(grep -c 'rejected .* BADFRAME' "$TMP/server-s1.log")
[ "$n" = 1 ] || fail "s1 logged $n refusals of malformed frames, want 1"
wait_until 20 "grep -q '^sent' $TMP/slowread.out" "the slow reader to end"
grep -q '^handshake done' "$TMP/slowread.out" || fail "slowread: no handshake: $(cat "$TMP/slowread.out")"
grow2=$(($(rss) - rss0))
[ "$grow2" -le 48 ] ||
  fail "s3 grew by $grow2 MiB for a peer that read its replies a byte at a time ($(cat "$TMP/slowread.out")), want a few"
alive "$S3" || fail "s3 died"
wait_until 20 "grep -q '^asked' $TMP/ahead.out" "the requests for versions ahead to end"
grep -q '^asked 200 times' "$TMP/ahead.out" || fail "requests for versions ahead: $(cat "$TMP/ahead.out")"
l=$(grep -c 'reloading from Redis' "$TMP/server-s3.log")
[ "$l" = 0 ] || fail "s3 reloaded its shard $l times for 200 requests for versions that never were"
wait_until 25 "grep -q '^closed' $TMP/trickle.out" "the slow metrics request to end"
s=$(sed -n 's/^closed after \([0-9.]*\) s/\1/p' "$TMP/trickle.out")
awk -v s="$s" 'BEGIN { exit !(s >= 9.5 && s < 20) }' || fail "the slow metrics request was cut after $s s, want about 10"
grep -q 'HTTP: closed 1 connection(s) that had not sent a whole request 10 s after connecting' "$TMP/server-s1.log" ||
  fail "s1 did not say it cut the metrics request: $(grep WARN "$TMP/server-s1.log")"

wait_workers w1 w2
v=$($RCLI HGET "dl:{$RUN}:shards" 0:version)
[ "$v" = 3 ] || fail "shard 0 at version $v after 60 steps at H 20, want 3"
rej() { $RCLI HGET "dl:{$RUN}:state" rejections; }
wait_until 10 "[ \"\$(rej)\" -ge 3 ]" "the 3 rejections to be recorded (now $(rej))"
r=$(rej)
[ "$r" = 3 ] || fail "$r rejections recorded, want 3: the big frame's and the 2 of the unauthenticated peers"
after() { sed -n 's/^closed after //p' "$TMP/$1.out"; }
say "OK: s3 grew $grow MiB under a flood of $(sed -n 's/^sent //p' "$TMP/flood.out"), $grow2 MiB for a slow reader;" \
  "the slow frame closed after $(after slowframe), the slow metrics request after $(after trickle); shard 0 at version $v"
