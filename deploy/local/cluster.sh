#!/bin/sh
# deploy/local/cluster.sh: a whole ReDiLoCo deployment on this machine, for trying things out, demos
# and tests. Redis (with deploy/redis/redis.conf: AOF, appendfsync always), N shard-servers and the
# coordinator (`serve --http`: reaper, dashboard, /status, /metrics, /control), all on 127.0.0.1, all
# logs in DIR/logs/, pid files in DIR/pids/, Redis data (the AOF) in DIR/redis/.
#
#   cluster.sh up     [options]         start Redis; start the servers and coordinator if the run exists.
#                                       Idempotent: starts only what is not running (so it also repairs;
#                                       not a worker that ended by itself: `down` then `up` starts those);
#                                       stops servers and workers beyond --servers and --workers. Fails
#                                       when the port is not free or a process it started exits at once
#   cluster.sh init   [options] -- [coordinator init flags]   create the run, then `up`
#   cluster.sh status [--dir DIR]       processes, then `bin/coordinator status`
#   cluster.sh down   [--dir DIR]       stop everything (TERM, then KILL after 10 s); data stays in DIR
#   cluster.sh url    [--dir DIR]       print the Redis URL (DL_REDIS_URL=$(cluster.sh url) bin/worker ...)
#
# options (remembered in DIR/cluster.env by the first `up`; later commands need only --dir):
#   --dir DIR          state folder (default run/cluster)
#   --port P           Redis port (default 6390; 0 = a free port)
#   --servers N        shard-servers (default 2)
#   --run NAME         run name (default local)
#   --http [HOST:]PORT coordinator HTTP (default 127.0.0.1:8512; 0 = a free port; "off" = no HTTP)
#   --fsync MODE       Redis appendfsync: always (default, zero loss) or everysec
#   --workers N        also start N workers (bin/worker --worker-id wI), logs in DIR/logs/worker-wI.log
#   --worker-args "FLAGS"  extra flags of those workers (e.g. "--sync-every 20 --steps 200")
#
# Example:
#   deploy/local/cluster.sh up --servers 3
#   deploy/local/cluster.sh init -- --trainer quadratic --numel 1000000 --workers 2
#   export DL_REDIS_URL=$(deploy/local/cluster.sh url)   # the run waits for the 2 workers init asked for:
#   bin/worker --run local --worker-id w1 --sync-every 50 --steps 500 &
#   bin/worker --run local --worker-id w2 --sync-every 50 --steps 500 &
#   deploy/local/cluster.sh status; deploy/local/cluster.sh down
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${DILOCO_BIN:-$ROOT/bin}

cmd=${1:-}; [ $# -gt 0 ] && shift
DIR=""; O_PORT=""; O_SERVERS=""; O_RUN=""; O_HTTP=""; O_FSYNC=""; O_WORKERS=""; O_WARGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2;;
    --port) O_PORT=$2; shift 2;;
    --servers) O_SERVERS=$2; shift 2;;
    --run) O_RUN=$2; shift 2;;
    --http) O_HTTP=$2; shift 2;;
    --fsync) O_FSYNC=$2; shift 2;;
    --workers) O_WORKERS=$2; shift 2;;
    --worker-args) O_WARGS=$2; shift 2;;
    --) shift; break;;
    -h|--help) cmd=help; break;;
    *) echo "cluster.sh: unknown option $1 (see cluster.sh --help)" >&2; exit 2;;
  esac
