#!/bin/sh
# it_fd_exhaustion.sh: a shard-server (data plane and --metrics) and `coordinator serve` (HTTP) whose
# descriptors run out (`ulimit -n 40`, then 60 idle connections to each port) neither spin nor flood their
# log, and serve again once the connections are gone: the two workers train their steps.
#
# libevent's listener is level-triggered: when accept() fails with EMFILE the connection stays in the
# backlog, and the loop called accept() again at once. The shard-server wrote a million "accept failed"
# lines in 4 s at 100% CPU, serve as many "[warn] Error from accept() call" (failed before the fix:
# hundreds of thousands of lines here). Now each listener pauses 200 ms after a failure and logs one line,
# then at most one every 10 s (common/net/accept_guard.c). The workers, started meanwhile, wait: their connects
# complete in the kernel but no hello is answered, which they say naming the server and what may be wrong (they
# said "timeout while receiving a frame" before).
# test: light
. "$(dirname "$0")/lib.sh"
RUN=fdx
start_redis
init_run $RUN --trainer quadratic --numel 2000 --shards 2 --workers 2
pick_ports HP MP
(ulimit -n 40 && exec bin/shard-server --redis "$URL" --run $RUN --id s1 --metrics $MP --peer-timeout 0) > "$TMP/server-s1.log" 2>&1 &
S1=$!; PIDS="$PIDS $S1"
(ulimit -n 40 && exec bin/coordinator serve --redis "$URL" --run $RUN --http 127.0.0.1:$HP --print-every 0) \
  > "$TMP/serve.log" 2>&1 &
SV=$!; PIDS="$PIDS $SV"
wait_until 20 "grep -q 'advertised as' $TMP/server-s1.log && grep -q 'metrics at' $TMP/server-s1.log" "s1 to listen"
wait_until 20 "grep -q 'HTTP on' $TMP/serve.log" "serve to listen"
DP=$(sed -n 's/.*advertised as 127\.0\.0\.1:\([0-9]*\)).*/\1/p' "$TMP/server-s1.log")

# 60 idle connections on each port, for 12 s (s1 closes no silent peer: --peer-timeout 0; it_hostile_peers does)
for p in $DP $MP $HP; do
  python3 tests/tools/hostile_peer.py idle 127.0.0.1 "$p" 60 12 > "$TMP/idle-$p.out" 2>&1 &
done
wait_until 10 "[ \$(cat $TMP/idle-*.out | grep -c '^opened') -eq 3 ]" "the idle connections to open"
start_worker w1 --sync-every 5 --steps 20 --heartbeat-interval 1
start_worker w2 --sync-every 5 --steps 20 --heartbeat-interval 1
wait_until 20 "grep -q 'handshake with shard-server 127.0.0.1:$DP: timeout .*out of descriptors' $TMP/worker-w1.log" \
  "w1 to say that s1 does not answer its hello"
wait_until 20 "[ \$(cat $TMP/idle-*.out | grep -c '^closed') -eq 3 ]" "the idle connections to end"
grep -q 'opened 60' "$TMP/idle-$DP.out" || fail "60 connections to the data plane: $(cat "$TMP/idle-$DP.out")"
alive $S1 || fail "the shard-server died"
alive $SV || fail "serve died"

n=$(grep -c 'accept' "$TMP/server-s1.log")
[ "$n" -le 8 ] || fail "the shard-server logged $n lines about accept (one per listener, then one per 10 s)"
grep -q 'data plane: accept failed: Too many open files ([0-9]* descriptors open, limit 40)' "$TMP/server-s1.log" ||
  fail "the shard-server did not say that accept failed: $(grep accept "$TMP/server-s1.log" | head -n 3)"
grep -q 'metrics HTTP: accept failed: Too many open files' "$TMP/server-s1.log" ||
  fail "the metrics listener did not say that accept failed"
n=$(grep -c 'accept' "$TMP/serve.log")
[ "$n" -le 4 ] || fail "serve logged $n lines about accept (one, then one per 10 s)"
grep -q 'HTTP: accept failed: Too many open files' "$TMP/serve.log" || fail "serve did not say that accept failed"

# the descriptors are back: both listen again, and the run trains on
code=$(python3 -c "import urllib.request, sys; print(urllib.request.urlopen(sys.argv[1], timeout=5).status)" \
  "http://127.0.0.1:$HP/status" 2>&1) || true
[ "$code" = 200 ] || fail "GET /status after the idle connections: $code"
wait_workers w1 w2
v=$($RCLI HGET "dl:{$RUN}:shards" 0:version)
[ "$v" -ge 4 ] || fail "shard 0 at version $v after 20 steps at H 5"
say "OK: accept failures logged $(grep -c accept "$TMP/server-s1.log") + $(grep -c accept "$TMP/serve.log") times; shard 0 at version $v"
