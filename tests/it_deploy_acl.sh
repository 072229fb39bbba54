#!/bin/sh
# it_deploy_acl.sh: deploy/redis/redis.conf + deploy/redis/users.acl (least-privilege ACL users).
#  A. Redis runs with our redis.conf (AOF, appendfsync always) and users.acl; a run is created by the
#     operator user, two shard-servers run as shard-server, three quadratic workers as worker; one
#     worker is kill -9'd mid-run (eviction paths run inside the functions the others call); the two
#     others finish their rounds; `coordinator serve` (operator) reaps; `coordinator status` works as
#     viewer; then an async run (dl_submit). Redis's ACL LOG stays empty: no process ever needed a
#     command or key it was not given.
#  B. What each user is refused: worker SET/DEL/FUNCTION LOAD, writes to the servers hash, posing as a
#     shard-server through a function; shard-server FUNCTION FLUSH/LOAD, SET of a control key;
#     operator FUNCTION FLUSH, FLUSHALL, CONFIG, keys outside dl:*; viewer writes; no-auth clients.
#     Every refusal leaves the run unchanged.
. "$(dirname "$0")/lib.sh"
RUN=acl
ACL="$ROOT/deploy/redis/users.acl"
P=$(free_port)
# The test passwords of users.acl (docs/deploy.md, "Passwords": replace them for real use).
url() { echo "redis://$1:$1-test-password@127.0.0.1:$P"; }
as() { u=$1; shift; redis-cli -p "$P" --user "$u" --pass "$u-test-password" --no-auth-warning "$@" 2>&1; }
cleanup() {
  for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
  as admin shutdown nosave >/dev/null 2>&1
  rpid=$(cat "$TMP/redis.pid" 2>/dev/null) && kill -9 "$rpid" 2>/dev/null
  if [ -n "${KEEP_TMP:-}" ]; then echo "logs kept in $TMP"; else rm -rf "$TMP"; fi
}
refused() { # WHAT USER CMD...: the command must fail with an ACL error
  what=$1; shift
  out=$(as "$@")
  echo "$out" | grep -q "NOPERM\|can't run this command\|can't access\|no permissions" || fail "$what: expected an ACL refusal, got: $out"
}

redis-server "$ROOT/deploy/redis/redis.conf" --port "$P" --dir "$TMP" --aclfile "$ACL" --daemonize yes \
  --logfile "$TMP/redis.log" --pidfile "$TMP/redis.pid" >/dev/null || fail "redis-server did not start with deploy/redis/redis.conf"
wait_until 5 'as admin ping | grep -q PONG' "redis-server to answer PING as admin"
[ "$(as admin config get appendfsync | tail -n 1)" = always ] || fail "redis.conf: appendfsync is not always"
[ "$(as admin config get maxmemory-policy | tail -n 1)" = noeviction ] || fail "redis.conf: not noeviction"
redis-cli -p "$P" ping 2>&1 | grep -q NOAUTH || fail "an unauthenticated client was not refused (default user must be off)"

# ---- A: a run with every process under its own user
URL=$(url operator)
init_run $RUN --trainer quadratic --numel 40000 --shards 4 --workers 3 --heartbeat-timeout 2
URL=$(url shard-server)
start_server s1 --lease-ttl-ms 2000
start_server s2 --lease-ttl-ms 2000
URL=$(url operator)
bin/coordinator serve --redis "$URL" --run $RUN --print-every 1 > "$TMP/coordinator.log" 2>&1 & PIDS="$PIDS $!"
URL=$(url worker)
for w in w1 w2 w3; do start_worker $w --sync-every 20 --steps 160 --heartbeat-interval 0.5 --step-delay-ms 5; done
round() { as viewer HGET "dl:{$RUN}:state" round:0; }
wait_until 25 '[ "$(round)" -ge 2 ]' "two rounds with three workers"
kill -9 "$WRK_w3"
for w in w1 w2; do eval "pid=\$WRK_$w"; wait "$pid" || fail "worker $w exited with status $?"; done
r=$(round)
[ "$r" -ge 8 ] || fail "expected 8 rounds, the run is at round $r"
[ "$(as viewer HGET "dl:{$RUN}:state" deaths)" -ge 1 ] || fail "the killed worker was never evicted"
[ "$(as viewer HGET "dl:{$RUN}:state" commits)" -ge 32 ] || fail "expected >= 32 commits (8 rounds x 4 shards)"
as viewer XRANGE "dl:{$RUN}:events" - + | grep -q '^evicted$' || fail "no eviction event"
bin/coordinator status --redis "$(url viewer)" --run $RUN > "$TMP/status.log" 2>&1 || fail "coordinator status as viewer"
grep -q s1 "$TMP/status.log" || fail "coordinator status as viewer does not show the shard-servers"
denials=$(as admin ACL LOG 100 | grep -c '^reason$')
[ "$denials" -eq 0 ] || { as admin ACL LOG 100; fail "the processes hit $denials ACL denials (see ACL LOG above)"; }
say "A: $r rounds, one worker evicted, no ACL denial for worker, shard-server, operator or viewer"

