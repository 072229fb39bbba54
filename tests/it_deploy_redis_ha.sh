#!/bin/sh
# it_deploy_redis_ha.sh: deploy/redis-ha/sentinel.sh and deploy/redis-cluster/cluster.sh --replicas 1
# as a user runs them.
#  Sentinel: `up` starts a master, 2 replicas (deploy/redis-ha/ha.conf: min-replicas-to-write) and 3
#  Sentinels; `url` gives the redis+sentinel:// URL a run is created through; `status` shows the master
#  and its 2 replicas online; the master is kill -9'd, the Sentinels promote a replica (`master`
#  changes, `coordinator status` shows the new master and the failover count), `up` brings the old
#  node back as a replica of the new master, `down` stops everything.
#  Cluster: `up --replicas 1` creates 3 masters with one replica each, `status` shows 6 nodes ok and 3
#  replicas, `down` stops them.
. "$(dirname "$0")/lib.sh"
S=deploy/redis-ha/sentinel.sh
D=$TMP/ha
# 3 free node ports and 3 free Sentinel ports in a row
free_run() { python3 -c '
import socket, random, sys
n, bus = int(sys.argv[1]), int(sys.argv[2])
for _ in range(200):
    b = random.randrange(20000, 40000)
    try:
        ss = []
        for p in list(range(b, b + n)) + ([p + 10000 for p in range(b, b + n)] if bus else []):
            s = socket.socket(); s.bind(("127.0.0.1", p)); ss.append(s)
        print(b); break
    except OSError:
        pass' "$@"; }
B=$(free_run 3 0); SB=$(free_run 3 0)
# --help prints the usage and makes no folder (it made an empty --dir, run/<tag>/ by default)
for sc in $S deploy/redis-cluster/cluster.sh; do
  sh $sc --help --dir "$TMP/help" | grep -q "cluster.sh up\|sentinel.sh up" || fail "$sc --help: $(sh $sc --help 2>&1 | head -n 3)"
  [ -e "$TMP/help" ] && fail "$sc --help made its --dir"
done
cleanup() {
  sh $S down --dir "$D" >/dev/null 2>&1
  sh deploy/redis-cluster/cluster.sh down --dir "$TMP/rc" >/dev/null 2>&1
  if [ -n "${KEEP_TMP:-}" ]; then echo "logs kept in $TMP"; else rm -rf "$TMP"; fi
}
sh $S up --dir "$D" --base-port "$B" --sentinel-port "$SB" --name dlha --down-after-ms 2000 > "$TMP/up.log" 2>&1 \
  || fail "up: $(cat "$TMP/up.log")"
URL=$(sh $S url --dir "$D")
[ "$URL" = "redis+sentinel://127.0.0.1:$SB,127.0.0.1:$((SB + 1)),127.0.0.1:$((SB + 2))/dlha" ] || fail "url: $URL"
[ "$(redis-cli -p "$B" config get min-replicas-to-write | tail -n 1)" = 1 ] || fail "the nodes do not use ha.conf"
sh $S status --dir "$D" > "$TMP/status.txt" || fail "status"
[ "$(grep -c ' online ' "$TMP/status.txt")" -eq 2 ] || fail "status: $(cat "$TMP/status.txt")"
bin/coordinator init --redis "$URL" --run hadep --trainer quadratic --numel 20000 --shards 2 --workers 1 \
  --min-replicas 1 > "$TMP/init.log" 2>&1 || fail "init through the Sentinels: $(cat "$TMP/init.log")"
[ "$(redis-cli -p $((B + 1)) hget 'dl:{hadep}:config' min_replicas)" = 1 ] || fail "the run is not on the replica"
old=$(sh $S master --dir "$D")
[ "$old" = "127.0.0.1:$B" ] || fail "master: $old"
kill -9 "$(cat "$D/node-$B/redis.pid")"
wait_until 30 '[ "$(sh $S master --dir "$D")" != "$old" ]' "the Sentinels to promote a replica"
new=$(sh $S master --dir "$D")
say "the Sentinels promoted $new after the master $old was killed"
# the other replica follows the new master a moment after the promotion (the Sentinels reconfigure it)
cstatus() { bin/coordinator status --redis "$URL" --run hadep > "$TMP/cstatus.txt" 2>&1 &&
  grep -q "^redis: sentinel, master $new, 1 replica(s), [1-9][0-9]* failover" "$TMP/cstatus.txt"; }
wait_until 10 cstatus "coordinator status to show master $new with 1 replica"
bin/coordinator status --redis "$URL" --run hadep --json > "$TMP/cstatus.json" 2>&1 || fail "status --json"
python3 - "$TMP/cstatus.json" "$new" <<'PY' || fail "coordinator status --json: $(cat "$TMP/cstatus.json")"
import json, sys
r = json.load(open(sys.argv[1]))["redis"]
assert r["mode"] == "sentinel" and r["master"] == sys.argv[2], r
assert len(r["replicas"]) == 1 and r["replicas"][0]["state"] == "online", r
assert r["sentinel"]["name"] == "dlha" and r["sentinel"]["sentinels"] == 3 and r["sentinel"]["failovers"] >= 1, r
PY
sh $S up --dir "$D" > "$TMP/up2.log" 2>&1 || fail "second up: $(cat "$TMP/up2.log")"
redis-cli -p "$B" role | head -n 1 | grep -q slave || fail "the old master did not come back as a replica"
sh $S status --dir "$D" | grep -q "last failover: .*switch-master" || fail "status does not show the failover"
sh $S down --dir "$D" > /dev/null || fail "down"
for p in $B $((B + 1)) $((B + 2)) $SB $((SB + 1)) $((SB + 2)); do
  redis-cli -p "$p" ping > /dev/null 2>&1 && fail "port $p still answers after down"
done
say "sentinel.sh: up, url, status, init, failover, up (old master back as a replica), down"

C=$(free_run 6 1)
sh deploy/redis-cluster/cluster.sh up --dir "$TMP/rc" --base-port "$C" --fsync everysec --replicas 1 > "$TMP/cup.log" 2>&1 \
  || fail "cluster up --replicas 1: $(cat "$TMP/cup.log")"
sh deploy/redis-cluster/cluster.sh status --dir "$TMP/rc" > "$TMP/cstatus2.txt" || fail "cluster status"
[ "$(grep -c 'state ok' "$TMP/cstatus2.txt")" -eq 6 ] || fail "cluster status: $(cat "$TMP/cstatus2.txt")"
[ "$(redis-cli -p "$C" cluster nodes | awk '$3 ~ /slave/' | grep -c .)" -eq 3 ] || fail "not one replica per master"
sh deploy/redis-cluster/cluster.sh down --dir "$TMP/rc" > /dev/null || fail "cluster down"
say "cluster.sh up --replicas 1: 3 masters, 3 replicas"
