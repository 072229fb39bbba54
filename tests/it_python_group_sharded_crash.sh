#!/bin/sh
# it_python_group_sharded_crash.sh: kill -9 of one rank of a sharded group (tests/python/group_sharded.py: 2
# ranks on gloo, each holding its torch.chunk of every parameter, as fully_shard would) next to a single
# PyTorch worker c1, --heartbeat-timeout 4. The group leaves the run (torch.multiprocessing stops its other
# rank, which leaves, or the group is evicted), the run goes on with c1, the group started again registers
# and takes part in rounds again. Every closed round that lists the group has the arrival of both its ranks
# under that incarnation: a half group (one rank's chunks) is never a participant.
. "$(dirname "$0")/lib.sh"
RUN=psc; PY=/usr/bin/python3
round() { $RCLI HGET "dl:{$RUN}:state" round:0; }
member() { $RCLI HEXISTS "dl:{$RUN}:workers" g1; }
launch() { # NAME MEMBER: a launcher of its own
  $PY tests/python/group_sharded.py run "$URL" 100000 10 --member "$2" --out "$TMP/$1" --heartbeat 0.5 \
    --step-delay 0.02 > "$TMP/launcher-$1.log" 2>&1 &
  PIDS="$PIDS $!"; LAST=$!
}
rank_pid() { wait_until 60 "[ -s $TMP/$1/$RUN-g1.rank$2 ]" "rank $2's pid"; awk '/^pid/ {print $2}' "$TMP/$1/$RUN-g1.rank$2"; }
took_part_since() { for x in $(seq "$1" "$(round)"); do $RCLI HGET "dl:{$RUN}:f0:r$x" participants; done | grep -q "g1:"; }
start_redis
$PY tests/python/group_sharded.py init "$URL" $RUN --flag heartbeat_timeout=4 > "$TMP/init.log" 2>&1 || fail "init: $(cat "$TMP/init.log")"
start_server s1 --lease-ttl-ms 2000
mkdir -p "$TMP/c1" "$TMP/g1a" "$TMP/g1b"
launch c1 $RUN:c1:1; C1=$LAST
launch g1a $RUN:g1:2; GRP=$LAST
wait_until 90 'took_part_since 0' "a round with the group"
r1=$(rank_pid g1a 1)
start=$(round)
wait_until 30 '[ "$(round)" -ge $((start + 1)) ]' "one more round"
kill -9 "$r1"
killed_at=$(round)
say "kill -9 of rank 1 of the sharded group g1 at round $killed_at"
wait_until 15 '[ "$(member)" = 0 ]' "the group to leave the run"
wait "$GRP" && fail "the group's launcher exited 0 after a rank was killed"
after=$(round)
wait_until 20 '[ "$(round)" -ge $((after + 2)) ]' "the run to go on with c1 alone"
say "the group is out; rounds $after..$(round) closed without it"
launch g1b $RUN:g1:2
wait_until 90 '[ "$(member)" = 1 ]' "the group to register again"
back=$(round)
wait_until 60 "took_part_since $back" "the group to take part in a round after it came back"
alive "$C1" || fail "the worker c1 died"
say "the restarted group rejoined at round $back and syncs again"

# no half group: a round listing g1:<inc> has both ranks' arrivals g:g1:0 and g:g1:1 = <inc>
last=$(round)
for x in $(seq 0 $((last - 1))); do echo "HMGET dl:{$RUN}:f0:r$x participants g:g1:0 g:g1:1"; done | $RCLI > "$TMP/rounds.txt"
awk 'NR % 3 == 1 {p = $0} NR % 3 == 2 {a = $0} NR % 3 == 0 {
       inc = ""; n = split(p, ids, ","); for (i = 1; i <= n; i++) if (ids[i] ~ /^g1:/) inc = substr(ids[i], 4)
       if (inc == "") next
       with++; if (a != inc || $0 != inc) {print "round " (NR / 3 - 1) ": " p " with rank arrivals " a ", " $0; bad = 1}}
     END {print with + 0; exit bad}' "$TMP/rounds.txt" > "$TMP/half.txt" || fail "a half group in a round: $(cat "$TMP/half.txt")"
n=$(tail -n 1 "$TMP/half.txt")
[ "$n" -ge 2 ] || fail "only $n rounds with the group"
say "$n of $last closed rounds list the sharded group, each with both ranks' arrivals; none with half of it"
