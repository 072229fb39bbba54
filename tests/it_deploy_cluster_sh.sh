#!/bin/sh
# it_deploy_cluster_sh.sh: deploy/local/cluster.sh up | init | status | down on this machine.
#  up (Redis only, no run yet) -> init (run created, 2 shard-servers + coordinator --http start) ->
#  a worker trains 3 rounds -> status shows processes and the run -> a kill -9'd shard-server is
#  restarted by `up` -> down stops every process it started -> up again: the run survived in the
#  AOF (same round, same digests) -> a worker of `up --workers 1` that finished its steps shows as exited
#  (not dead), and a later `up` leaves it alone -> down: nothing left running, the port is free -> up starts
#  it again. A second cluster asked for the first one's
#  Redis port refuses (it ran in the foreign Redis); `up` whose coordinator cannot listen fails with the
#  reason; `up --servers 2` after `up --servers 3` stops server3. No process it
#  starts has the Redis URL on its command line (it passes DL_REDIS_URL), and a worker started the
#  way the docs say (DL_REDIS_URL=$(cluster.sh url) bin/worker ...) trains.
. "$(dirname "$0")/lib.sh"
D=$TMP/cluster
CL="sh $ROOT/deploy/local/cluster.sh"
cleanup() {
  $CL down --dir "$D" >/dev/null 2>&1
  for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
  if [ -n "${KEEP_TMP:-}" ]; then echo "logs kept in $TMP"; else rm -rf "$TMP"; fi
}
pids_of_cluster() { cat "$D"/pids/*.pid 2>/dev/null | tr '\n' ' '; }
none_alive() { for p in $1; do alive "$p" && return 1; done; return 0; }
logs() { for f in "$D"/logs/*.log; do echo "--- $f"; tail -n 15 "$f"; done; }

$CL up --dir "$D" --port 0 --servers 2 --run clt --http 127.0.0.1:0 > "$TMP/up.log" 2>&1 || fail "cluster.sh up"
grep -q "does not exist yet" "$TMP/up.log" || fail "up without a run should start Redis only: $(cat "$TMP/up.log")"
URL=$($CL url --dir "$D"); PORT_=${URL##*:}
RCLI="redis-cli -p $PORT_"
$RCLI ping | grep -q PONG || fail "Redis of cluster.sh does not answer"
[ "$($RCLI config get appendfsync | tail -n 1)" = always ] || fail "cluster.sh Redis does not use deploy/redis/redis.conf"
# another cluster folder on this port: a Redis of someone else answers there. It said "Redis on
# 127.0.0.1:P" and exit 0, and used that Redis (its redis-server --daemonize returned before it failed to bind)
if $CL up --dir "$TMP/cluster2" --port "$PORT_" > "$TMP/up-foreign.log" 2>&1; then
  fail "up on a port another Redis has: exit 0: $(cat "$TMP/up-foreign.log")"
fi
grep -q "port $PORT_ is in use (another Redis?): choose --port" "$TMP/up-foreign.log" ||
  fail "up on a port another Redis has: $(cat "$TMP/up-foreign.log")"
$RCLI ping | grep -q PONG || fail "the first cluster's Redis does not answer after the second's up"

$CL init --dir "$D" -- --trainer quadratic --numel 20000 --shards 4 --workers 1 > "$TMP/init.log" 2>&1 || { logs; fail "cluster.sh init"; }
grep -q "2 shard-server(s)" "$TMP/init.log" || { logs; fail "init did not bring up 2 shard-servers: $(cat "$TMP/init.log")"; }
dash=$(grep -o 'http://[^ )]*' "$TMP/init.log" | head -n 1)
[ -n "$dash" ] || fail "no dashboard URL in: $(cat "$TMP/init.log")"
python3 -c "import urllib.request,sys; sys.exit(0 if b'\"servers\"' in urllib.request.urlopen('${dash%/dashboard}/status', timeout=5).read() else 1)" \
  || fail "GET /status of the coordinator failed"

for p in $(pids_of_cluster); do
  tr '\0' ' ' < "/proc/$p/cmdline" | grep -q 'redis://' && fail "a Redis URL on a command line: $(tr '\0' ' ' < "/proc/$p/cmdline")"
done
RUN=clt
DL_REDIS_URL=$($CL url --dir "$D") bin/worker --run clt --worker-id w1 --sync-every 20 --steps 60 --quiet > "$TMP/worker.log" 2>&1 \
  || { logs; fail "worker failed"; }
[ "$($RCLI HGET "dl:{clt}:state" round:0)" = 3 ] || fail "expected round 3 after 60 steps at H=20"
[ "$($RCLI HGET "dl:{clt}:state" commits)" = 12 ] || fail "expected 12 commits"

$CL status --dir "$D" > "$TMP/status.log" 2>&1 || fail "cluster.sh status: $(cat "$TMP/status.log")"
for want in "redis .*running" "server1 .*running" "server2 .*running" "coordinator .*running" "open round 3" "commits 12"; do
  grep -q "$want" "$TMP/status.log" || fail "status does not show '$want': $(cat "$TMP/status.log")"
done
say "up/init/worker/status ok"

# repair: a dead shard-server is restarted by `up`
old=$(cat "$D/pids/server1.pid")
kill -9 "$old"
wait_until 5 '! alive $old' "server1 to die"
$CL status --dir "$D" | grep -q "server1 .*dead" || fail "status does not show the dead server1"
$CL up --dir "$D" > "$TMP/up2.log" 2>&1 || fail "cluster.sh up (repair)"
new=$(cat "$D/pids/server1.pid")
[ "$new" != "$old" ] && alive "$new" || fail "up did not restart server1"

# fewer servers: up --servers 2 after up --servers 3 stops server3 (TERM: it hands its leases over) and
# says so (it printed "2 shard-server(s)" and left server3 running)
$CL up --dir "$D" --servers 3 > "$TMP/up-s3.log" 2>&1 && grep -q "3 shard-server(s)" "$TMP/up-s3.log" ||
  fail "up --servers 3: $(cat "$TMP/up-s3.log")"
s3=$(cat "$D/pids/server3.pid")
$CL up --dir "$D" --servers 2 > "$TMP/up-s2.log" 2>&1 || fail "up --servers 2: $(cat "$TMP/up-s2.log")"
alive "$s3" && fail "server3 still runs after up --servers 2: $(cat "$TMP/up-s2.log")"
grep -q "stopped server3" "$TMP/up-s2.log" || fail "up --servers 2 does not say it stopped server3: $(cat "$TMP/up-s2.log")"
[ -f "$D/pids/server3.pid" ] && fail "server3's pid file is left after up --servers 2"
# a coordinator that cannot start (its --http port taken, here by Redis) fails up with its reason (it said
# "run 'clt': 2 shard-server(s), coordinator" and exit 0 while the coordinator had exited)
cp=$(cat "$D/pids/coordinator.pid"); kill -TERM "$cp"
wait_until 5 '! alive $cp' "the coordinator to stop"
if $CL up --dir "$D" --http "127.0.0.1:$PORT_" > "$TMP/up-busy.log" 2>&1; then
  fail "up whose coordinator cannot listen: exit 0: $(cat "$TMP/up-busy.log")"
fi
grep -q "coordinator.*cannot listen on 127.0.0.1:$PORT_" "$TMP/up-busy.log" ||
  fail "up whose coordinator cannot listen does not say why: $(cat "$TMP/up-busy.log")"
$CL up --dir "$D" --http 127.0.0.1:0 > "$TMP/up-http.log" 2>&1 || fail "up --http 127.0.0.1:0: $(cat "$TMP/up-http.log")"

all=$(pids_of_cluster)
[ "$(echo $all | wc -w)" -eq 4 ] || fail "expected 4 pid files (redis, 2 servers, coordinator), got: $all"
digests=$(shard_digests clt)
t0=$(date +%s)
$CL down --dir "$D" > "$TMP/down.log" 2>&1 || fail "cluster.sh down"
wait_until 3 'none_alive "$all"' "every process of the cluster to exit"
say "down in $(( $(date +%s) - t0 ))s: nothing left running"
grep -q killed "$TMP/down.log" && fail "down had to KILL: $(cat "$TMP/down.log")"
$RCLI ping >/dev/null 2>&1 && fail "Redis still answers after down"

# the run survives down/up (AOF)
$CL up --dir "$D" > "$TMP/up3.log" 2>&1 || fail "cluster.sh up after down"
grep -q "2 shard-server(s)" "$TMP/up3.log" || fail "up after down did not start the servers: $(cat "$TMP/up3.log")"
[ "$($RCLI HGET "dl:{clt}:state" round:0)" = 3 ] || fail "the run did not survive down/up"
[ "$(shard_digests clt)" = "$digests" ] || fail "digests changed across down/up"
# a worker started by up --workers that finished its steps shows as exited, not dead
$CL up --dir "$D" --workers 1 --worker-args "--sync-every 20 --steps 20" > "$TMP/up4.log" 2>&1 || fail "cluster.sh up --workers 1"
wp=$(cat "$D/pids/worker-w1.pid")
wait_until 20 '! alive $wp' "worker w1 of up --workers to finish its 20 steps"
$CL status --dir "$D" > "$TMP/status2.log" 2>&1
grep -q "worker-w1 .*exited: stopped after 20 steps (done)" "$TMP/status2.log" ||
  fail "status of a worker that finished: $(cat "$TMP/status2.log")"
# ... and a later `up` (to change the servers; --workers 1 is remembered) does not start it again to train
# its 20 steps once more (it did); `down` then `up` does
$CL up --dir "$D" > "$TMP/up5.log" 2>&1 || fail "cluster.sh up after w1 finished: $(cat "$TMP/up5.log")"
grep -q "worker-w1 stopped after 20 steps (done): not started again" "$TMP/up5.log" ||
  fail "up after w1 finished does not say it leaves w1 alone: $(cat "$TMP/up5.log")"
[ "$(cat "$D/pids/worker-w1.pid")" = "$wp" ] || fail "up started the finished worker w1 again"
all=$(pids_of_cluster)
$CL down --dir "$D" > "$TMP/down2.log" 2>&1 || fail "cluster.sh down (2)"
wait_until 3 'none_alive "$all"' "every process of the cluster to exit"
ls "$D"/pids/*.pid >/dev/null 2>&1 && fail "pid files left after down"
$CL up --dir "$D" > "$TMP/up6.log" 2>&1 || fail "cluster.sh up after down (2)"
wp2=$(cat "$D/pids/worker-w1.pid" 2>/dev/null)
[ -n "$wp2" ] && [ "$wp2" != "$wp" ] || fail "up after down did not start w1 again: $(cat "$TMP/up6.log")"
all=$(pids_of_cluster)
$CL down --dir "$D" > "$TMP/down3.log" 2>&1 || fail "cluster.sh down (3)"
wait_until 12 'none_alive "$all"' "every process of the cluster to exit (3)"
say "the run survived down/up; down again: nothing left"
echo "PASS it_deploy_cluster_sh"
