#!/bin/sh
# it_stream_final_sync.sh: a worker that ends a Streaming DiLoCo run early with a force sync (--final-sync,
# diloco_force_sync: every fragment at once) takes the fragments in the run's order (worker/diloco/
# streaming.c, stream_force_order). Three workers, 2 fragments, H = 20 (a fragment every 10 steps), 100 ms a
# step. w3 trains 30 steps: its boundaries send fragment 0, 1, 0, so it ends with fragment 0 one round
# ahead of fragment 1, as the run is. Its force sync must take fragment 1 first, which w1 and w2 send next;
# in index order it would wait at fragment 0's next round for w1 and w2 while they waited for it at
# fragment 1's, for ever. Checks: every worker finishes, w3's force sync took part in round 1 of fragment 1
# and round 2 of fragment 0, and every round of both fragments closes.
# test: light (it waits more than it computes: 2 s of CPU in 9 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=streamfinal; H=20; F=2
start_redis
init_run $RUN --trainer quadratic --numel 4000 --shards 2 --fragments $F --workers 3 --seed 3
start_server s1 --lease-ttl-ms 2000
round() { $RCLI HGET "dl:{$RUN}:state" round:$1; }
for w in w1 w2; do start_worker $w --sync-every $H --steps 70 --heartbeat-interval 0.2 --step-delay-ms 100; done
start_worker w3 --sync-every $H --steps 30 --heartbeat-interval 0.2 --step-delay-ms 100 --final-sync
wait_until 30 '! alive "$WRK_w1" && ! alive "$WRK_w2" && ! alive "$WRK_w3"' \
  "every worker to finish (rounds closed: fragment 0 $(round 0), fragment 1 $(round 1); a hang here is a force sync out of the run's order)"
for w in w1 w2 w3; do eval "wait \$WRK_$w" || fail "$w exited with status $?"; done
for fr in 1:1 0:2; do
  f=${fr%%:*}; r=${fr#*:}
  $RCLI HGET "dl:{$RUN}:f$f:r$r" participants | grep -q "w3:" ||
    fail "w3 is not a participant of round $r of fragment $f: $($RCLI HGET "dl:{$RUN}:f$f:r$r" participants)"
done
[ "$(shard_versions $RUN)" = "$(round 0) $(round 1)" ] || fail "shard versions $(shard_versions $RUN), rounds $(round 0) $(round 1)"
say "w3's force sync took fragment 1's round 1, then fragment 0's round 2; every round closed (versions $(shard_versions $RUN))"
