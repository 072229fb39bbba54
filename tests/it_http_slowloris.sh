#!/bin/sh
# it_http_slowloris.sh: `coordinator serve`'s HTTP port cuts a client that sends its request a byte at a time
# (slowloris) 10 s after it connected, while answering everyone else, says so in one line, and keeps no
# descriptor of the requests it answered. evhttp's 30 s timeout starts again at every byte, so such a client
# held its connection (and a descriptor) for ever: failed before, still open after 25 s
# (coordinator/http_deadline.c).
# test: light
. "$(dirname "$0")/lib.sh"
RUN=slowhttp
start_redis
init_run $RUN --trainer quadratic --numel 1000 --shards 1 --workers 1
pick_ports HP
bin/coordinator serve --redis "$URL" --run $RUN --http 127.0.0.1:$HP --print-every 0 > "$TMP/serve.log" 2>&1 &
SV=$!; PIDS="$PIDS $SV"
wait_until 20 "grep -q 'HTTP on' $TMP/serve.log" "serve to listen"
get() { python3 -c "import urllib.request, sys; print(urllib.request.urlopen(sys.argv[1], timeout=5).status)" \
  "http://127.0.0.1:$HP$1" 2>&1; }
[ "$(get /status)" = 200 ] || fail "GET /status: $(get /status)"
fds() { ls /proc/$SV/fd | wc -l; }
base=$(fds)

req=$(printf 'GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n' | od -An -v -tx1 | tr -d ' \n')
python3 tests/tools/hostile_peer.py trickle 127.0.0.1 "$HP" "$req" 0.5 > "$TMP/trickle.out" 2>&1 &
for i in $(seq 20); do
  c=$(get /status); [ "$c" = 200 ] || fail "GET /status during the slow request: $c"
  c=$(get /dashboard); [ "$c" = 200 ] || fail "GET /dashboard during the slow request: $c"
done
wait_until 25 "grep -q '^closed' $TMP/trickle.out" "serve to cut the slow request"
s=$(sed -n 's/^closed after \([0-9.]*\) s/\1/p' "$TMP/trickle.out")
awk -v s="$s" 'BEGIN { exit !(s >= 9.5 && s < 20) }' || fail "the slow request was cut after $s s, want about 10"
n=$(grep -c 'HTTP: closed 1 connection(s) that had not sent a whole request 10 s after connecting' "$TMP/serve.log")
[ "$n" = 1 ] || fail "serve said $n times that it cut a connection: $(grep WARN "$TMP/serve.log")"
# the 40 requests answered hold no descriptor (each connection closes after its reply, its watch with it)
wait_until 10 "[ \$(fds) -le $((base + 1)) ]" "serve's descriptors to come back to $base (now $(fds))"
say "OK: the slow request cut after $s s; 40 requests answered meanwhile; $(fds) descriptors (base $base)"
