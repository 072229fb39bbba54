#!/bin/sh
# it_deploy_acl.sh: deploy/redis/redis.conf + deploy/redis/users.acl (least-privilege ACL users).
#  A. Redis runs with our redis.conf (AOF, appendfsync always) and users.acl; a run is created by the
#     operator user, two shard-servers run as shard-server, three quadratic workers as worker; one
#     worker is kill -9'd mid-run (eviction paths run inside the functions the others call); the two
#     others finish their rounds; `coordinator serve` (operator) reaps; `coordinator status` works as
#     viewer; an evaluator runs as evaluator (snapshot and log blobs read, dl:{R}:evals written);
#     then an async run (dl_submit). Redis's ACL LOG stays empty: no process ever needed a
#     command or key it was not given. The passwords stay out of ps: s1 and w1 read the URL from
#     --redis-file, s2, w2 and the coordinator from DL_REDIS_URL; none of their command lines
#     (/proc/PID/cmdline) holds a password, while w3's (--redis URL) does.
#  B. What each user is refused: worker SET/DEL/FUNCTION LOAD, writes to the servers hash, posing as a
#     shard-server through a function; shard-server FUNCTION FLUSH/LOAD, SET of a control key;
#     operator FUNCTION FLUSH, FLUSHALL, CONFIG, keys outside dl:*; viewer writes; no-auth clients.
#     The operator's functions: a worker's or shard-server's FCALL dl_set (outer_lr, target_workers),
#     dl_shutdown, dl_kick (of a live member), dl_init (a new run), dl_repair and dl_unmark_corrupt (with
#     arguments that pass their checks) fail inside the function with an ACL
#     error (Redis checks the caller's ACL on every redis.call; dl:{R}:tunables and dl:{R}:config are
#     read-only for them), and so do their direct writes to those hashes. Every refusal leaves the run
#     unchanged (DUMP of every control key before and after, the event count); ACL LOG shows the
#     refusals happened in Lua, on dl:{R}:tunables and dl:{R}:config.
#  C. The operator can: dl_set outer_lr, dl_kick, dl_shutdown take effect, and a worker then sees the
#     shutdown; `coordinator repair` (function library load, verification, dl_unmark_corrupt) runs; the
#     viewer's `repair --dry-run` verifies (no library load: this release's is there), its repair is refused
#     saying which user may.
#  Without a password in the URL, every command (coordinator init, repair, status, checkpoint save,
#  shard-server, worker) exits 1 saying NOAUTH, and how to log in, in the URL's own scheme (unix:// for the
#  socket), naming the USER:PASSWORD@ form (this ACL has no default user); a password without its user
#  (WRONGPASS) names it too.
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

redis-server "$ROOT/deploy/redis/redis.conf" --port "$P" --unixsocket "$TMP/redis.sock" --dir "$TMP" --aclfile "$ACL" --daemonize yes \
  --logfile "$TMP/redis.log" --pidfile "$TMP/redis.pid" >/dev/null || fail "redis-server did not start with deploy/redis/redis.conf"
wait_until 5 'as admin ping | grep -q PONG' "redis-server to answer PING as admin"
[ "$(as admin config get appendfsync | tail -n 1)" = always ] || fail "redis.conf: appendfsync is not always"
[ "$(as admin config get maxmemory-policy | tail -n 1)" = noeviction ] || fail "redis.conf: not noeviction"
redis-cli -p "$P" ping 2>&1 | grep -q NOAUTH || fail "an unauthenticated client was not refused (default user must be off)"
# every binary, given a URL without a password, says NOAUTH (init and repair said "ERR Protocol error:
# unauthenticated bulk length": their first command was a large FUNCTION LOAD)
NOPASS="redis://127.0.0.1:$P"
for cmd in "coordinator init --run x --trainer quadratic --numel 100" "coordinator repair --run x" \
  "coordinator status --run x" "coordinator checkpoint save --run x --out $TMP/x.st" \
  "shard-server --run x" "worker --run x --steps 1"; do
  timeout 20 bin/$cmd --redis "$NOPASS" > "$TMP/noauth.txt" 2>&1; rc=$?
  [ $rc = 1 ] && grep -q "NOAUTH" "$TMP/noauth.txt" && ! grep -q "Protocol error" "$TMP/noauth.txt" &&
    grep -q "redis://USER:PASSWORD@127.0.0.1:$P/0 for an ACL user" "$TMP/noauth.txt" ||
    fail "bin/$cmd without a password: exit $rc, $(cat "$TMP/noauth.txt")"
