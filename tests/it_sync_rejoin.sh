#!/bin/sh
# it_sync_rejoin.sh: a sync run that every worker left behaves like a fresh run (docs/PROTOCOL.md,
# "Barrier target"). `coordinator init --workers 2`; two workers train a few rounds and leave normally;
#  A. two new workers (new ids) that start together: every round from then on closes with both;
#  B. after they left too, a lone new worker closes no round (the barrier waits for the operator's 2,
#     as in a fresh run) until a second one joins; then both take part in every round.
. "$(dirname "$0")/lib.sh"
RUN=rejoin
round() { $RCLI HGET "dl:{$RUN}:state" round:0; }
target() { $RCLI HGET "dl:{$RUN}:state" target_workers; }
# participants R: how many workers round R closed with (0 while it is open)
participants() { $RCLI HGET "dl:{$RUN}:f0:r$1" participants | awk -F, '{n = NF} END {print n + 0}'; }
# all_rounds_with_two FROM TO: every round in [FROM, TO) closed with 2 participants
all_rounds_with_two() {
  r=$1
  while [ "$r" -lt "$2" ]; do
    n=$(participants "$r")
    [ "$n" -eq 2 ] || fail "round $r closed with $n participant(s), expected 2 ($($RCLI HGET "dl:{$RUN}:f0:r$r" participants))"
    r=$((r + 1))
  done
}
leave_all() { for p in "$@"; do wait "$p" || fail "a worker exited with status $?"; done; }
WFLAGS="--sync-every 20 --heartbeat-interval 0.5 --step-delay-ms 10"

start_redis
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 2
start_server s1 --lease-ttl-ms 2000
start_worker w1 $WFLAGS --steps 60
start_worker w2 $WFLAGS --steps 60
leave_all "$WRK_w1" "$WRK_w2"
[ "$($RCLI HLEN "dl:{$RUN}:workers")" -eq 0 ] || fail "the first workers did not leave"
[ "$(target)" -eq 2 ] || fail "after every worker left, the barrier target is $(target), not the operator's 2"
say "the first two workers left at round $(round); target_workers $(target)"

# ---- A: two new workers that start together
r0=$(round)
start_worker n1 $WFLAGS --steps 60
start_worker n2 $WFLAGS --steps 60
leave_all "$WRK_n1" "$WRK_n2"
r1=$(round)
[ "$r1" -ge $((r0 + 3)) ] || fail "the new workers closed only rounds $r0..$r1"
all_rounds_with_two "$r0" "$r1"
say "A: rounds $r0..$((r1 - 1)) closed with 2 participants each"

# ---- B: a lone worker waits for the second, as in a fresh run
start_worker m1 $WFLAGS --steps 0
wait_until 10 '$RCLI HEXISTS "dl:{$RUN}:workers" m1 | grep -q 1' "m1 to register"
wait_until 10 '$RCLI HEXISTS "dl:{$RUN}:f0:r$r1" a:m1 | grep -q 1' "m1 to arrive at round $r1"
sleep 2
[ "$(round)" -eq "$r1" ] || fail "a lone worker closed round $r1 alone ($(participants "$r1") participant(s)); the operator asked for 2"
start_worker m2 $WFLAGS --steps 0
wait_until 20 '[ "$(round)" -ge $((r1 + 3)) ]' "rounds to close once the second worker joined"
all_rounds_with_two "$r1" "$(round)"
say "B: the lone worker waited at round $r1; with the second, rounds $r1..$(($(round) - 1)) closed with 2"
