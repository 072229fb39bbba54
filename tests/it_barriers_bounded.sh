#!/bin/sh
# it_barriers_bounded.sh: a run keeps the barriers of its last rounds only, however fast its rounds are.
# A closed barrier dl:{R}:f<f>:r<r> used to be kept one day (EXPIRE 86400) and nothing else: a run of fast
# rounds kept every round of the last day, about 200 bytes each (measured: 25 rounds a second, H = 1, made
# 2.16 million keys and 430 MB a day; a fragment of a Streaming run as many again). Now closing round r also
# drops the barrier of round r - K of its fragment (K: the config's barriers_kept, absent 10000; the day's
# expiry stays), so at most K closed barriers a fragment remain. Nothing reads one that old: a shard commits
# the round at its version, never more than a few rounds behind the open one, and dl_barrier answers
# `expired` for a round gone, as after the day. Seeded here: barriers_kept 5, 30 rounds.
. "$(dirname "$0")/lib.sh"
RUN=bar
start_redis
init_run $RUN --trainer quadratic --numel 1000 --shards 2 --workers 1
$RCLI HSET "dl:{$RUN}:config" barriers_kept 5 > /dev/null
start_server s1
start_worker w --sync-every 1 --steps 30 --heartbeat-interval 0.5
wait_workers w
round=$($RCLI HGET "dl:{$RUN}:state" round:0)
[ "$round" -ge 30 ] || fail "the run closed $round rounds (30 expected)"
n=$($RCLI --scan --pattern "dl:{$RUN}:f0:r*" | wc -l)
[ "$n" -le 6 ] || fail "$n barrier keys kept after $round rounds (5 closed and the open one expected)"
for r in $((round - 5)) $((round - 1)); do
  $RCLI HGET "dl:{$RUN}:f0:r$r" participants | grep -q '^w:' || fail "the barrier of round $r (one of the last 5) is gone"
done
[ "$($RCLI TTL "dl:{$RUN}:f0:r$((round - 1))")" -gt 0 ] || fail "a closed barrier has no expiry"
[ "$($RCLI HGET "dl:{$RUN}:f0:r$round" state)" = open ] || fail "the open barrier is gone"
# a round gone reads as expired, as after the day's expiry
$RCLI FCALL dl_barrier 1 "dl:{$RUN}:config" 0 3 | head -n 1 | grep -qx expired || fail "round 3's barrier does not read expired"
say "$n barrier keys after $round rounds"
