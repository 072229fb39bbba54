#!/bin/sh
# it_group_dylu.sh: DyLU with a process group (worker/diloco/group.c dylu_offer / dylu_adopt). A group of
# 2 ranks (tests/tools/group_worker, 20 ms per inner step) and a single bin/worker (10 ms per step), both
# --dylu, in a run with --dylu --dylu-base-sync-every 40: the run assigns the group H = 20 (its speed is
# rank 0's: the ranks step together) and the single worker H = 40, and the group's two ranks take the
# group's H at the same sync, so they sync at the same inner steps, every ~20. (Before, a group refused
# DyLU at open: "process groups do not support DyLU yet".)
. "$(dirname "$0")/lib.sh"
RUN=gdylu
start_redis
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 2 --dylu --dylu-base-sync-every 40
start_server s1 --lease-ttl-ms 2000
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps 100000 --sync-every 40 \
  --dylu --heartbeat-ms 500 --step-delay-ms 20 > "$TMP/g1.out" 2> "$TMP/group-g1.log" &
PIDS="$PIDS $!"
start_worker fast --dylu --sync-every 40 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 10
wait_until 30 'near "$(dylu_h g1)" 20 && near "$(dylu_h fast)" 40' "H to follow speed (group g1 $(dylu_h g1), fast $(dylu_h fast))"
say "status shows H: group g1 $(dylu_h g1), fast $(dylu_h fast)"
# a rank's inner steps at each of its syncs (the last field of its sync lines)
steps_of() { grep "^sync rank $1 " "$TMP/g1.out" | awk '{print $NF}'; }
gap() { steps_of "$1" | tail -n 2 | awk 'NR==1 {a=$1} NR==2 {print $1 - a}'; }
wait_until 40 'near "$(gap 0)" 20 && near "$(gap 1)" 20' "the group's ranks to sync at the group's H (gaps: rank 0 $(gap 0), rank 1 $(gap 1))"
grep -q '^error' "$TMP/g1.out" && fail "a rank failed: $(grep '^error' "$TMP/g1.out")"
# the ranks sync at the same steps: every sync both reported, at the same step count
n=$(($(steps_of 0 | wc -l) < $(steps_of 1 | wc -l) ? $(steps_of 0 | wc -l) : $(steps_of 1 | wc -l)))
[ "$(steps_of 0 | head -n "$n")" = "$(steps_of 1 | head -n "$n")" ] \
  || fail "the ranks synced at different steps: rank 0 $(steps_of 0 | tr '\n' ' '), rank 1 $(steps_of 1 | tr '\n' ' ')"
say "the group's ranks synced at the same $n steps ($(steps_of 0 | tail -n 4 | tr '\n' ' ')), every $(gap 0) at the end"
kill -0 "$WRK_fast" 2>/dev/null || fail "the single worker exited: $(tail -n 5 "$TMP/worker-fast.log")"
