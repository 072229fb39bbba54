#!/bin/sh
# it_evals_bounded.sh: the evaluator's stream dl:{R}:evals keeps the newest 100,000 evaluations, as the events
# stream keeps its newest 100,000 entries. It used to grow by one entry (some 60 bytes) per evaluation for
# the life of the run: `--evaluate-every 1` beside a run of fast rounds adds tens of thousands a day. Readers
# take the newest 500 (status, /status, /metrics, the dashboard's chart). A run's age is seeded: 100,200
# entries with IDs below any version's, then a real evaluator publishes one.
. "$(dirname "$0")/lib.sh"
RUN=evb
start_redis
init_run $RUN --trainer quadratic --numel 1000 --shards 2 --workers 1
K="dl:{$RUN}:evals"
i=1; while [ $i -le 100200 ]; do echo "XADD $K 0-$i loss 1 version 0 tokens 0 time 0"; i=$((i + 1)); done |
  redis-cli -p "$PORT" > /dev/null
[ "$($RCLI XLEN "$K")" = 100200 ] || fail "seeding: $($RCLI XLEN "$K") entries"
start_server s1
start_worker w --sync-every 5 --steps 0 --step-delay-ms 5 --heartbeat-interval 0.5
bin/worker --redis "$URL" --run $RUN --evaluate-every 1 > "$TMP/evaluator.log" 2>&1 &
PIDS="$PIDS $!"
newest() { $RCLI XREVRANGE "$K" + - COUNT 1 | head -n 1; }
wait_until 30 '! newest | grep -q "^0-"' "the evaluator's first entry"
n=$($RCLI XLEN "$K")
[ "$n" -le 100100 ] || fail "dl:{$RUN}:evals holds $n entries after an evaluation (100,000 and a stream node at most)"
say "$n evaluations kept, newest $(newest)"
