#!/bin/sh
# deploy/redis-ha/sentinel.sh: a Redis master, 2 replicas and 3 Sentinels on this machine (127.0.0.1
# only), so a ReDiLoCo run survives the loss of its Redis master: Sentinel promotes a replica and our
# processes, given a redis+sentinel:// URL, find the new master by themselves. Each node runs Debian's
# redis-server 7.0 with deploy/redis/redis.conf + ha.conf (AOF, min-replicas-to-write 1), no ACL file,
# its data and own config (rewritten by Sentinel on a failover) in DIR/node-PORT/; each Sentinel its
# config in DIR/sentinel-PORT/. A node that comes back after a failover is turned into a replica of the
# new master by the Sentinels.
#
#   sentinel.sh up     [--dir D] [--base-port P] [--sentinel-port S] [--name M] [--down-after-ms MS]
#                      start what is not running: nodes on P (master at creation), P+1, P+2; Sentinels
#                      on S, S+1, S+2 (quorum 2); wait until the Sentinels agree on a master that has 2
#                      replicas in sync. Idempotent.
#   sentinel.sh status [--dir D]   master, replicas with their lag, Sentinels, last failover
#   sentinel.sh master [--dir D]   host:port of the current master (as the Sentinels say)
#   sentinel.sh down   [--dir D]   stop the Sentinels, then the nodes (AOF fsynced); data stays in DIR
#   sentinel.sh url    [--dir D]   the URL for --redis: redis+sentinel://127.0.0.1:S,...,/M
#
# Defaults: --dir run/redis-ha, --base-port 6500, --sentinel-port 26379, --name diloco,
# --down-after-ms 5000 (how long a silent master takes to be declared down; the failover follows
# within a second or two). The options are remembered in DIR/ha.env. Then, e.g.:
#   bin/coordinator init --redis "$(deploy/redis-ha/sentinel.sh url)" --run demo --min-replicas 1 ...
#   and start shard-servers and workers with the same URL.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NODES=3

TAG=redis-ha
OPTS="base-port:BASE sentinel-port:SBASE name:NAME down-after-ms:DOWN"
ENVF_NAME=ha.env
. "$ROOT/deploy/redis/local_lib.sh"
launcher_args "$@"
: "${BASE:=6500}" "${SBASE:=26379}" "${NAME:=diloco}" "${DOWN:=5000}"
case "$NAME" in *[!A-Za-z0-9_.-]*|"") die "--name may hold letters, digits, _ . - only";; esac

seq3() { i=0; while [ $i -lt $NODES ]; do echo $(($1 + i)); i=$((i + 1)); done; }

# The master as the Sentinels say ("host port"), from the first Sentinel that answers.
master_addr() {
  for s in $(seq3 "$SBASE"); do
    a=$(cli "$s" sentinel get-master-addr-by-name "$NAME" 2>/dev/null | tr '\n' ' ')
    case "$a" in *[0-9]*) echo "$a"; return 0;; esac
  done
  return 1
}