done
# the hint is in the URL's own scheme (it said redis://:PASSWORD@HOST:PORT, the default user's form, which this
# ACL turns off): a unix socket's, and a password without a user
bin/coordinator status --redis "unix://$TMP/redis.sock" --run x > "$TMP/noauth.txt" 2>&1
grep -q "NOAUTH" "$TMP/noauth.txt" && grep -q "unix://USER:PASSWORD@$TMP/redis.sock?db=0 for an ACL user" "$TMP/noauth.txt" ||
  fail "unix socket without a password: $(cat "$TMP/noauth.txt")"
bin/coordinator status --redis "redis://:operator-test-password@127.0.0.1:$P" --run x > "$TMP/noauth.txt" 2>&1
grep -q "WRONGPASS" "$TMP/noauth.txt" && grep -q "redis://USER:PASSWORD@127.0.0.1:$P/0 for an ACL user" "$TMP/noauth.txt" ||
  fail "a password without its user: $(cat "$TMP/noauth.txt")"
as admin ACL LOG RESET > /dev/null # (that refused login is in it: A counts the denials of the processes)
say "without a password every command says NOAUTH"

# ---- A: a run with every process under its own user
URL=$(url operator)
init_run $RUN --trainer quadratic --numel 40000 --shards 4 --workers 3 --heartbeat-timeout 2
url shard-server > "$TMP/server.url"; url worker > "$TMP/worker.url"; chmod 600 "$TMP/server.url" "$TMP/worker.url"
bin/shard-server --redis-file "$TMP/server.url" --run $RUN --id s1 --lease-ttl-ms 2000 > "$TMP/server-s1.log" 2>&1 &
SRV_s1=$!; PIDS="$PIDS $!"
DL_REDIS_URL=$(url shard-server) bin/shard-server --run $RUN --id s2 --lease-ttl-ms 2000 > "$TMP/server-s2.log" 2>&1 &
SRV_s2=$!; PIDS="$PIDS $!"
DL_REDIS_URL=$(url operator) bin/coordinator serve --run $RUN --print-every 1 > "$TMP/coordinator.log" 2>&1 &
COORD=$!; PIDS="$PIDS $!"
wflags="--run $RUN --sync-every 20 --steps 160 --heartbeat-interval 0.5 --step-delay-ms 5 --quiet"
bin/worker --redis-file "$TMP/worker.url" --worker-id w1 --log "$TMP/w1.jsonl" $wflags > "$TMP/worker-w1.log" 2>&1 &
WRK_w1=$!; PIDS="$PIDS $!"
DL_REDIS_URL=$(url worker) bin/worker --worker-id w2 --log "$TMP/w2.jsonl" $wflags > "$TMP/worker-w2.log" 2>&1 &
WRK_w2=$!; PIDS="$PIDS $!"
URL=$(url worker)
start_worker w3 --sync-every 20 --steps 160 --heartbeat-interval 0.5 --step-delay-ms 5
DL_REDIS_URL=$(url evaluator) bin/worker --run $RUN --evaluate-every 2 > "$TMP/evaluator.log" 2>&1 &
EVAL=$!; PIDS="$PIDS $!"
round() { as viewer HGET "dl:{$RUN}:state" round:0; }
wait_until 25 '[ "$(round)" -ge 2 ]' "two rounds with three workers"
cmdline() { tr '\0' ' ' < "/proc/$1/cmdline"; }
for p in $SRV_s1 $SRV_s2 $COORD $WRK_w1 $WRK_w2; do
  cmdline "$p" | grep -q 'test-password' && fail "a password is on a command line: $(cmdline "$p")"
