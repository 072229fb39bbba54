#!/bin/sh
# it_group_repair.sh: a process group meets a corrupt shard: its ranks wait for `coordinator repair` together,
# resume after it together, and a stop asked of one rank during the wait stops them all.
#
# A sync run of 4 shards: a group g1 of 2 ranks (tests/tools/group_worker, each rank moving 2 shards) beside a
# bin/worker w2. While they train, the servers are killed, a payload byte range of the newest log entry of a
# shard is overwritten and two servers start: the shard is marked corrupt, the group's round fails CORRUPT,
# and its ranks wait (group.c recover: a collective a second carries each rank's stop and rank 0's look at
# the marks).
#  1. `coordinator repair`: both ranks sync again at the repaired version or later, and w2 too;
#  2. the same again (another shard), then rank 1 alone is asked to stop during the wait (--stop-file, as
#     its host's signal handler would): both ranks stop after the same inner step within 5 s, the group
#     exits 0, and it is no member. Waiting apart (each rank in repair_wait, before), rank 1 returned alone
#     and rank 0 waited on for the repair (here: for ever; the part times out);
#  3. repair again: w2 syncs twice more alone and exits 0 at the run's shutdown.
# test: light (it waits more than it computes: 3 s of CPU in 16 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=grepair; H=5
start_redis
init_run $RUN --trainer quadratic --numel 20000 --shards 4 --workers 2 --snapshot-every 100 --heartbeat-timeout 30
TTL="--lease-ttl-ms 1000"
SH="dl:{$RUN}:shards"
start_server s1 $TTL
start_server s2 $TTL
last_ref() { r=$($RCLI HGET "$SH" "$1:$2"); r=${r##*,}; echo "dl:{$RUN:$1}:$2:${r%.*}:${r#*.}"; }
n_waits() { grep -c "durable state is corrupt.*waiting for it" "$TMP/group-g1.log"; }
syncs() { grep -c "^sync rank $1 " "$TMP/g1.out"; }
w2_syncs() { grep -c '"event":"sync"' "$TMP/w2.jsonl"; }
# corrupt SHARD OLD_SERVERS NEW_SERVERS: the servers killed, the shard's newest log entry overwritten, new
# servers started; then the group waits for a repair (its log says so once more)
corrupt() {
  waits=$(n_waits)
  for s in $2; do eval "kill -9 \$SRV_$s"; done
  bad=$(last_ref "$1" log)
  [ "$($RCLI EXISTS "$bad")" = 1 ] || fail "no blob $bad"
  $RCLI SETRANGE "$bad" 400 XXXXXXXX > /dev/null
  for s in $3; do start_server "$s" $TTL; done
  wait_until 30 '[ "$(n_waits)" -gt "$waits" ]' "the group to wait for a repair of shard $1"
  say "shard $1's entry $bad corrupted; the group waits for a repair"
}
repair() { bin/coordinator repair --redis "$URL" --run $RUN > "$TMP/repair.log" 2>&1 || fail "repair: $(cat "$TMP/repair.log")"; }

build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps 0 --sync-every $H \
  --heartbeat-ms 300 --step-delay-ms 20 --stop-rank 1 --stop-file "$TMP/stop" > "$TMP/g1.out" 2> "$TMP/group-g1.log" &
G=$!; PIDS="$PIDS $G"
start_worker w2 --sync-every $H --steps 0 --heartbeat-interval 0.3 --step-delay-ms 20
wait_until 30 '[ "$($RCLI HGET $SH 1:version)" -ge 4 ]' "version 4"

say "1. a corrupt shard, then the repair: the group waits, then both ranks sync again"
corrupt 1 "s1 s2" "s3 s4"
sleep 3 # the ranks keep waiting together (collectives a second apart), neither alone
alive $G || fail "the group exited while waiting for the repair: $(grep -v '^sync' "$TMP/g1.out" | tail -n 3)"
n0=$(syncs 0); n1=$(syncs 1); m=$(w2_syncs)
repair
v=$($RCLI HGET $SH 1:version)
wait_until 30 '[ "$(syncs 0)" -ge $((n0 + 2)) ] && [ "$(syncs 1)" -ge $((n1 + 2)) ] && [ "$(w2_syncs)" -ge $((m + 2)) ]' \
  "both ranks and w2 to sync twice after the repair"
got=$(grep "^sync rank 1 " "$TMP/g1.out" | tail -n 1 | sed 's/.* version \([0-9]*\) .*/\1/')
[ "$got" -ge "$v" ] || fail "rank 1 syncs at version $got, below the repaired version $v"
grep -q "no shard of the run is marked corrupt any more" "$TMP/group-g1.log" || fail "the group did not say the repair ended its wait"
say "repaired at version $v: both ranks synced twice more (rank 1 now at version $got)"

say "2. corrupt again, then rank 1 alone asked to stop while the group waits: both ranks stop"
corrupt 2 "s3 s4" "s5 s6"
t0=$(date +%s)
touch "$TMP/stop"
wait_until 5 '! kill -0 $G 2>/dev/null' "the group to stop (rank 1 asked during the repair wait)"
wait "$G" || fail "the group exited with status $?: $(grep -v '^sync' "$TMP/g1.out" | tail -n 4)"
group_stopped_together "$TMP/g1.out" "a stop during the repair wait"
[ "$($RCLI HEXISTS "dl:{$RUN}:workers" g1)" = 0 ] || fail "the stopped group is still a member of the run"
say "both ranks stopped after step $s0, $(( $(date +%s) - t0 )) s after rank 1 was asked; the group left"

say "3. repair again: w2 goes on alone"
m=$(w2_syncs)
repair
wait_until 30 '[ "$(w2_syncs)" -ge $((m + 2)) ]' "w2 to sync twice more alone"
bin/coordinator control --redis "$URL" --run $RUN shutdown > "$TMP/shutdown.log" 2>&1 || fail "shutdown: $(cat "$TMP/shutdown.log")"
wait_workers w2
say "w2 synced twice more after the second repair and stopped at the shutdown"
