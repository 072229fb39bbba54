#!/bin/sh
# it_group_stream_rejoin.sh: a Streaming process group evicted mid-interval (worker/diloco/group.c: the CHECK
# between fragment boundaries, group_step) stops at the same inner step on every rank, registers again and
# goes on with the run's fragments. A run of 2 fragments of 2 shards, H = 10 (a fragment every 5 steps), two
# bin/workers w1, w2 and a group g3 of 2 ranks, all at 200 ms a step. Right after one of the group's boundaries
# (a new sync line: its round just ended, the next is 1 s away) the group's process is SIGSTOPped until the
# reaper evicts it, then SIGCONT. Checks: both ranks learnt of the eviction together, at the CHECK between
# boundaries (the same inner step on both) or, when the stop still fell in a round (a loaded box), at that
# round; the group's second incarnation arrived, with both ranks, in each fragment's last closed round (it went
# on in the run's fragment order); no rank failed. (The fragment-schedule exactness of a Streaming group is
# it_group_stream's; this is its eviction path.)
# test: light (it waits more than it computes: 3 s of CPU in 18 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=gsrejoin; H=10; STEPS=80
start_redis
init_run $RUN --trainer quadratic --numel 4000 --shards 4 --fragments 2 --workers 3 --min-workers 2 --seed 5 \
  --heartbeat-timeout 0.8
start_server s1 --lease-ttl-ms 2000
for w in w1 w2; do start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 0.2 --step-delay-ms 200; done
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g3 --ranks 2 --steps 100000 --sync-every $H \
  --heartbeat-ms 200 --step-delay-ms 200 > "$TMP/g3.out" 2> "$TMP/group-g3.log" &
G3=$!; PIDS="$PIDS $G3"
round() { $RCLI HGET "dl:{$RUN}:state" "round:$1"; }
syncs() { grep -c '^sync rank 0 ' "$TMP/g3.out"; }
wait_until 20 '[ "$(syncs)" -ge 2 ]' "g3's first two syncs"
n=$(syncs)
wait_until 10 '[ "$(syncs)" -gt $n ]' "g3's next boundary" 0.02
kill -STOP $G3
wait_until 5 '[ "$($RCLI HEXISTS "dl:{$RUN}:workers" g3)" = 0 ]' "g3 to be evicted"
kill -CONT $G3
say "g3 stopped and evicted (rounds closed: fragment 0 $(round 0), fragment 1 $(round 1)); continued"
learnt() { grep -c "the group was evicted\|did not complete for the group (rank [0-9]*: evicted" "$TMP/group-g3.log"; }
wait_until 10 '[ "$(learnt)" -ge 2 ]' "both ranks of g3 to learn of the eviction"
if grep -q "the group was evicted" "$TMP/group-g3.log"; then
  steps=$(sed -n 's/.*the group was evicted .* during inner step \([0-9]*\) of .*/\1/p' "$TMP/group-g3.log" | sort -u)
  [ "$(grep -c 'the group was evicted' "$TMP/group-g3.log")" -eq 2 ] && [ "$(echo "$steps" | wc -l)" -eq 1 ] ||
    fail "the ranks did not stop at one step: $(grep 'evicted' "$TMP/group-g3.log")"
  how="at the CHECK, both ranks after inner step $steps"
else
  how="at a round (the stop fell in one)"
fi
wait_workers w1 w2
grep -q '^error' "$TMP/g3.out" && fail "a rank of g3 failed: $(grep '^error' "$TMP/g3.out")"
inc=$($RCLI XRANGE "dl:{$RUN}:events" - + | awk '/^join$/ {j = 1; next} j && /^worker$/ {getline; w = $0; next}
  j && /^inc$/ {getline; if (w == "g3") i = $0; j = 0} END {print i}')
[ -n "$inc" ] && [ "$inc" -ge 2 ] || fail "g3 did not register again (last incarnation '$inc')"
for f in 0 1; do
  last=$(($(round $f) - 1))
  set -- $($RCLI HMGET "dl:{$RUN}:f$f:r$last" participants g:g3:0 g:g3:1)
  case ",$1," in *",g3:$inc,"*) ;; *) fail "fragment $f's last round $last closed without g3's incarnation $inc: $1";; esac
  [ "$2" = "$inc" ] && [ "$3" = "$inc" ] || fail "fragment $f's last round: g3's rank arrivals '$2' '$3', want $inc"
done
say "the ranks learnt of the eviction $how; g3 (incarnation $inc) was in both fragments' last rounds with both ranks"