done
[ -z "$DIR" ] && DIR=$ROOT/run/cluster
mkdir -p "$DIR" && DIR=$(cd "$DIR" && pwd) || exit 1
LOGS=$DIR/logs; PIDS=$DIR/pids; ENVF=$DIR/cluster.env

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
say() { echo "cluster: $*"; }
die() { echo "cluster: $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Whether something listens on 127.0.0.1:P (or on every address): a bind as Redis makes it (SO_REUSEADDR) fails.
port_taken() {
  ! python3 -c 'import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}

# Settings: command line > DIR/cluster.env > defaults.
PORT=""; SERVERS=""; RUN=""; HTTP=""; FSYNC=""; WORKERS=""; WARGS=""
[ -f "$ENVF" ] && . "$ENVF"
ENV_PORT=$PORT
[ -n "$O_PORT" ] && PORT=$O_PORT
[ -n "$O_SERVERS" ] && SERVERS=$O_SERVERS
[ -n "$O_RUN" ] && RUN=$O_RUN
[ -n "$O_HTTP" ] && HTTP=$O_HTTP
[ -n "$O_FSYNC" ] && FSYNC=$O_FSYNC
[ -n "$O_WORKERS" ] && WORKERS=$O_WORKERS
[ -n "$O_WARGS" ] && WARGS=$O_WARGS
: "${PORT:=6390}" "${SERVERS:=2}" "${RUN:=local}" "${HTTP:=127.0.0.1:8512}" "${FSYNC:=always}" "${WORKERS:=0}"
URL=redis://127.0.0.1:$PORT
RCLI="redis-cli -p $PORT"

save_env() {
  { echo "PORT=$PORT"; echo "SERVERS=$SERVERS"; echo "RUN='$RUN'"; echo "HTTP=$HTTP"; echo "FSYNC=$FSYNC"
    echo "WORKERS=$WORKERS"; echo "WARGS='$WARGS'"; } > "$ENVF"
}

# pid of NAME if its pid file names a live process running PROG (guards against pid reuse).
pid_of() { # NAME PROG
  f=$PIDS/$1.pid
  [ -f "$f" ] || return 1
  p=$(cat "$f" 2>/dev/null) || return 1
  [ -n "$p" ] && [ -r "/proc/$p/cmdline" ] || return 1
  grep -q "^State:.*Z" "/proc/$p/status" 2>/dev/null && return 1
  tr '\0' ' ' < "/proc/$p/cmdline" | grep -q "$2" || return 1
  echo "$p"
}
log_lines() { if [ -f "$LOGS/$1.log" ]; then wc -l < "$LOGS/$1.log"; else echo 0; fi; } # NAME
redis_alive() { pid_of redis redis-server >/dev/null; }
run_exists() { [ "$($RCLI EXISTS "dl:{$RUN}:config" 2>/dev/null)" = 1 ]; }

# Start PROG ARGS... detached (own session: a Ctrl-C in this terminal does not reach it), log + pid file.
# The Redis URL goes in the environment (DL_REDIS_URL), never on a command line: with an ACL user it
# holds a password, and command lines are visible to every local user in ps.
spawn() { # NAME PROG ARGS...
  name=$1; shift
  DL_REDIS_URL=$URL setsid "$@" >> "$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! > "$PIDS/$name.pid"
}

# The Redis that answers on PORT must be the one we started: its process_id (INFO server) the pid in our pid
# file. `redis-server --daemonize yes` returns before it binds, so a port another Redis has answered PING
# and this script ran in that Redis (and `down` would have shut it down).
start_redis() {
  if redis_alive; then return 0; fi
  [ "$PORT" = 0 ] && PORT=$(free_port) && URL=redis://127.0.0.1:$PORT && RCLI="redis-cli -p $PORT"
  port_taken "$PORT" && die "port $PORT is in use (another Redis?): choose --port (0: a free one)"
  mkdir -p "$DIR/redis"
  rm -f "$PIDS/redis.pid"
  logged=$(log_lines redis)
  # deploy/redis/redis.conf with this machine's port, folders and no ACL file (loopback, one user;
  # for ACL users see docs/deploy.md). The AOF in DIR/redis keeps the run across down/up.
  MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \
  redis-server "$ROOT/deploy/redis/redis.conf" --port "$PORT" --dir "$DIR/redis" --aclfile "" \
    --appendfsync "$FSYNC" --daemonize yes --pidfile "$PIDS/redis.pid" --logfile "$LOGS/redis.log" \
    >/dev/null || die "redis-server did not start (see $LOGS/redis.log)"
  for _ in $(seq 100); do
    p=$(cat "$PIDS/redis.pid" 2>/dev/null)
    [ -n "$p" ] && [ "$($RCLI info server 2>/dev/null | sed -n 's/^process_id:\([0-9]*\).*/\1/p')" = "$p" ] &&
      { say "Redis on 127.0.0.1:$PORT (data in $DIR/redis)"; return 0; }
    tail -n "+$((logged + 1))" "$LOGS/redis.log" 2>/dev/null | grep -q 'Address already in use' &&
      die "port $PORT is in use (another Redis?): choose --port (0: a free one)"
    sleep 0.1
  done
  die "Redis did not answer on port $PORT (see $LOGS/redis.log)"
}

# Stop the processes of NAME<i> beyond the N asked for (pid files NAME<i>.pid with i > N): `up --servers 1`
# with 3 servers running said "1 shard-server(s)" and left all 3 running. TERM: a shard-server hands its
# leases over, a worker leaves its run; then their pid files go.
stop_extra() { # PREFIX PROG N
  pids=""; names=""
  for f in "$PIDS/$1"*.pid; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .pid); i=${n#"$1"}
    case "$i" in ''|*[!0-9]*) continue;; esac
    [ "$i" -gt "$3" ] || continue
    p=$(stop_one "$n" "$2") && [ -n "$p" ] && { pids="$pids $p"; names="$names $n"; }
    rm -f "$f"
  done
  [ -z "$pids" ] && return 0
  # shellcheck disable=SC2086
  reap 10 $pids
  say "stopped$names (beyond the $3 asked for)"
}

# finished NAME: the worker NAME ended by itself since it was started (it trained its --steps, or the run was
# shut down): its pid file is still there (`down` removes it) and its log's last line says so. Prints how it
# ended. `up` used to start such a worker again, to train its --steps once more, when it was run only to
# change the number of servers (the --workers it was first given are remembered).
finished() {
  [ -f "$PIDS/$1.pid" ] || return 1
  tail -n 1 "$LOGS/$1.log" 2>/dev/null | grep -o 'stopped after [0-9]* steps (\(done\|run shut down\))'
}

start_rest() {
  stop_extra server shard-server "$SERVERS"
  stop_extra worker-w worker "$WORKERS"
  if ! run_exists; then
    say "run '$RUN' does not exist yet: shard-servers and coordinator start after \`cluster.sh init -- FLAGS\`"
    return 0
  fi
  i=1
  while [ "$i" -le "$SERVERS" ]; do
    if ! pid_of "server$i" shard-server >/dev/null; then
      spawn "server$i" "$BIN/shard-server" --run "$RUN" --id "server$i"
    fi
    i=$((i + 1))
  done
  coord_from=""   # the coordinator's log line where the one started now begins (empty: it was running)
  if ! pid_of coordinator coordinator >/dev/null; then
    coord_from=$(( $(log_lines coordinator) + 1 ))
    if [ "$HTTP" = off ]; then
      spawn coordinator "$BIN/coordinator" serve --run "$RUN" --print-every 30
    else
      spawn coordinator "$BIN/coordinator" serve --run "$RUN" --print-every 30 --http "$HTTP"
    fi
  fi
  i=1
  while [ "$i" -le "$WORKERS" ]; do
    if pid_of "worker-w$i" worker >/dev/null; then :
    elif done=$(finished "worker-w$i"); then
      say "worker-w$i $done: not started again (\`cluster.sh down\`, then \`up\`, starts every worker again)"
    else
      # shellcheck disable=SC2086
      spawn "worker-w$i" "$BIN/worker" --run "$RUN" --worker-id "w$i" --quiet $WARGS
    fi
    i=$((i + 1))
  done
  # Ready when every server has beaten once (registered in dl:{R}:servers).
  for _ in $(seq 100); do
    n=0
    i=1
    while [ "$i" -le "$SERVERS" ]; do
      [ "$($RCLI HEXISTS "dl:{$RUN}:servers" "server$i" 2>/dev/null)" = 1 ] && n=$((n + 1))
      i=$((i + 1))
    done
    [ "$n" -ge "$SERVERS" ] && break
    sleep 0.1
  done
  check_started "$coord_from"
  [ "$n" -ge "$SERVERS" ] || say "warning: only $n of $SERVERS shard-servers registered (see $LOGS/server*.log)"
  say "run '$RUN': $n shard-server(s), coordinator$(dashboard_line "${coord_from:-1}")"
}

# The last line of NAME's log from line FROM on: what a process that exited at start said last.
last_words() { tail -n "+${2:-1}" "$LOGS/$1.log" 2>/dev/null | grep -v '^[[:space:]]*$' | tail -n 1; }

# Every shard-server asked for, and the coordinator, still run; a coordinator started now (its log from line
# COORD_FROM) is serving (its HTTP listens). It said "run 'R': 2 shard-server(s), coordinator" and exit 0
# while the coordinator had exited (its --http port in use). Fails with the reason from the log.
check_started() { # [COORD_FROM]
  i=1
  while [ "$i" -le "$SERVERS" ]; do
    pid_of "server$i" shard-server >/dev/null ||
      die "shard-server server$i exited: $(last_words "server$i") (log: $LOGS/server$i.log)"
    i=$((i + 1))
  done
  for _ in $(seq 100); do
    pid_of coordinator coordinator >/dev/null ||
      die "the coordinator exited: $(last_words coordinator "${1:-1}") (log: $LOGS/coordinator.log)"
    [ -z "${1:-}" ] && return 0
    tail -n "+$1" "$LOGS/coordinator.log" 2>/dev/null | grep -q 'INFO serving run' && return 0
    sleep 0.1
  done
  say "warning: the coordinator has not said it serves the run after 10 s (see $LOGS/coordinator.log)"
}

dashboard_line() { # [FROM]: the URL the coordinator printed, from line FROM of its log on
  [ "$HTTP" = off ] && return 0
  for _ in $(seq 30); do
    u=$(tail -n "+${1:-1}" "$LOGS/coordinator.log" 2>/dev/null | grep -o 'http://[^ ]*/dashboard' | tail -n 1)
    [ -n "$u" ] && { echo " (dashboard $u)"; return 0; }
    sleep 0.1
  done
}

stop_one() { # NAME PROG
  p=$(pid_of "$1" "$2") || { rm -f "$PIDS/$1.pid"; return 0; }
  kill -TERM "$p" 2>/dev/null
  echo "$p"
}

# Wait for the given pids to exit, KILL what is left after LIMIT seconds.
reap() { # LIMIT PIDS...
  limit=$1; shift
  end=$(( $(date +%s) + limit ))
  for p in "$@"; do
    while [ -r "/proc/$p/status" ] && ! grep -q "^State:.*Z" "/proc/$p/status" 2>/dev/null; do
      if [ "$(date +%s)" -ge "$end" ]; then kill -KILL "$p" 2>/dev/null; say "killed $p (did not stop in ${limit}s)"; break; fi
      sleep 0.1
    done
  done
}

down() {
  pids=""
  for f in "$PIDS"/worker-*.pid; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .pid); p=$(stop_one "$n" worker); pids="$pids $p"
  done
  # shellcheck disable=SC2086
  [ -n "$(echo $pids)" ] && reap 10 $pids
  pids=""
  for f in "$PIDS"/server*.pid; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .pid); p=$(stop_one "$n" shard-server); pids="$pids $p"
  done
  p=$(stop_one coordinator coordinator); pids="$pids $p"
  # shellcheck disable=SC2086
  [ -n "$(echo $pids)" ] && reap 10 $pids
  if p=$(pid_of redis redis-server); then
    # SHUTDOWN fsyncs the AOF; the run is still there at the next `up`.
    $RCLI shutdown >/dev/null 2>&1 || kill -TERM "$p" 2>/dev/null
    reap 20 "$p"
  fi
  rm -f "$PIDS"/*.pid
  say "stopped (data and logs kept in $DIR)"
}

status() {
  echo "cluster in $DIR: Redis $URL, run '$RUN'"
  for f in "$PIDS"/*.pid; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .pid)
    case "$n" in redis) prog=redis-server;; server*) prog=shard-server;; coordinator) prog=coordinator;; *) prog=worker;; esac
    if p=$(pid_of "$n" "$prog"); then printf '  %-14s pid %-8s running\n' "$n" "$p"
    elif [ "$prog" = worker ] && done=$(tail -n 1 "$LOGS/$n.log" 2>/dev/null | grep -o 'stopped after .*') && [ -n "$done" ]; then
      printf '  %-14s %-12s exited: %s\n' "$n" "" "$done"   # a worker that finished its --steps is no crash
    else printf '  %-14s %-12s dead (log: %s)\n' "$n" "" "$LOGS/$n.log"; fi
  done
  if ! redis_alive; then echo "  Redis is not running"; return 1; fi
  [ "$HTTP" != off ] && d=$(dashboard_line) && [ -n "$d" ] && echo " $d"
  echo
  if run_exists; then DL_REDIS_URL=$URL "$BIN/coordinator" status --run "$RUN"
  else echo "run '$RUN' does not exist yet (cluster.sh init -- FLAGS)"; fi
}

if [ -n "$O_PORT" ] && [ -n "$ENV_PORT" ] && [ "$O_PORT" != "$ENV_PORT" ] && redis_alive; then
  PORT=$ENV_PORT; die "the Redis of $DIR already runs on port $ENV_PORT (cluster.sh down --dir $DIR first)"
fi

case "$cmd" in
  up)
    mkdir -p "$LOGS" "$PIDS"
    start_redis; save_env; start_rest ;;
  init)
    mkdir -p "$LOGS" "$PIDS"
    start_redis; save_env
    DL_REDIS_URL=$URL "$BIN/coordinator" init --run "$RUN" "$@" || die "coordinator init failed"
    start_rest ;;
  down) down ;;
  status) status ;;
  url) echo "$URL" ;;
  help|-h|--help) usage ;;
  "") usage >&2; exit 2 ;;
  *) echo "cluster: unknown command '$cmd' (up, init, status, down, url; see --help)" >&2; exit 2 ;;
esac