start_node() { # PORT
  p=$1; d=$DIR/node-$p
  mkdir -p "$d"
  if [ ! -f "$d/node.conf" ]; then
    { echo "include $ROOT/deploy/redis/redis.conf"; echo "include $HERE/ha.conf"
      echo "port $p"; echo "bind 127.0.0.1"; echo "dir $d"; echo "aclfile \"\""
      echo "pidfile $d/redis.pid"; echo "logfile $d/redis.log"
      [ "$p" -ne "$BASE" ] && echo "replicaof 127.0.0.1 $BASE"
    } > "$d/node.conf"
  fi
  # A node coming back after a failover starts as a replica of the master the Sentinels name (else it
  # would run as a stale master until a Sentinel demotes it, up to 10 s later).
  join=""
  if a=$(master_addr); then
    mport=${a#* }; mport=${mport%% *}
    [ "$mport" != "$p" ] && join="--replicaof 127.0.0.1 $mport"
  fi
  # shellcheck disable=SC2086
  MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 redis-server "$d/node.conf" --daemonize yes $join >/dev/null \
    || die "redis-server on port $p did not start (see $d/redis.log)"
  say "node 127.0.0.1:$p started"
}

start_sentinel() { # PORT
  s=$1; d=$DIR/sentinel-$s
  mkdir -p "$d"
  if [ ! -f "$d/sentinel.conf" ]; then
    sed -e "s|@PORT@|$s|g; s|@DIR@|$d|g; s|@NAME@|$NAME|g; s|@MASTER_PORT@|$BASE|g; s|@DOWN_AFTER_MS@|$DOWN|g" \
      "$HERE/sentinel.conf" > "$d/sentinel.conf"
  fi
  redis-sentinel "$d/sentinel.conf" --daemonize yes >/dev/null \
    || die "redis-sentinel on port $s did not start (see $d/sentinel.log)"
  say "sentinel 127.0.0.1:$s started"
}

up() {
  save_env
  for p in $(seq3 "$BASE"); do pid_of "$DIR/node-$p/redis.pid" >/dev/null || start_node "$p"; done
  for p in $(seq3 "$BASE"); do wait_ping "$p" "$DIR/node-$p/redis.log"; done
  # Sentinels learn of the replicas from the master's INFO, at once when they connect and then every
  # 10 s: start them once the replicas are in sync, so the first INFO already lists both.
  if ! pid_of "$DIR/sentinel-$SBASE/sentinel.pid" >/dev/null; then
    n=0
    until [ "$(cli "$BASE" info replication 2>/dev/null | grep -c '^slave[0-9]*:.*state=online')" -ge 2 ]; do
      n=$((n + 1)); [ $n -ge 100 ] && break   # not the master any more (a failover happened): go on
      sleep 0.1
    done
  fi
  for s in $(seq3 "$SBASE"); do pid_of "$DIR/sentinel-$s/sentinel.pid" >/dev/null || start_sentinel "$s"; done
  for s in $(seq3 "$SBASE"); do wait_ping "$s" "$DIR/sentinel-$s/sentinel.log"; done
  # Ready: every Sentinel names the same master, which has 2 replicas online, and knows both replicas
  # (a Sentinel learns of them from the master's INFO, every 10 s; until then it could promote none).
  n=0
  while :; do
    a=$(master_addr); port=${a#* }; port=${port%% *}
    same=1
    for s in $(seq3 "$SBASE"); do
      [ "$(cli "$s" sentinel get-master-addr-by-name "$NAME" 2>/dev/null | tr '\n' ' ')" = "$a" ] || same=0
      [ "$(cli "$s" sentinel replicas "$NAME" 2>/dev/null | paste - - | grep -c '^master-link-status.ok$')" -ge 2 ] || same=0
    done
    if [ $same -eq 1 ] && [ -n "$port" ] && \
       [ "$(cli "$port" info replication 2>/dev/null | grep -c '^slave[0-9]*:.*state=online')" -ge 2 ]; then
      break
    fi
    n=$((n + 1)); [ $n -ge 300 ] && die "no agreed master with 2 replicas after 30 s (see the logs in $DIR)"
    sleep 0.1
  done
  say "master 127.0.0.1:$port with 2 replicas; use --redis $(url)"
}

url() {
  hosts=""; for s in $(seq3 "$SBASE"); do hosts="$hosts${hosts:+,}127.0.0.1:$s"; done
  echo "redis+sentinel://$hosts/$NAME"
}

master() { a=$(master_addr) || die "no Sentinel answers"; echo "${a% }" | tr ' ' ':'; }

status() {
  a=$(master_addr) && echo "master $(echo "${a% }" | tr ' ' ':')" || echo "master unknown (no Sentinel answers)"
  for p in $(seq3 "$BASE"); do
    if pid=$(pid_of "$DIR/node-$p/redis.pid"); then
      info=$(cli "$p" info replication | tr -d '\r')
      role=$(echo "$info" | sed -n 's/^role://p')
      if [ "$role" = master ]; then
        echo "node 127.0.0.1:$p pid $pid master, replicas:"
        echo "$info" | sed -n 's/^slave[0-9]*:ip=\([^,]*\),port=\([^,]*\),state=\([^,]*\),offset=\([^,]*\),lag=\(.*\)$/  \1:\2 \3 offset \4 lag \5 s/p'
      else
        echo "node 127.0.0.1:$p pid $pid replica of $(echo "$info" | sed -n 's/^master_host://p'):$(echo "$info" | sed -n 's/^master_port://p') link $(echo "$info" | sed -n 's/^master_link_status://p')"
      fi
    else
      echo "node 127.0.0.1:$p down"
    fi
  done
  for s in $(seq3 "$SBASE"); do
    if pid=$(pid_of "$DIR/sentinel-$s/sentinel.pid"); then
      echo "sentinel 127.0.0.1:$s pid $pid"
    else
      echo "sentinel 127.0.0.1:$s down"
    fi
  done
  last=$(grep -h '+switch-master' "$DIR"/sentinel-*/sentinel.log 2>/dev/null | sort -k2 | tail -n 1)
  [ -n "$last" ] && echo "last failover: $last" || echo "last failover: none"
}

down() {
  for s in $(seq3 "$SBASE"); do stop_pid "$DIR/sentinel-$s/sentinel.pid" "sentinel 127.0.0.1:$s"; done
  for p in $(seq3 "$BASE"); do stop_pid "$DIR/node-$p/redis.pid" "node 127.0.0.1:$p"; done
}

case "$cmd" in
  up) up;;
  status) status;;
  master) master;;
  down) down;;
  url) url;;
  help|"") usage;;
  *) die "unknown command $cmd (up, status, master, down, url)";;
esac
