#!/bin/sh
# it_redis_maxclients_server.sh: a Redis that reaches its maxclients under a running shard-server (its connections
# cut, every new one refused: "-ERR max number of clients reached" at accept, then closed). The shard-server
# stays up, says for each of its links that maxclients is reached and what to do, tries again every 5 s, and
# serves again once maxclients is raised. Before, the TCP connect reset each link's backoff, so all four
# reconnected about ten times a second, two lines each time (some 200 lines in 14 s), and the bulk-write link
# said only "connection lost (unexpected reply)", the control link "Connection reset by peer".
# test: light
. "$(dirname "$0")/lib.sh"
start_redis
RUN=mcs
init_run $RUN --trainer quadratic --numel 2000 --shards 2 --workers 1
start_server s1
wait_until 20 "grep -q 'shard 1: loaded version 0' $TMP/server-s1.log" "the shard-server to serve"
# One connection takes the only slot (maxclients 1), cuts every other client, and holds until $TMP/release.
python3 tests/tools/maxclients_holder.py "$PORT" "$TMP" --kill-others > "$TMP/holder.log" 2>&1 &
PIDS="$PIDS $!"
wait_until 10 "[ -e $TMP/held ]" "the holder to take the only slot"
before=$(wc -l < "$TMP/server-s1.log")
for link in bulk-write control; do
  wait_until 20 "grep -q 'redis $link connection refused: ERR max number of clients reached.*raise it' $TMP/server-s1.log" \
    "the shard-server to say its $link link is refused at maxclients, and what to do"
done
sleep 6 # (a rate: how often the links try again and say so)
n=$(($(wc -l < "$TMP/server-s1.log") - before))
[ "$n" -le 40 ] || fail "the shard-server wrote $n lines in about 6 s at maxclients (its links reconnect without backoff)"
grep -q "unexpected reply" "$TMP/server-s1.log" && fail "a link said 'unexpected reply' for maxclients reached"
alive "$SRV_s1" || fail "the shard-server exited"
say "$n lines at maxclients, each refusal said with what to do; raising maxclients"
mark=$(($(wc -l < "$TMP/server-s1.log") + 1))
touch "$TMP/release"
# (its leases expired meanwhile: it leases and loads its shards again)
wait_until 30 "tail -n +$mark $TMP/server-s1.log | grep -q 'shard 1: loaded version 0'" "the shard-server to serve again"
say "OK: the shard-server serves again once maxclients is raised"
