#!/bin/sh
# it_redis_replica_url.sh: processes pointed at a read-only replica of the run's Redis instead of its master (a
# plain redis:// URL: no Sentinels to ask for the master). A worker given --connect-timeout 0 exits at start saying
# the server is a read-only replica, which its master is, and what to give instead; one given a longer timeout (C,
# and Python's connect_timeout) says the same and waits for up to its timeout, as for a Redis that does not answer,
# and trains once the replica is promoted (before, both exited at once whatever the timeout: a worker pointed at a
# node about to be promoted could not wait for it, where a shard-server did). A shard-server stays up, says the same, and
# tries again every 5 s; `coordinator status` (read-only: it works on a replica) warns that it shows a replica
# and names the master; when the replica is made a master (REPLICAOF NO ONE) it serves from it by itself.
# Before, the shard-server's four links reconnected at once after every READONLY (the connect reset their
# backoff), about ten times a second each, each time saying "finding the master again", which a plain URL
# never finds (some 450 lines in 15 s), the worker's message named no master and nothing to do, and status
# showed the replica as "master" without a word.
# test: light (it waits for processes more than it computes)
. "$(dirname "$0")/lib.sh"
start_redis
RUN=rep
init_run $RUN --trainer quadratic --numel 2000 --shards 2 --workers 1
MASTER=$PORT
RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir "$TMP" \
  --logfile "$TMP/replica.log" --pidfile "$TMP/replica.pid" --replicaof 127.0.0.1 "$MASTER" > /dev/null || fail "replica"
wait_until 10 "[ -s $TMP/replica.pid ]" "the replica's pid file"
PIDS="$PIDS $(cat "$TMP/replica.pid")"
wait_until 20 "[ \"\$($REDIS_CLI -p $RPORT EXISTS 'dl:{$RUN}:config')\" = 1 ]" "the replica to have the run"
URL=redis://127.0.0.1:$RPORT

start_worker w1 --sync-every 5 --steps 20 --connect-timeout 0
wait_until 20 "! alive $WRK_w1" "the worker pointed at the replica to exit"
wait "$WRK_w1" && fail "the worker pointed at a replica exited 0"
grep -q "read-only replica: point the URL at the master.*its master is 127.0.0.1:$MASTER" "$TMP/worker-w1.log" ||
  fail "the worker did not say it was given a replica, and which master: $(tail -n 2 "$TMP/worker-w1.log")"

# (a worker that waits: says what is wrong, with the master, and for how long it tries)
start_worker w2 --sync-every 5 --steps 20 --connect-timeout 60
wait_until 20 "grep -q 'refuses our registration for now: READONLY.*its master is 127.0.0.1:$MASTER; trying again for up to' $TMP/worker-w2.log" \
  "the worker given --connect-timeout 60 to say it waits for the replica"
HAVE_TORCH=0
if $PYTHON -c 'import torch' 2>/dev/null; then
  HAVE_TORCH=1
  $PYTHON tests/python/replica_wait.py "$URL" $RUN p0 0 > "$TMP/py-p0.log" 2>&1 && fail "a Python worker with connect_timeout=0 joined through a replica"
  grep -q "raised DiLoCoError: .*READONLY.*read-only replica: point the URL at the master.*its master is 127.0.0.1:$MASTER" "$TMP/py-p0.log" ||
    fail "the Python worker with connect_timeout=0 did not say it was given a replica: $(cat "$TMP/py-p0.log")"
  $PYTHON tests/python/replica_wait.py "$URL" $RUN p1 60 > "$TMP/py-p1.log" 2>&1 &
  PY_P1=$!
  PIDS="$PIDS $PY_P1"
fi

start_server s1
wait_until 20 "grep -q 'READONLY' $TMP/server-s1.log" "the shard-server to be refused by the replica"
sleep 6 # (a rate: how often it says so and reconnects)
n=$(grep -c READONLY "$TMP/server-s1.log")
[ "$n" -le 30 ] || fail "the shard-server said READONLY $n times in about 6 s (it reconnects without backoff)"
grep READONLY "$TMP/server-s1.log" | head -n 1 | grep -q "point the URL at the master" ||
  fail "the shard-server did not say what to do: $(grep READONLY "$TMP/server-s1.log" | head -n 1)"
alive "$SRV_s1" || fail "the shard-server exited"
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status.txt" 2>&1 || fail "status from the replica: $(cat "$TMP/status.txt")"
grep -q "WARNING: this Redis is a read-only replica of 127.0.0.1:$MASTER" "$TMP/status.txt" ||
  fail "status from the replica did not warn that it is one: $(tail -n 2 "$TMP/status.txt")"
grep -q "redis: single, replica 127.0.0.1:$RPORT of master 127.0.0.1:$MASTER" "$TMP/status.txt" ||
  fail "status from the replica did not name it and its master: $(grep '^redis:' "$TMP/status.txt")"
say "$n READONLY lines in 6 s, each saying what to do; status warns; promoting the replica"

alive "$WRK_w2" || fail "the worker given --connect-timeout 60 exited before the replica was promoted"
$REDIS_CLI -p "$RPORT" REPLICAOF NO ONE > /dev/null
wait_until 30 "[ \"\$($REDIS_CLI -p $RPORT HGET 'dl:{$RUN}:shards' 0:owner)\" = s1 ]" \
  "the shard-server to lease shard 0 from the promoted replica"
wait_until 20 "grep -q 'shard 0: loaded version 0' $TMP/server-s1.log" "the shard-server to serve shard 0"
wait_until 60 "! alive $WRK_w2" "the waiting worker to train its steps once the replica is promoted"
wait "$WRK_w2" || fail "the waiting worker failed after the promotion: $(tail -n 3 "$TMP/worker-w2.log")"
grep -q "registered as w2" "$TMP/worker-w2.log" || fail "the waiting worker never registered"
if [ $HAVE_TORCH = 1 ]; then
  wait "$PY_P1" || fail "the waiting Python worker failed: $(cat "$TMP/py-p1.log")"
  grep -q "^done" "$TMP/py-p1.log" || fail "the waiting Python worker did not finish: $(cat "$TMP/py-p1.log")"
fi
say "OK: the shard-server serves from the promoted replica, and the workers that waited for it trained"

# A replica that has not copied its master yet (here: a master nobody runs) has no function library: said as such,
# not "run `coordinator init` first", which sent an operator to make a run that existed
LPORT=$(free_port)
mkdir -p "$TMP/lone"
redis-server --port "$LPORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir "$TMP/lone" \
  --logfile "$TMP/lone.log" --pidfile "$TMP/lone.pid" --replicaof 127.0.0.1 "$(free_port)" > /dev/null || fail "lone replica"
wait_until 10 "[ -s $TMP/lone.pid ]" "the lone replica's pid file"
PIDS="$PIDS $(cat "$TMP/lone.pid")"
bin/coordinator status --redis "redis://127.0.0.1:$LPORT" --run $RUN > "$TMP/lone-status.txt" 2>&1 && fail "status of an empty replica succeeded"
grep -q "not loaded in this Redis (ERR Function not found): this Redis is a replica of 127.0.0.1:[0-9]*, its link to it 'connect'.*point the URL at the master" \
  "$TMP/lone-status.txt" || fail "status of a replica not in sync did not say so: $(cat "$TMP/lone-status.txt")"
say "OK: a replica not in sync yet is said to be one"
