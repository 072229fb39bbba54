#!/bin/sh
# it_python_group_crash.sh: faults of a process group (tests/python/group_quad.py, 2 ranks, DDP on gloo)
# next to a C worker c1, --heartbeat-timeout 4. (1) kill -9 of rank 1 mid-run: the group leaves the run
# (its other rank is stopped by torch.multiprocessing and leaves, or the group is evicted), the run goes on
# with c1, the group started again registers and takes part in rounds again. Every closed round that lists
# the group has the arrival of both its ranks under that incarnation: a half group is never a participant.
# (2) SIGINT to rank 1 alone: both ranks stop after the same inner step (the stop agreed at the group's next
# collective: each raises Stopped there; a rank stopping alone left the other to fail in its next DDP
# all-reduce), the launcher exits 0, every process of the group is gone within 20 s (interpreters exit
# slowly on a loaded machine) and the group is no member (lib.sh group_signal). (3) The same with SIGTERM to
# rank 0 alone. (4) SIGTERM to rank 1 alone while the group joins (waiting as a joiner for an open round that
# waits for a slow worker c2): both ranks' joins end as a stop (Stopped from DiLoCo.open(): DILOCO_STOPPED),
# the launcher exits 0.
. "$(dirname "$0")/lib.sh"
RUN=pgcrash; NUMEL=20000
round() { $RCLI HGET "dl:{$RUN}:state" round:0; }
member() { $RCLI HEXISTS "dl:{$RUN}:workers" g1; }
start_group() {
  $PYTHON tests/python/group_quad.py "$URL" $RUN g1 100000 10 --ranks 2 --numel $NUMEL --seed 0 \
    --step-delay 0.02 --heartbeat 0.5 --start-method fork --out "$TMP/g1-$1" > "$TMP/py-g1-$1.log" 2>&1 &
  GRP=$!; PIDS="$PIDS $GRP"
}
rank_pid() { wait_until 60 "[ -s $TMP/g1-$1.rank$2 ]" "rank $2's pid"; awk '/^pid/ {print $2}' "$TMP/g1-$1.rank$2"; }
took_part_since() { for x in $(seq "$1" "$(round)"); do $RCLI HGET "dl:{$RUN}:f0:r$x" participants; done | grep -q "g1:"; }
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 4 --workers 2 --heartbeat-timeout 4
start_server s1 --lease-ttl-ms 2000
start_worker c1 --sync-every 10 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 20
start_group 1
wait_until 90 'took_part_since 0' "a round with the group"
r1=$(rank_pid 1 1)
start=$(round)
wait_until 30 '[ "$(round)" -ge $((start + 1)) ]' "one more round"
group_crash $RUN "$GRP" "$r1" "$WRK_c1" "start_group 2"

# SIGINT to rank 1 alone stops the whole group within seconds
group_signal $RUN INT 1 "$(rank_pid 2 0)" "$(rank_pid 2 1)" "$GRP" "$TMP/g1-2"

# SIGTERM to rank 0 alone (the rank that registered the group) does the same
start_group 3
wait_until 90 '[ "$(member)" = 1 ]' "the group to register again"
group_signal $RUN TERM 0 "$(rank_pid 3 0)" "$(rank_pid 3 1)" "$GRP" "$TMP/g1-3"
grep -q "process 0 terminated with signal" "$TMP/py-g1-3.log" && fail "rank 0 was killed by SIGTERM instead of stopping"
alive "$WRK_c1" || fail "the C worker died"

# (4) SIGTERM to rank 1 alone while the group joins: c2 joins at a step a second, so every round waits ~10 s
# for it, and the group, registered, waits as a joiner for the open round to close; rank 1's join gives up,
# it leaves, and every rank's join ends as a stop (DILOCO_STOPPED: Stopped from DiLoCo.open() on both ranks,
# "stopped 0"), the launcher exits 0 and the group is no member (rank 0 waited at the first fetch for good
# before)
start_worker c2 --sync-every 10 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 1000
wait_until 30 '[ "$($RCLI HEXISTS "dl:{$RUN}:workers" c2)" = 1 ]' "c2 to register"
slow=$(($(round) + 1))
wait_until 30 '[ "$(round)" -ge $slow ]' "c2's first round to open"
start_group 4
r0=$(rank_pid 4 0); r1=$(rank_pid 4 1)
wait_until 30 '[ "$(member)" = 1 ]' "the group to register while round $(round) waits for c2"
sleep 0.5
grep -q "^sync" "$TMP/g1-4.rank0" && fail "the group synced although the open round waits for c2"
kill -TERM "$r1"
wait_until 20 '! alive "$r0" && ! alive "$r1" && ! alive "$GRP"' "the joining group to stop after SIGTERM to rank 1"
wait "$GRP" || fail "the launcher exited $? after SIGTERM to a joining rank: $(tail -n 5 "$TMP/py-g1-4.log")"
for r in 0 1; do
  [ "$(sed -n 's/^stopped //p' "$TMP/g1-4.rank$r")" = 0 ] || fail "rank $r did not stop while joining: $(cat "$TMP/g1-4.rank$r")"
done
wait_until 10 '[ "$(member)" = 0 ]' "the group that stopped joining to be no member"
say "SIGTERM to rank 1 while the group joined (round $(round) waiting for c2): both ranks' joins ended as a stop, the launcher exited 0"
alive "$WRK_c1" && alive "$WRK_c2" || fail "a C worker died"
