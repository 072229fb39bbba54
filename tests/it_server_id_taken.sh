#!/bin/sh
# it_server_id_taken.sh: two live shard-servers with one --id do not both serve the run's shards.
# A shard-server's beat took leases under its id whoever beat before: the one that had not loaded a shard took
# it anew with a new epoch, the other renewed it under that epoch at its next beat, and both served and
# committed the same shards (an operator saw 72 commits from the first during the overlap), each with the
# pseudo-gradients of the workers that reached it. The systemd unit's default id %H-%i collides on cloned
# machines. Now each process beats with a random token (lua/50_servers.lua check_server_process): its first
# beat takes the id over (a restart after a crash), a later beat of another process while the holder beats
# is refused REPLACED, and that process serves nothing and stops with exit status 3 once the other has gone
# on beating for 3 of its ttls (shard-server/lease.c id_taken).
# Part 1: a, then b, as server `dup`: a exits 3 saying why; b serves, the rounds go on; a gave nothing back
# under b's id on its way out. Part 2: a record of another process that does not beat (as a record of ours
# lost in a Redis failover leaves the older one back) refuses b only while it looks alive: b serves
# nothing meanwhile, then holds the id again and does not stop.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
RUN=dupsrv
start_redis
init_run $RUN --trainer quadratic --numel 4000 --shards 2 --workers 1
version() { $RCLI HGET "dl:{$RUN}:shards" 0:version; }
owner() { $RCLI HGET "dl:{$RUN}:shards" "$1:owner"; }
dup_server() { # NAME: a shard-server with the id dup, its log server-NAME.log, its pid in SRV_NAME
  bin/shard-server --redis "$URL" --run "$RUN" --id dup --lease-ttl-ms 1000 > "$TMP/server-$1.log" 2>&1 &
  eval "SRV_$1=$!"; PIDS="$PIDS $!"
}
dup_server a
start_worker w --sync-every 10 --steps 0 --step-delay-ms 5 --heartbeat-interval 0.5
wait_until 20 '[ "$(version)" -ge 2 ] 2>/dev/null' "the first two rounds under a"
dup_server b
wait_until 20 "! alive $SRV_a" "a to stop once b holds the id"
wait "$SRV_a"; st=$?
[ "$st" = 3 ] || fail "a exited with status $st, not 3 (the id taken for good)"
grep -q "server id dup was taken over by another process (pid $SRV_b, data plane .*: serving nothing while it beats" \
  "$TMP/server-a.log" || fail "a did not warn that b took its id: $(grep -E 'WARN|ERROR' "$TMP/server-a.log" | tail -n 3)"
grep -q "ERROR .*it has gone on beating for [0-9.]* s: stopping (exit status 3); give each shard-server its own --id" \
  "$TMP/server-a.log" || fail "a did not say why it stopped: $(grep -E 'WARN|ERROR' "$TMP/server-a.log" | tail -n 3)"
grep -q "leases given back" "$TMP/server-a.log" && fail "a gave back leases that are b's"
v=$(version)
wait_until 20 '[ "$(version)" -ge $((v + 3)) ] 2>/dev/null' "the rounds to go on under b"
alive "$SRV_b" || fail "b stopped: $(tail -n 3 "$TMP/server-b.log")"
grep -q "taken over" "$TMP/server-b.log" && fail "b was refused: $(grep 'taken over' "$TMP/server-b.log" | head -n 2)"
[ "$(owner 0)" = dup ] && [ "$(owner 1)" = dup ] || fail "the shards are not held by dup: $(owner 0) $(owner 1)"
say "part 1: a stopped (exit 3) once b took the id; the rounds went on under b"

# part 2: a live-looking record of a process that never beats again (token ghost, last beat now)
$RCLI EVAL "local t = redis.call('TIME'); redis.call('HSET', KEYS[1], ARGV[1], cmsgpack.pack({addr = '127.0.0.1:1',
  pid = '1', last = t[1] * 1000 + math.floor(t[2] / 1000), held = 0, ttl = 1000, token = 'ghost'})); return 1" \
  1 "dl:{$RUN}:servers" dup > /dev/null || fail "cannot write the ghost record"
wait_until 10 'grep -q "taken over by another process (pid 1, data plane 127.0.0.1:1)" "$TMP/server-b.log"' \
  "b to be refused while the ghost record looks alive"
wait_until 10 'grep -q "server id dup is ours again" "$TMP/server-b.log"' "b to hold the id again"
v=$(version)
wait_until 20 '[ "$(version)" -ge $((v + 3)) ] 2>/dev/null' "the rounds to go on under b again"
sleep 3 # (past the 3 ttls after which a refused server stops)
alive "$SRV_b" || fail "b stopped over a record that no process beats: $(tail -n 3 "$TMP/server-b.log")"
grep -q "ERROR" "$TMP/server-b.log" && fail "b logged an error: $(grep ERROR "$TMP/server-b.log" | head -n 2)"
say "part 2: a record nobody beats refused b for a ttl at most; b holds the id and serves on"
kill "$WRK_w" "$SRV_b"; wait "$WRK_w"; wait "$SRV_b" || fail "b exited with status $? on SIGTERM"
grep -q "leases given back" "$TMP/server-b.log" || fail "b did not give its leases back on SIGTERM"
echo "PASS"
