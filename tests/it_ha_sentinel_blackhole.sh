#!/bin/sh
# it_ha_sentinel_blackhole.sh: the shard-server asks its Sentinels from its event loop without waiting
# for them, and follows a failover the moment a Sentinel announces it.
# A Redis master and its replica, one real Sentinel, and a "Sentinel" that accepts connections and never
# answers (a blackholed host), named first in the shard-server's redis+sentinel:// URL. One shard-server
# with --metrics (served by the same loop as the workers' requests).
#   1. Its Redis connections are killed (CLIENT KILL) four times; each time its three links ask the
#      Sentinels again, and the asking lasts at least the 0.5 s the blackholed one is given. Requests to
#      /metrics sent 0.1-0.4 s after each kill must be answered within 0.4 s (they take ~0.01 s; before,
#      the loop waited 0.5 s per link on the blackholed Sentinel, 1.5 s per kill, and the slowest took
#      2 s; 0.4 s leaves room for a loaded machine), and the links must have been back only after that
#      0.5 s (the requests did meet a pending query).
#   2. SENTINEL FAILOVER: the shard-server logs the new master within 0.5 s of the Sentinel's first
#      announcement (+promoted-slave, its log), and its three links are on the new master within 1 s.
# test: light (it waits more than it computes: 4 s of CPU in 14 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=bh
start_redis
pick_ports RPORT SPORT BPORT MPORT
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir "$TMP" --replicaof 127.0.0.1 "$PORT" \
  --logfile "$TMP/replica.log" --pidfile "$TMP/replica.pid" > /dev/null || fail "the replica did not start"
CLUSTER_PORTS="$PORT $RPORT $SPORT" # cleanup shuts these down
start_sentinel "$SPORT" "sentinel down-after-milliseconds m 2000" "sentinel failover-timeout m 10000"
python3 - "$BPORT" > "$TMP/blackhole.log" 2>&1 <<'PY' &
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(128)
held = []
while True:  # accept, hold, never read nor answer
    held.append(s.accept()[0])
PY
PIDS="$PIDS $!"
wait_until 10 "redis-cli -p $SPORT sentinel replicas m 2>/dev/null | grep -q '^$RPORT\$'" "the Sentinel to see the replica"
wait_until 10 "redis-cli -p $RPORT info replication | grep -q 'master_link_status:up'" "the replica to sync"
URL="redis+sentinel://127.0.0.1:$BPORT,127.0.0.1:$SPORT/m"
init_run $RUN --trainer quadratic --numel 1000 --shards 2 --workers 1 --seed 1
start_server s1 --metrics "127.0.0.1:$MPORT"
wait_until 15 "[ \$(grep -c 'connection established' '$TMP/server-s1.log') -ge 3 ]" "the shard-server's 3 Redis links"
wait_until 10 "curl -sf http://127.0.0.1:$MPORT/metrics > /dev/null" "the metrics endpoint"
python3 - "$PORT" "$RPORT" "$SPORT" "$MPORT" "$TMP/server-s1.log" "$TMP/sentinel.log" <<'PY' > "$TMP/check.log" 2>&1 || { cat "$TMP/check.log"; fail "the shard-server's loop waited for a Sentinel, or a failover was followed late"; }
import datetime, http.client, re, socket, subprocess, sys, time
master, replica, sentinel, mport, slog, sentlog = sys.argv[1:]

def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", port] + list(args), capture_output=True, text=True, timeout=5).stdout

def get_metrics():
    t = time.time()
    c = http.client.HTTPConnection("127.0.0.1", int(mport), timeout=10)
    c.request("GET", "/metrics")
    assert c.getresponse().status == 200
    c.close()
    return time.time() - t

def established_after(t):  # times of the shard-server's "connection established" lines after t
    out = []
    for line in open(slog):
        m = re.match(r"(\S+Z) .*connection established", line)
        if m:
            s = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
            if s > t:
                out.append(s)
    return out

# 1. requests while the links ask the Sentinels again
worst, back = 0.0, []
for k in range(4):
    before = len(established_after(0))
    t = time.time()
    killed = cli(master, "CLIENT", "KILL", "TYPE", "normal")
    for d in (0.1, 0.2, 0.3, 0.4):
        time.sleep(max(0.0, t + d - time.time()))
        worst = max(worst, get_metrics())
    end = time.time() + 5
    while len(established_after(0)) < before + 3 and time.time() < end:
        time.sleep(0.05)
    again = established_after(t)
    assert len(again) >= 3, "kill %d: %d links came back within 5 s" % (k, len(again))
    back.append(min(again) - t)
print("requests to the shard-server while its links asked the Sentinels: slowest %.3f s; links back %s s after each kill"
      % (worst, ", ".join("%.2f" % b for b in back)))
assert min(back) >= 0.45, "a link came back %.2f s after a kill: its query did not wait for the blackholed Sentinel" % min(back)
assert worst <= 0.4, "a request waited %.3f s while the links asked the Sentinels (the loop blocked)" % worst

# 2. a failover, announced
t = time.time()
r = cli(sentinel, "SENTINEL", "FAILOVER", "m")
assert "OK" in r, "SENTINEL FAILOVER: %r" % r
def sentinel_time(s):  # redis-sentinel's log time (UTC)
    return datetime.datetime.strptime(s, "%d %b %Y %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()
def first_announcement():
    for line in open(sentlog):
        m = re.search(r" (\d+ \w+ \d+ [\d:.]+) [#*] \+promoted-slave", line)
        if m and sentinel_time(m.group(1)) > t - 1:
            return sentinel_time(m.group(1))
    return None
end = time.time() + 15
while first_announcement() is None and time.time() < end:
    time.sleep(0.05)
promo = first_announcement()
assert promo is not None, "no +promoted-slave in the Sentinel's log within 15 s"
heard = None
while time.time() < promo + 5 and heard is None:
    for line in open(slog):
        m = re.match(r"(\S+Z) .*the Sentinels announce a new master, 127\.0\.0\.1:%s" % replica, line)
        if m:
            heard = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
    time.sleep(0.05)
assert heard is not None, "the shard-server did not log the announced master"
again = [s for s in established_after(promo - 0.5)]
end = time.time() + 5
while len(again) < 3 and time.time() < end:
    time.sleep(0.05)
    again = established_after(promo - 0.5)
assert len(again) >= 3, "%d links reconnected after the failover" % len(again)
print("failover: announced %.2f s after SENTINEL FAILOVER; the shard-server heard it %.3f s later, its 3 links were "
      "up on the new master %.3f s after the announcement" % (promo - t, heard - promo, sorted(again)[2] - promo))
assert heard - promo <= 0.5, "announcement heard %.2f s late" % (heard - promo)
assert sorted(again)[2] - promo <= 1.0, "links on the new master %.2f s after the announcement" % (sorted(again)[2] - promo)
PY
cat "$TMP/check.log"
