#!/bin/sh
# it_python_group_sharded_crash.sh: kill -9 of one rank of a sharded group (tests/python/group_sharded.py: 2
# ranks on gloo, each holding its torch.chunk of every parameter, as fully_shard would) next to a single
# PyTorch worker c1, --heartbeat-timeout 4. The group leaves the run (torch.multiprocessing stops its other
# rank, which leaves, or the group is evicted), the run goes on with c1, the group started again registers
# and takes part in rounds again. Every closed round that lists the group has the arrival of both its ranks
# under that incarnation: a half group (one rank's chunks) is never a participant. Then SIGTERM to rank 0 of
# the restarted group: both ranks stop after the same step, the launcher exits 0, every process of the group
# is gone within 20 s and the group is no member (lib.sh group_signal).
. "$(dirname "$0")/lib.sh"
RUN=psc; PY=$PYTHON
round() { $RCLI HGET "dl:{$RUN}:state" round:0; }
launch() { # NAME MEMBER: a launcher of its own
  $PY tests/python/group_sharded.py run "$URL" 100000 10 --member "$2" --out "$TMP/$1" --heartbeat 0.5 \
    --step-delay 0.02 > "$TMP/launcher-$1.log" 2>&1 &
  PIDS="$PIDS $!"; LAST=$!
}
rank_pid() { wait_until 60 "[ -s $TMP/$1/$RUN-g1.rank$2 ]" "rank $2's pid"; awk '/^pid/ {print $2}' "$TMP/$1/$RUN-g1.rank$2"; }
start_redis
$PY tests/python/group_sharded.py init "$URL" $RUN --flag heartbeat_timeout=4 > "$TMP/init.log" 2>&1 || fail "init: $(cat "$TMP/init.log")"
start_server s1 --lease-ttl-ms 2000
mkdir -p "$TMP/c1" "$TMP/g1a" "$TMP/g1b"
launch c1 $RUN:c1:1; C1=$LAST
launch g1a $RUN:g1:2; GRP=$LAST
wait_until 90 '$RCLI HGET "dl:{$RUN}:f0:r0" participants | grep -q g1:' "a round with the group"
r1=$(rank_pid g1a 1)
start=$(round)
wait_until 30 '[ "$(round)" -ge $((start + 1)) ]' "one more round"
group_crash $RUN "$GRP" "$r1" "$C1" "launch g1b $RUN:g1:2; GRP=\$LAST"

# SIGTERM to rank 0 alone (the rank that registered the group) stops both ranks after the same step, and the
# group leaves the run
group_signal $RUN TERM 0 "$(rank_pid g1b 0)" "$(rank_pid g1b 1)" "$GRP" "$TMP/g1b/$RUN-g1"
grep -q "process 0 terminated with signal" "$TMP/launcher-g1b.log" && fail "rank 0 was killed by SIGTERM instead of stopping"
alive "$C1" || fail "the worker c1 died"