done
cmdline "$WRK_w3" | grep -q 'worker-test-password' || fail "the ps check is blind: w3's --redis URL not seen in $(cmdline "$WRK_w3")"
say "A: no password in ps for the servers, the coordinator and the workers given --redis-file or DL_REDIS_URL"
kill -9 "$WRK_w3"
wait_workers w1 w2
r=$(round)
[ "$r" -ge 8 ] || fail "expected 8 rounds, the run is at round $r"
[ "$(as viewer HGET "dl:{$RUN}:state" deaths)" -ge 1 ] || fail "the killed worker was never evicted"
[ "$(as viewer HGET "dl:{$RUN}:state" commits)" -ge 32 ] || fail "expected >= 32 commits (8 rounds x 4 shards)"
as viewer XRANGE "dl:{$RUN}:events" - + | grep -q '^evicted$' || fail "no eviction event"
bin/coordinator status --redis "$(url viewer)" --run $RUN > "$TMP/status.log" 2>&1 || fail "coordinator status as viewer"
grep -q s1 "$TMP/status.log" || fail "coordinator status as viewer does not show the shard-servers"
v=$(as viewer HGET "dl:{$RUN}:shards" 0:version)
wait_until 20 "as viewer XREVRANGE 'dl:{$RUN}:evals' + - COUNT 1 | grep -q '^$v-1\$'" "the evaluator's entry for version $v"
kill "$EVAL"
denials=$(as admin ACL LOG 100 | grep -c '^reason$')
[ "$denials" -eq 0 ] || { as admin ACL LOG 100; fail "the processes hit $denials ACL denials (see ACL LOG above)"; }
say "A: $r rounds, one worker evicted, $(as viewer XLEN "dl:{$RUN}:evals") evaluations, no ACL denial for worker, shard-server, operator, evaluator or viewer"

# ---- A2: an async run (dl_submit: subs keys, the shards hash) under the same users
RUN=acla
URL=$(url operator); init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 2 --async
URL=$(url shard-server); start_server a1 --lease-ttl-ms 2000
URL=$(url worker)
for w in v1 v2; do start_worker $w --sync-every 20 --steps 100 --heartbeat-interval 0.5 --step-delay-ms 2; done
wait_workers v1 v2
[ "$(as viewer HGET "dl:{$RUN}:shards" 0:version)" -ge 8 ] || fail "async: expected 10 submissions applied to shard 0"
denials=$(as admin ACL LOG 100 | grep -c '^reason$')
[ "$denials" -eq 0 ] || { as admin ACL LOG 100; fail "the async run hit $denials ACL denials (see ACL LOG above)"; }
say "A2: async run, shard 0 at version $(as viewer HGET "dl:{$RUN}:shards" 0:version), no ACL denial"
RUN=acl

# ---- B: refusals, and the run is unchanged by them (nothing else runs now: servers beat every second)
for p in $PIDS; do kill -9 "$p" 2>/dev/null; done; PIDS=""
CONF="dl:{$RUN}:config"
# a live member to try to kick: registered by the worker user (allowed), never evicted (operator's
# dl_set heartbeat_timeout_ms 0: the operator may change the run's settings)
[ "$(as operator FCALL dl_set 1 "$CONF" heartbeat_timeout_ms 0)" = OK ] || fail "operator dl_set heartbeat_timeout_ms"
as worker FCALL dl_register 1 "$CONF" victim host 20 | head -n 1 | grep -q '^[0-9]' || fail "worker dl_register"
# a corrupt mark to try to clear (as `coordinator repair` would, with dl_unmark_corrupt), and the
# arguments of a dl_repair that would pass its checks (every shard as it is now, a version above them)
as admin HSET "dl:{$RUN}:shards" 0:corrupt "dl:{$RUN:0}:log:1:1" 0:corrupt_reason test > /dev/null
repair_args="rollback test 1000000 4" # (quoted for eval: a shard's log may be empty)
for k in 0 1 2 3; do
  for f in version snap log; do repair_args="$repair_args '$(as viewer HGET "dl:{$RUN}:shards" $k:$f)'"; done
  repair_args="$repair_args 999.0 0000000000000000"
