#!/bin/sh
# it_ha_async_place_lost.sh: an async place that a replica acknowledged and a failover lost anyway is placed
# again. WAIT is not consensus: the replica that acknowledged a dl_submit can follow a new master that never
# had it and drop it (docs/PROTOCOL.md, "Durable means replicated"). The new master then gives the place to
# another submission, or to nobody yet; without a check the worker's get returned once the shard was past
# another worker's Δ (its window lost while it counted it as applied), or waited for a submission that never
# came, again at every completion. Each worker asks Redis after its get whether its places are still its
# own (dl_places) and places the same submission again when they are not (worker/diloco/async.c).
# A master with two replicas r1 and r2, --min-replicas 1; an async run of two workers and a process group of
# two ranks (1 s intervals) and one shard-server. With the server stopped (no commit can happen meanwhile) and
# r1 cut off from the master, the workers make their next submissions (r2 acknowledges them); then the master
# dies and r1's copy becomes the master on the same port (the failover a Sentinel makes to the replica it can
# reach), with a fresh replica in place of r2 (a replica that follows the new master drops what that master
# lacks). Twice:
#   lost    a worker c starts on the new master and takes the lost places' numbers with its own
#           submissions: the others' gets return past another worker's Δ (the silent loss)
#   lost2   nobody else submits: every get waits for a place nobody was given, and asks after 3 s (not
#           after the sync timeout, 120 s)
# Every worker places its lost submission again (the group's rank 0 for both ranks: worker/diloco/group.c,
# async_settle), and the run ends bit-identical to the replay of the order Redis recorded
# (tests/tools/ref_async), in which those submissions were placed late.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
H=10
start_redis
MPORT=$PORT; MPID=$(cat "$TMP/redis.pid")
replica() { # NAME PORT: a replica of the master, its RDB in $TMP/NAME/
  mkdir -p "$TMP/$1"
  redis-server --port "$2" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --replicaof 127.0.0.1 "$MPORT" \
    --dir "$TMP/$1" --dbfilename dump.rdb --logfile "$TMP/$1.log" --pidfile "$TMP/$1.pid" > /dev/null ||
    fail "replica $1 did not start"
  wait_until 20 "[ -s $TMP/$1.pid ] && redis-cli -p $2 info replication | grep -q master_link_status:up" \
    "replica $1 to follow the master"
  PIDS="$PIDS $(cat "$TMP/$1.pid")"
}
submits() { $RCLI XRANGE "dl:{$RUN}:events" - + | grep -c '^submit$'; }
# submits_of W: W's submissions Redis recorded (an event per shard: 2)
submits_of() {
  $RCLI XRANGE "dl:{$RUN}:events" - + |
    awk -v w="$1" '/^type$/ {getline; t = $0} /^worker$/ {getline; if (t == "submit" && $0 == w) n++} END {print n / 2}'
}
syncs() { cat "$TMP/$1.jsonl" 2>/dev/null | grep -c '"event":"sync"'; }
gsyncs() { grep -c '^sync rank 0 ' "$TMP/$1.out" 2>/dev/null; }
offset() { redis-cli -p "$1" info replication | sed -n "s/^$2:\([0-9]*\).*/\1/p"; }
# quiet: stops the workers (SIGSTOP) at a moment when none has a submission in flight (as many submissions
# recorded as syncs completed: the server's stop below blocks no round), so that r1 is cut off before any
# next submission. Without it, on a loaded machine r1 caught up slower than a worker reached its next
# boundary (3 s, seen with TEST_JOBS=3): r1 had that submission, and the worker, blocked on the stopped
# server, made no other.
quiet() {
  for _ in $(seq 100); do
    eval "kill -STOP \$WRK_$a \$WRK_$b \$WRK_$g"
    [ "$(submits_of $a)" = "$(syncs $a)" ] && [ "$(submits_of $b)" = "$(syncs $b)" ] &&
      [ "$(submits_of $g)" = "$(gsyncs $g)" ] && return
    eval "kill -CONT \$WRK_$a \$WRK_$b \$WRK_$g"
    sleep 0.05
  done
  fail "$RUN: the workers always had a submission in flight (submissions $(submits_of $a) $(submits_of $b) $(submits_of $g), syncs $(syncs $a) $(syncs $b) $(gsyncs $g))"
}
WARGS="--sync-every $H --step-delay-ms 100 --heartbeat-interval 0.5"

# The master dies; r1's copy becomes the master on the master's port, with a fresh replica (r2, which
# acknowledged what r1 lacks, is gone).
failover() {
  kill -9 "$MPID" "$R2"
  redis-cli -p "$R1PORT" save > /dev/null || fail "r1 did not save its copy"
  kill -9 "$R1"
  mkdir -p "$TMP/m-$RUN" && cp "$TMP/r1-$RUN/dump.rdb" "$TMP/m-$RUN/dump.rdb"
  wait_until 10 '! redis-cli -p $MPORT ping > /dev/null 2>&1' "the old master's port to close"
  redis-server --port "$MPORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir "$TMP/m-$RUN" \
    --dbfilename dump.rdb --logfile "$TMP/m-$RUN.log" --pidfile "$TMP/m-$RUN.pid" > /dev/null ||
    fail "the new master did not start"
  wait_until 10 'redis-cli -p $MPORT ping > /dev/null 2>&1' "the new master"
  MPID=$(cat "$TMP/m-$RUN.pid"); PIDS="$PIDS $MPID"
  replica "r3-$RUN" "$(free_port)"
}

