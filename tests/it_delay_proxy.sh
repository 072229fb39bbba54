#!/bin/sh
# it_delay_proxy.sh: bin/delay-proxy (tools/delay_proxy.c). (1) A PING through a proxy with --rtt-ms 50
# takes at least 50 ms and, at its fastest of 20, less than 50 ms + 40 ms of slack (a loaded 2-core
# machine); with --split up the whole RTT is on one direction and the PING costs the same. (2) 3 workers
# reach Redis and both shard-servers only through a proxy (RTT 20 ms, jitter 5 ms; the servers advertise
# the proxy's addresses): the run's shard digests and every worker's final digest are bit-identical to
# the reference, as without the proxy (it_sync_exactness), and the proxy carried the pseudo-gradients;
# the workers learnt of each barrier's close from their wake tokens, without reading the barrier.
# (3) At RTT 300 ms, workers do not read the owners from Redis while they wait for replies. (4) --help,
# a bad --map (exit 2) and SIGTERM (exit 0, a line with what it carried).
# test: alone (it bounds a PING through the proxy to RTT + 40 ms)
. "$(dirname "$0")/lib.sh"
start_redis
RTT=50
ping_min() { # PORT -> the fastest of 20 PINGs in ms
  python3 - "$1" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
best = 1e9
for _ in range(20):
    t = time.monotonic(); s.sendall(b"PING\r\n"); r = s.recv(64)
    assert r == b"+PONG\r\n", r
    best = min(best, (time.monotonic() - t) * 1000)
print("%.2f" % best)
PY
}
start_proxy() { # NAME FLAGS...: pid in PRX_NAME, log in TMP/proxy-NAME.log
  n=$1; shift
  bin/delay-proxy "$@" > "$TMP/proxy-$n.log" 2>&1 &
  eval "PRX_$n=$!"; PIDS="$PIDS $!"
  wait_until 10 "grep -q listening '$TMP/proxy-$n.log'" "delay-proxy $n listening"
}
for split in both up; do
  PP=$(free_port)
  start_proxy $split --rtt-ms $RTT --split $split --map "127.0.0.1:$PP=127.0.0.1:$PORT"
  ms=$(ping_min "$PP") || fail "PING through the proxy ($split)"
  awk -v m="$ms" -v r=$RTT 'BEGIN { exit !(m >= r && m < r + 40) }' ||
    fail "PING through a proxy of RTT $RTT ms (--split $split) took $ms ms at its fastest"
  say "RTT $RTT ms, --split $split: fastest PING of 20 through the proxy $ms ms (direct: $(ping_min "$PORT") ms)"
done

RUN=prox; NUMEL=200000; SEED=7; ROUNDS=5; H=20
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED
pick_ports PR L1 L2 A1 A2
start_proxy run --rtt-ms 20 --jitter-ms 5 --map "127.0.0.1:$PR=127.0.0.1:$PORT" \
  --map "127.0.0.1:$A1=127.0.0.1:$L1" --map "127.0.0.1:$A2=127.0.0.1:$L2"
start_server s1 --lease-ttl-ms 2000 --listen "127.0.0.1:$L1" --advertise "127.0.0.1:$A1"
start_server s2 --lease-ttl-ms 2000 --listen "127.0.0.1:$L2" --advertise "127.0.0.1:$A2"
$RCLI MONITOR > "$TMP/monitor.txt" 2>&1 &
PIDS="$PIDS $!"
DIRECT=$URL; URL="redis://127.0.0.1:$PR"
for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1; done
wait_workers w1 w2 w3
URL=$DIRECT
# a worker learns of the close from its wake token, which it listens for while it arrives (wake.c): it
# reads the barrier (dl_barrier with its id, a round trip) only when the token did not come within a
# second. Before, every worker but the last to arrive read it once per round (10 reads here).
reads=$(grep -c '"dl_barrier" .* "0" "w[123]"$' "$TMP/monitor.txt")
[ "$reads" -lt $ROUNDS ] || fail "workers read the barrier $reads times in $ROUNDS rounds: the wake token did not end their wait"
assert_matches_reference
assert_workers_end_at "$REF_DIGEST"
kill -TERM "$PRX_run"; wait "$PRX_run" || fail "delay-proxy exited with status $? on SIGTERM"
line=$(grep 'stopping:' "$TMP/proxy-run.log") || fail "no stopping line from the proxy"
up=$(echo "$line" | sed 's/.* \([0-9]*\) bytes up.*/\1/')
[ "$up" -ge $((3 * ROUNDS * NUMEL * 2)) ] || fail "the proxy carried $up bytes up: not the workers' pseudo-gradients ($line)"
say "through the proxy (RTT 20 ms, jitter 5 ms), bit-identical to the reference: $REF_DIGEST; barrier reads by workers: $reads; $line"

# (3) At an RTT of 300 ms every reply takes longer than 250 ms, the pause after which a worker waiting
# for a shard-server's reply looked at the owners in Redis (two reads through the proxy, under the lock
# the other owner's thread waits for: 5 RTT a push or get phase instead of 1). It looks only after 1 s
# now: the owners are read at the join, not during the rounds.
RUN=far; ROUNDS=3
init_run $RUN --trainer quadratic --numel 20000 --shards 4 --workers 2 --seed $SEED
pick_ports PR L1 A1
start_proxy far --rtt-ms 300 --map "127.0.0.1:$PR=127.0.0.1:$PORT" --map "127.0.0.1:$A1=127.0.0.1:$L1"
start_server f1 --lease-ttl-ms 2000 --listen "127.0.0.1:$L1" --advertise "127.0.0.1:$A1"
$RCLI MONITOR > "$TMP/monitor-far.txt" 2>&1 &
PIDS="$PIDS $!"
DIRECT=$URL; URL="redis://127.0.0.1:$PR"
for w in w1 w2; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1; done
wait_workers w1 w2
URL=$DIRECT
looks=$(grep -c "\"HGETALL\" \"dl:{$RUN}:shards\"" "$TMP/monitor-far.txt")
[ "$looks" -le 4 ] || fail "at RTT 300 ms the workers read the owners $looks times in $ROUNDS rounds (at most 4: at their joins)"
say "RTT 300 ms: the workers read the owners $looks times in $ROUNDS rounds (at their joins)"

bin/delay-proxy --help | grep -q -- '--rtt-ms' || fail "--help does not list --rtt-ms"
bin/delay-proxy --rtt-ms 5 --map nocolon=127.0.0.1:1 > "$TMP/bad.txt" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q 'map' "$TMP/bad.txt" || fail "a bad --map: exit $rc, $(cat "$TMP/bad.txt")"
bin/delay-proxy --rtt-ms 5 > "$TMP/bad.txt" 2>&1; rc=$?
[ $rc -eq 2 ] || fail "no --map: exit $rc"
say "delay-proxy: RTT within bounds, a run through it exact, clean SIGTERM, usage errors exit 2"
