#!/bin/sh
# it_deploy_redis_cluster.sh: deploy/redis-cluster/cluster.sh as a user runs it: `up` creates a 3-master
# cluster on 127.0.0.1, a run is created through one node and its shard blobs land on several
# masters, `status` shows every node ok, `down` stops every node, a second `up` brings the same
# cluster back from nodes.conf and the AOF (the run is still there), `down` again leaves nothing.
. "$(dirname "$0")/lib.sh"
S=deploy/redis-cluster/cluster.sh
D=$TMP/rc
BASE=$(python3 -c '
import socket, random
for _ in range(200):
    b = random.randrange(20000, 40000)
    try:
        ss = []
        for p in (b, b + 1, b + 2, b + 10000, b + 10001, b + 10002):
            s = socket.socket(); s.bind(("127.0.0.1", p)); ss.append(s)
        print(b); break
    except OSError:
        pass')
CLUSTER_PORTS="$BASE $((BASE + 1)) $((BASE + 2))"   # lib.sh shuts them down on exit
sh $S up --dir "$D" --base-port "$BASE" --fsync everysec > "$TMP/up.log" 2>&1 || fail "up: $(cat "$TMP/up.log")"
URL=$(sh $S url --dir "$D")
[ "$URL" = "redis://127.0.0.1:$BASE,127.0.0.1:$((BASE + 1)),127.0.0.1:$((BASE + 2))" ] || fail "url: $URL"
RCLI="redis-cli -c -p $BASE"
init_run demo --trainer quadratic --numel 40000 --shards 6 --workers 1
[ "$(cluster_nodes_with 'dl:{demo:*}:snap:*')" -ge 2 ] || fail "the snapshots are not spread over the masters"
sh $S status --dir "$D" > "$TMP/status.txt" || fail "status"
[ "$(grep -c 'state ok' "$TMP/status.txt")" -eq 3 ] || fail "status: $(cat "$TMP/status.txt")"
sh $S down --dir "$D" > /dev/null || fail "down"
sh $S status --dir "$D" | grep -q 'state ok' && fail "a node still runs after down"
sh $S up --dir "$D" > "$TMP/up2.log" 2>&1 || fail "second up: $(cat "$TMP/up2.log")"   # settings from cluster.env
grep -q created "$TMP/up2.log" && fail "the second up created a new cluster"
[ "$(bin/coordinator status --redis "$URL" --run demo --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["shards"])')" = 6 ] \
  || fail "the run did not survive down/up"
sh $S down --dir "$D" > /dev/null || fail "second down"
for p in $CLUSTER_PORTS; do redis-cli -p "$p" ping > /dev/null 2>&1 && fail "node $p still answers"; done
say "up, init, status, down, up (same cluster, run kept), down"