# ---- A2: an async run (dl_submit: subs keys, the shards hash) under the same users
RUN=acla
URL=$(url operator); init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 2 --async
URL=$(url shard-server); start_server a1 --lease-ttl-ms 2000
URL=$(url worker)
for w in v1 v2; do start_worker $w --sync-every 20 --steps 100 --heartbeat-interval 0.5 --step-delay-ms 2; done
for w in v1 v2; do eval "pid=\$WRK_$w"; wait "$pid" || fail "async worker $w exited with status $?"; done
[ "$(as viewer HGET "dl:{$RUN}:shards" 0:version)" -ge 8 ] || fail "async: expected 10 submissions applied to shard 0"
denials=$(as admin ACL LOG 100 | grep -c '^reason$')
[ "$denials" -eq 0 ] || { as admin ACL LOG 100; fail "the async run hit $denials ACL denials (see ACL LOG above)"; }
say "A2: async run, shard 0 at version $(as viewer HGET "dl:{$RUN}:shards" 0:version), no ACL denial"
RUN=acl

# ---- B: refusals, and the run is unchanged by them (nothing else runs now: servers beat every second)
for p in $PIDS; do kill -9 "$p" 2>/dev/null; done; PIDS=""
snapshot() {
  for k in state shards servers server_beats workers heartbeats config; do echo "$k: $(as viewer DUMP "dl:{$RUN}:$k" | od -An -tx1 | tr -d ' \n')"; done
  echo "events: $(as viewer XLEN "dl:{$RUN}:events")"
}
before=$(snapshot)
refused "worker SET control key"       worker SET "dl:{$RUN}:state" x
refused "worker DEL control key"       worker DEL "dl:{$RUN}:state"
refused "worker FUNCTION LOAD"         worker FUNCTION LOAD REPLACE "#!lua name=evil
redis.register_function('x', function() return 1 end)"
refused "worker FUNCTION FLUSH"        worker FUNCTION FLUSH
refused "worker writes servers hash"   worker HSET "dl:{$RUN}:servers" evil x
refused "worker reads a blob"          worker GET "dl:{$RUN:0}:snap:0:0"
refused "worker FLUSHALL"              worker FLUSHALL
refused "worker poses as server"       worker FCALL dl_server_beat 1 "dl:{$RUN}:config" evil 127.0.0.1:1 5000 1
refused "worker key of another app"    worker HGET "other" x
refused "server FUNCTION FLUSH"        shard-server FUNCTION FLUSH
refused "server FUNCTION LOAD"         shard-server FUNCTION LOAD REPLACE "#!lua name=evil
redis.register_function('x', function() return 1 end)"
refused "server SET control key"       shard-server SET "dl:{$RUN}:state" x
refused "server DEL config"            shard-server DEL "dl:{$RUN}:config"
refused "server SET outside dl:"       shard-server SET foo bar
refused "server FLUSHDB"               shard-server FLUSHDB
refused "operator FUNCTION FLUSH"      operator FUNCTION FLUSH
refused "operator FLUSHALL"            operator FLUSHALL
refused "operator CONFIG SET"          operator CONFIG SET appendfsync no
refused "operator SET outside dl:"     operator SET foo bar
refused "operator SHUTDOWN"            operator SHUTDOWN NOSAVE
refused "viewer KEYS"                  viewer KEYS "*"
refused "viewer HSET"                  viewer HSET "dl:{$RUN}:state" outer_lr 9
refused "viewer dl_set via FCALL"      viewer FCALL dl_set 1 "dl:{$RUN}:config" outer_lr 9
refused "viewer dl_shutdown via FCALL" viewer FCALL dl_shutdown 1 "dl:{$RUN}:config"
after=$(snapshot)
[ "$before" = "$after" ] || { echo "$before" > "$TMP/before.log"; echo "$after" > "$TMP/after.log"; fail "a refused command changed the run"; }
as viewer HEXISTS "dl:{$RUN}:servers" evil | grep -q 0 || fail "the worker registered a fake shard-server"
as admin FUNCTION LIST | grep -q diloco || fail "the function library is gone"
[ "$(as operator HGET "dl:{$RUN}:state" status)" = running ] || fail "operator cannot read the run"
say "B: every refusal refused, run unchanged"
echo "PASS it_deploy_acl"