done
as admin ACL LOG RESET > /dev/null
snapshot() {
  for k in state tunables shards servers server_beats workers heartbeats config; do echo "$k: $(as viewer DUMP "dl:{$RUN}:$k" | od -An -tx1 | tr -d ' \n')"; done
  echo "events: $(as viewer XLEN "dl:{$RUN}:events")"
}
before=$(snapshot)
lr0=$(as viewer HGET "dl:{$RUN}:tunables" outer_lr)
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
refused "evaluator HSET tunables"       evaluator HSET "dl:{$RUN}:tunables" outer_lr 9
refused "evaluator XADD events"         evaluator XADD "dl:{$RUN}:events" '*' type fake
refused "evaluator SET snapshot"        evaluator SET "dl:{$RUN:0}:snap:0:1" x
refused "evaluator dl_set via FCALL"    evaluator FCALL dl_set 1 "dl:{$RUN}:config" outer_lr 9
refused "viewer dl_set via FCALL"      viewer FCALL dl_set 1 "dl:{$RUN}:config" outer_lr 9
refused "viewer dl_shutdown via FCALL" viewer FCALL dl_shutdown 1 "dl:{$RUN}:config"
# serve logged in as viewer: its HTTP control is refused 403 (the ACL of serve's user, not the client, is
# what forbids it; it answered 502 "ERR The user executing the script can't run this command"), saying
# which user to serve with; /status reads as ever
HP=$(free_port)
bin/coordinator serve --redis "$(url viewer)" --run $RUN --print-every 0 --http 127.0.0.1:$HP > "$TMP/serve-viewer.log" 2>&1 &
PIDS="$PIDS $!"
wait_until 10 "curl -s -o /dev/null http://127.0.0.1:$HP/status" "serve as viewer to listen"
c=$(curl -s -o "$TMP/b" -w '%{http_code}' "http://127.0.0.1:$HP/status")
[ "$c" = 200 ] || fail "GET /status of serve as viewer: $c $(cat "$TMP/b")"
for req in "shutdown {}" 'update_optimizer {"lr":9}'; do
  c=$(curl -s -o "$TMP/b" -w '%{http_code}' -X POST -d "${req#* }" "http://127.0.0.1:$HP/control/${req%% *}")
  [ "$c" = 403 ] && grep -q "serve with a Redis user whose ACL allows control" "$TMP/b" ||
    fail "POST /control/${req%% *} of serve as viewer: $c $(cat "$TMP/b")"
done
# the operator's functions and settings, as worker and as shard-server
for u in worker shard-server; do
  refused "$u dl_set outer_lr"         $u FCALL dl_set 1 "$CONF" outer_lr 9
  refused "$u dl_set target_workers"   $u FCALL dl_set 1 "$CONF" target_workers 1
  refused "$u dl_shutdown"             $u FCALL dl_shutdown 1 "$CONF"
  refused "$u dl_kick"                 $u FCALL dl_kick 1 "$CONF" victim
  refused "$u dl_init of a new run"    $u FCALL dl_init 1 "dl:{evil}:config" 0 0 1 0000000000000000
  eval "refused '$u dl_repair' $u FCALL dl_repair 1 '$CONF' $repair_args"
  refused "$u dl_unmark_corrupt"       $u FCALL dl_unmark_corrupt 1 "$CONF" 0 "dl:{$RUN:0}:log:1:1"
  refused "$u HSET tunables"           $u HSET "dl:{$RUN}:tunables" outer_lr 9
  refused "$u HSET tunables status"    $u HSET "dl:{$RUN}:tunables" status shutdown
  refused "$u HSET config"             $u HSET "$CONF" dn_buffer 7
  refused "$u HDEL config"             $u HDEL "$CONF" secret
