#!/bin/sh
# deploy/redis-cluster/cluster.sh: a 3-master Redis Cluster on this machine (127.0.0.1 only), optionally
# with replicas (--replicas 1: each master has a replica that takes over its slots if it dies), for
# running ReDiLoCo against a real cluster: the control keys of a run (tag {R}) live on one master, the
# shard blobs (tags {R:k}) spread over all three. Each node runs Debian's redis-server 7.0 with
# deploy/redis/redis.conf (AOF, appendfsync always), `cluster-enabled yes`, no ACL file, its data and
# nodes.conf in DIR/node-PORT/. The first `up` creates the cluster with
# `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`; later `up`s restart the nodes,
# which find each other again from their nodes.conf.
#
#   cluster.sh up     [--dir D] [--base-port P] [--fsync always|everysec] [--replicas N]
#                     start the nodes that are not running (ports P .. P+3*(1+N)-1; bus ports +10000),
#                     create the cluster if new (N replicas per master), wait until cluster_state is ok.
#                     Idempotent. A node that died comes back as a replica of the one that took over.
#   cluster.sh status [--dir D]   per node: pid, cluster state, slots, keys
#   cluster.sh down   [--dir D]   SHUTDOWN every node (AOF fsynced); data stays in DIR
#   cluster.sh url    [--dir D]   a URL for --redis (any node will do: our processes follow MOVED)
#
# Defaults: --dir run/redis-cluster, --base-port 6400, --fsync always, --replicas 0 (remembered in
# DIR/cluster.env). With replicas the nodes detect a dead master after 5 s (cluster-node-timeout).
# Then, e.g.:
#   bin/coordinator init --redis "$(deploy/redis-cluster/cluster.sh url)" --run demo ...   (loads the
#   Redis Functions on every master), and start shard-servers and workers with the same URL.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

TAG=redis-cluster
OPTS="base-port:BASE fsync:FSYNC replicas:REPLICAS"
ENVF_NAME=cluster.env
. "$ROOT/deploy/redis/local_lib.sh"
launcher_args "$@"
: "${BASE:=6400}" "${FSYNC:=always}" "${REPLICAS:=0}"
case "$REPLICAS" in 0|1|2) ;; *) die "--replicas must be 0, 1 or 2";; esac
NODES=$((3 * (1 + REPLICAS)))
case "$FSYNC" in always|everysec) ;; *) die "--fsync must be always or everysec";; esac

ports() { i=0; while [ $i -lt $NODES ]; do echo $((BASE + i)); i=$((i + 1)); done; }
node_pid() { pid_of "$DIR/node-$1/redis.pid"; } # PORT -> pid of that node's live redis-server, or fail
state_ok() { cli "$1" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; }

up() {
  save_env
  for p in $(ports); do
    d=$DIR/node-$p
    mkdir -p "$d"
    if node_pid "$p" >/dev/null; then continue; fi
    MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \
    redis-server "$ROOT/deploy/redis/redis.conf" --port "$p" --bind 127.0.0.1 --dir "$d" --aclfile "" \
      --appendfsync "$FSYNC" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
      --daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log" >/dev/null \
      || die "redis-server on port $p did not start (see $d/redis.log)"
    say "node 127.0.0.1:$p started"
  done
  for p in $(ports); do wait_ping "$p" "$DIR/node-$p/redis.log"; done
  # A node that owns no slot and knows no other node is new: create the cluster.
  first=$(ports | head -n 1)
  if cli "$first" cluster info | grep -q '^cluster_known_nodes:1\b' && \
     cli "$first" cluster info | grep -q '^cluster_slots_assigned:0\b'; then
    addrs=""; for p in $(ports); do addrs="$addrs 127.0.0.1:$p"; done
    # shellcheck disable=SC2086
    redis-cli --cluster create $addrs --cluster-replicas "$REPLICAS" --cluster-yes > "$DIR/create.log" 2>&1 \
      || die "redis-cli --cluster create failed (see $DIR/create.log)"
    say "cluster created:$addrs"
  fi
  n=0
  for p in $(ports); do
    until state_ok "$p"; do
      n=$((n + 1)); [ $n -ge 300 ] && die "cluster_state is not ok on node $p after 30 s (see $DIR/node-$p/redis.log)"
      sleep 0.1
    done
  done
  # replicas are attached by gossip after `create` returns: wait until every node knows them all
  n=0
  for p in $(ports); do
    until [ "$(cli "$p" cluster nodes 2>/dev/null | awk '$3 ~ /slave/' | grep -c .)" -ge $((3 * REPLICAS)) ]; do
      n=$((n + 1)); [ $n -ge 600 ] && die "the replicas are not attached after 60 s (see $DIR/node-$p/redis.log)"
      sleep 0.1
    done
  done
  say "cluster ok; use --redis $(url)"
}

# Every node as a seed: any one that is alive will do (our processes follow MOVED to the masters).
url() { echo "redis://$(ports | sed 's/^/127.0.0.1:/' | paste -sd, -)"; }

status() {
  for p in $(ports); do
    if pid=$(node_pid "$p"); then
      st=$(cli "$p" cluster info | sed -n 's/^cluster_state:\(.*\)\r*$/\1/p' | tr -d '\r')
      slots=$(cli "$p" cluster nodes | awk '/myself/ {s=""; for (i = 9; i <= NF; i++) s = s " " $i; print s}')
      echo "node 127.0.0.1:$p pid $pid state $st keys $(cli "$p" dbsize) slots$slots"
    else
      echo "node 127.0.0.1:$p down"
    fi
  done
}

down() {
  for p in $(ports); do stop_pid "$DIR/node-$p/redis.pid" "node 127.0.0.1:$p" "$p"; done
}

case "$cmd" in
  up) up;;
  status) status;;
  down) down;;
  url) url;;
  help|"") usage;;
  *) die "unknown command $cmd (up, status, down, url)";;
esac