# scenario RUN N WITH_C: workers aN and bN and group gN of run RUN through the failover above
scenario() {
  RUN=$1; a=a$2; b=b$2; g=g$2; srv=s$2
  R1PORT=$(free_port); replica "r1-$RUN" "$R1PORT"; R1=$(cat "$TMP/r1-$RUN.pid")
  R2PORT=$(free_port); replica "r2-$RUN" "$R2PORT"; R2=$(cat "$TMP/r2-$RUN.pid")
  init_run $RUN --async --trainer quadratic --numel 20000 --shards 2 --workers 3 --min-replicas 1
  start_server $srv --lease-ttl-ms 20000
  start_worker $a $WARGS --steps 80
  start_worker $b $WARGS --steps 80
  # a process group of 2 ranks: rank 0 places the group's submission, each rank delivers its shard
  build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id $g --ranks 2 --steps 80 --sync-every $H \
    --heartbeat-ms 500 --step-delay-ms 100 --sync-timeout-ms 120000 > "$TMP/$g.out" 2> "$TMP/worker-$g.log" &
  eval "WRK_$g=$!"; PIDS="$PIDS $!"
  wait_until 30 '[ "$(syncs $a)" -ge 2 ] && [ "$(syncs $b)" -ge 2 ] && [ "$(gsyncs $g)" -ge 2 ]' \
    "the workers to sync twice"

  # no commit from here until the server runs again: what r1 has is a consistent run; and no submission
  # until r1 is cut off
  quiet
  eval "SRV=\$SRV_$srv"; kill -STOP "$SRV"
  wait_until 5 '[ "$(offset $R1PORT slave_repl_offset)" = "$(offset $MPORT master_repl_offset)" ]' "r1 to catch up" 0.05
  redis-cli -p "$R1PORT" replicaof no one > /dev/null # (a stopped replica would still read what was sent)
  s0=$(submits)
  eval "kill -CONT \$WRK_$a \$WRK_$b \$WRK_$g"
  wait_until 10 '[ "$(submits)" -ge $((s0 + 6)) ]' "the workers' next submissions (r2 acknowledges them)"
  sleep 0.5
  lost=$((($(submits) - s0) / 2)) # (an event per shard)
  say "$RUN: server and r1 stopped: $lost submissions recorded on the master and acknowledged by r2"
  failover
  [ "$(submits)" -eq "$s0" ] || fail "the new master has the window's submissions: nothing was lost"
  say "$RUN: failover: the new master lacks them"

  [ "$3" = 1 ] && start_worker c $WARGS --steps 40
  t0=$(date +%s)
  kill -CONT "$SRV"
  wait_workers $a $b $g $([ "$3" = 1 ] && echo c)
  took=$(($(date +%s) - t0))
  for w in $a $b $g; do
    grep -q "no longer records our place" "$TMP/worker-$w.log" ||
      fail "$w did not find its place lost: $(grep -h -m3 WARN "$TMP/worker-$w.log")"
  done
  grep -h -m1 "no longer records our place" "$TMP/worker-$a.log" | sed 's/.*WARN /  /'
  grep -q "applied at a second try" "$TMP/worker-$g.log" ||
    fail "the group's submission was not placed again: $(grep -h -m3 'WARN' "$TMP/worker-$g.log")"
  [ $took -lt 30 ] || fail "$RUN: the workers ended $took s after the server resumed: a get waited the sync timeout"
  ref_async_check $RUN $H "($lost submissions lost in a failover and placed again, the run over $took s after it)" \
    --async-lookahead 0.5
  kill "$SRV" 2>/dev/null
}
scenario lost 1 1

# dl_places itself, on c's last place of shard 0: its own (1); not for another incarnation, nor a place not
# given yet (0); unknown once the record is gone, as dl_commit removes it 256 versions on (-1)
rec=$($RCLI HGETALL "dl:{$RUN}:subs:0" | paste - - | awk -F'\t' '$2 ~ /^c:/ {print $1, $2}' | sort -n | tail -1)
seq=${rec%% *}; inc=$(echo "$rec" | cut -d' ' -f2 | cut -d: -f2)
[ -n "$seq" ] && [ -n "$inc" ] || fail "no record of c's places in dl:{$RUN}:subs:0"
next=$($RCLI HGET "dl:{$RUN}:shards" 0:next)
places() { $RCLI FCALL dl_places 1 "dl:{$RUN}:config" c "$@" | tr '\n' ' '; }
got="$(places "$inc" 0 "$seq")/$(places $((inc + 1)) 0 "$seq")/$(places "$inc" 0 "$next")"
$RCLI HDEL "dl:{$RUN}:subs:0" "$seq" > /dev/null
got="$got/$(places "$inc" 0 "$seq")"
[ "$got" = "1 /0 /0 /-1 " ] || fail "dl_places on c's place $seq (next $next): $got, expected 1 /0 /0 /-1"
say "dl_places: c's place $seq is its own, not another incarnation's; place $next not given; a record gone unknown"

scenario lost2 2 0