done
after=$(snapshot)
[ "$before" = "$after" ] || { echo "$before" > "$TMP/before.log"; echo "$after" > "$TMP/after.log"; fail "a refused command changed the run"; }
as viewer HEXISTS "dl:{$RUN}:servers" evil | grep -q 0 || fail "the worker registered a fake shard-server"
as admin FUNCTION LIST | grep -q diloco || fail "the function library is gone"
[ "$(as operator HGET "dl:{$RUN}:tunables" status)" = running ] || fail "operator cannot read the run, or it was shut down"
[ "$(as viewer HGET "dl:{$RUN}:tunables" outer_lr)" = "$lr0" ] || fail "outer_lr changed"
[ "$(as viewer HEXISTS "dl:{$RUN}:workers" victim)" = 1 ] || fail "the victim was kicked"
[ "$(as viewer EXISTS "dl:{evil}:config")" = 0 ] || fail "a worker created a run"
# the function refusals happened inside Lua, at the first write (the operator gate on dl:{R}:tunables,
# dl_init's write of its config key), not at the FCALL's declared key
as admin ACL LOG 200 > "$TMP/acllog.txt"
lua_denials=$(awk '/^context$/ {getline; c=$0} /^object$/ {getline; if (c == "lua") print $0}' "$TMP/acllog.txt" | sort | uniq -c)
echo "$lua_denials" | grep -q "dl:{$RUN}:tunables" || fail "no ACL denial on dl:{$RUN}:tunables inside a function: $lua_denials"
echo "$lua_denials" | grep -q "dl:{evil}:config" || fail "no ACL denial on dl:{evil}:config inside dl_init: $lua_denials"
say "B: every refusal refused, run unchanged; denials inside functions: $(echo $lua_denials)"

# ---- C: what the operator may do
[ "$(as operator FCALL dl_set 1 "$CONF" outer_lr 0.5)" = OK ] || fail "operator dl_set outer_lr"
[ "$(as viewer HGET "dl:{$RUN}:tunables" outer_lr)" = 0.5 ] || fail "operator's outer_lr did not take"
as operator FCALL dl_status 1 "$CONF" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["state"]["outer_lr"]=="0.5", d["state"]' ||
  fail "dl_status does not show the operator's outer_lr in state"
[ "$(as operator FCALL dl_kick 1 "$CONF" victim)" = OK ] || fail "operator dl_kick"
[ "$(as viewer HEXISTS "dl:{$RUN}:workers" victim)" = 0 ] || fail "operator's kick did not take"
[ "$(as operator FCALL dl_shutdown 1 "$CONF")" = OK ] || fail "operator dl_shutdown"
[ "$(as viewer HGET "dl:{$RUN}:tunables" status)" = shutdown ] || fail "operator's shutdown did not take"
as worker FCALL dl_register 1 "$CONF" late host 20 | grep -q SHUTDOWN || fail "a worker could join a shut-down run"
# the viewer verifies (--dry-run: the library of this release is loaded, so none is loaded; it was refused
# NOPERM on FUNCTION LOAD), and a repair that would change something says which user it needs
bin/coordinator repair --redis "$(url viewer)" --run $RUN --dry-run --wait 0 > "$TMP/repair.log" 2>&1 ||
  fail "viewer coordinator repair --dry-run: $(cat "$TMP/repair.log")"
grep -q "dry run: would clear 1 corrupt mark" "$TMP/repair.log" || fail "viewer repair --dry-run: $(cat "$TMP/repair.log")"
bin/coordinator repair --redis "$(url viewer)" --run $RUN --wait 0 > "$TMP/repair.log" 2>&1 && fail "viewer repair: exit 0"
grep -q "run it as a user that may FUNCTION LOAD (deploy/redis/users.acl: operator)" "$TMP/repair.log" ||
  fail "viewer repair: $(cat "$TMP/repair.log")"
bin/coordinator repair --redis "$(url operator)" --run $RUN --wait 0 > "$TMP/repair.log" 2>&1 ||
  fail "operator coordinator repair: $(cat "$TMP/repair.log")"
grep -q "cleared 1 corrupt mark" "$TMP/repair.log" && [ -z "$(as viewer HGET "dl:{$RUN}:shards" 0:corrupt)" ] ||
  fail "operator coordinator repair did not clear the mark: $(cat "$TMP/repair.log")"
say "C: the operator set outer_lr, kicked, shut down; a worker then gets SHUTDOWN; coordinator repair runs as operator"
echo "PASS it_deploy_acl"
