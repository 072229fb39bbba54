#!/bin/sh
# it_rcli.sh: tests/tools/rcli, the tests' $RCLI, prints what redis-cli prints, byte for byte, and exits with
# its status: every kind of reply (strings with newlines and empty ones, integers, nil, errors, nested
# arrays, a stream, a hash, the diloco library's functions), a database chosen with -n, a server that is not there;
# and what it hands to redis-cli (-c, a command on stdin, SHUTDOWN) still does what redis-cli does. Every
# test that polls Redis goes through rcli: a difference here would be a wrong reading anywhere.
# test: light
. "$(dirname "$0")/lib.sh"
RCLI_BIN=build/tests/tools/rcli
[ -x "$RCLI_BIN" ] || fail "build first: make tests-build ($RCLI_BIN)"
start_redis
init_run rc --trainer quadratic --numel 1000 --shards 2 --workers 1

n=0
# same ARGS...: redis-cli ARGS and rcli ARGS print the same stdout and stderr and exit with the same status
same() {
  n=$((n + 1))
  redis-cli "$@" > "$TMP/want.out" 2> "$TMP/want.err"; want=$?
  "$RCLI_BIN" "$@" > "$TMP/got.out" 2> "$TMP/got.err"; got=$?
  cmp -s "$TMP/want.out" "$TMP/got.out" ||
    fail "rcli $* printed $(od -c "$TMP/got.out" | head -n 5), redis-cli $(od -c "$TMP/want.out" | head -n 5)"
  cmp -s "$TMP/want.err" "$TMP/got.err" ||
    fail "rcli $* said on stderr '$(cat "$TMP/got.err")', redis-cli '$(cat "$TMP/want.err")'"
  [ "$want" = "$got" ] || fail "rcli $* exited with $got, redis-cli with $want"
}

P="-p $PORT"
# the data, written by redis-cli (a write's reply may differ the second time: only reads are compared)
redis-cli $P SET k "two
lines" > /dev/null
redis-cli $P SET empty "" > /dev/null
redis-cli $P SET counter -42 > /dev/null
redis-cli $P RPUSH list a "" "b c" "
" > /dev/null
redis-cli $P HSET h f1 v1 f2 "" > /dev/null
redis-cli $P XADD s 1-1 k v > /dev/null
redis-cli $P XADD s 2-1 a "" b c > /dev/null
redis-cli -n 3 $P SET in3 x > /dev/null
same $P PING
same $P SET same-each-time v
same $P GET k
same $P GET empty
same $P GET missing
same $P INCRBY counter 0
same $P LRANGE list 0 -1
same $P LRANGE nolist 0 -1
same $P HGETALL h
same $P XRANGE s - +
same $P XADD s 1-1 k v
same $P EVAL "return {1, {2, {'x', ''}}, 'y', -3}" 0
same $P EVAL "return redis.error_reply('MYERR custom')" 0
same $P EVAL "return {err = 'E1'}" 0
same $P EVAL "return 3.7" 0
same $P NOSUCHCOMMAND a b
same $P GET
same $P FUNCTION LIST LIBRARYNAME diloco
same $P FCALL dl_status 1 "dl:{nosuchrun}:config"
same $P HGETALL "dl:{rc}:config"
same -n 3 $P GET in3
same $P GET in3
same -h 127.0.0.1 $P DBSIZE
# handed to redis-cli: an option rcli leaves to it, a command on stdin
same -c $P GET k
printf 'GET k\nPING\n' > "$TMP/cmds"
redis-cli $P < "$TMP/cmds" > "$TMP/want.out" 2>&1
"$RCLI_BIN" $P < "$TMP/cmds" > "$TMP/got.out" 2>&1
cmp -s "$TMP/want.out" "$TMP/got.out" || fail "commands on stdin: rcli printed $(cat "$TMP/got.out")"

# a port nobody listens on
pick_ports NOBODY
same -p "$NOBODY" PING
# the connection lost before the reply: a Redis that crashes on the command (one for each client)
lost() { # NAME CLIENT: the status and both outputs of CLIENT -p PORT DEBUG SEGFAULT, PORT a Redis of its own
  pick_ports _lp
  redis-server --port "$_lp" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir "$TMP" \
    --logfile "$TMP/redis-crash-$1.log" --enable-debug-command yes > /dev/null || fail "redis-server did not start"
  wait_until 10 "redis-cli -p $_lp PING > /dev/null 2>&1" "the Redis that crashes"
  "$2" -p "$_lp" DEBUG SEGFAULT > "$TMP/lost-$1.out" 2>&1
  echo "status $?" >> "$TMP/lost-$1.out"
}
lost redis-cli redis-cli; lost rcli "$RCLI_BIN"
cmp -s "$TMP/lost-redis-cli.out" "$TMP/lost-rcli.out" ||
  fail "a connection lost: rcli printed '$(cat "$TMP/lost-rcli.out")', redis-cli '$(cat "$TMP/lost-redis-cli.out")'"
grep -q '^status 1$' "$TMP/lost-redis-cli.out" || fail "redis-cli did not fail on a lost connection: $(cat "$TMP/lost-redis-cli.out")"
# SHUTDOWN (redis-cli's own handling): the server goes, and both say nothing and exit 0
"$RCLI_BIN" $P SHUTDOWN NOSAVE > "$TMP/got.out" 2>&1 || fail "rcli SHUTDOWN NOSAVE exited with $?: $(cat "$TMP/got.out")"
[ -s "$TMP/got.out" ] && fail "rcli SHUTDOWN NOSAVE printed: $(cat "$TMP/got.out")"
wait_until 10 "! redis-cli $P PING >/dev/null 2>&1" "Redis to shut down"
say "rcli and redis-cli agree on $n calls (replies of every kind, -n, -h, -c, no server, a lost connection), commands on stdin and SHUTDOWN"
