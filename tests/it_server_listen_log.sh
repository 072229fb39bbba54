#!/bin/sh
# it_server_listen_log.sh: a shard-server started without a port (the default, an ephemeral one) logs
# the port it really listens on, and that port accepts connections (issue 25: it logged "127.0.0.1:0").
. "$(dirname "$0")/lib.sh"
RUN=sl
start_redis
init_run $RUN --trainer quadratic --numel 1000 --shards 1
start_server s1
wait_until 10 "grep -q 'listening on' $TMP/server-s1.log" "the listening line"
line=$(grep 'listening on' "$TMP/server-s1.log")
port=$(echo "$line" | sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\), an ephemeral port (advertised as 127\.0\.0\.1:\([0-9]*\)).*/\1 \2/p')
set -- $port
[ -n "${1:-}" ] && [ "$1" != 0 ] && [ "$1" = "$2" ] || fail "the log says: $line"
python3 -c "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2).close()" "$1" ||
  fail "nothing listens on the logged port $1"
say "OK: $line"
