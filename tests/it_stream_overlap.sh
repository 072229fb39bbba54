#!/bin/sh
# it_stream_overlap.sh: Streaming DiLoCo hides communication behind compute. One worker, 4 fragments,
# a compute window of 1 s per fragment (20 steps of 50 ms) and 200 ms of injected latency in every
# transfer: its training speed must stay within 5% of the same worker never syncing.
# test: alone (it bounds Streaming's slowdown to 5% of a run without syncs)
. "$(dirname "$0")/lib.sh"
STEPS=160
start_redis
init_run stream --trainer quadratic --numel 40000 --shards 4 --fragments 4 --workers 1
init_run nosync --trainer quadratic --numel 40000 --shards 4 --fragments 4 --workers 1
for RUN in stream nosync; do start_server "s$RUN" --lease-ttl-ms 2000; done
train_secs() { # jsonl -> seconds from join to the last step
  join=$(grep '"event":"join"' "$1" | sed 's/.*"t":\([0-9.]*\).*/\1/')
  last=$(grep "\"event\":\"step\",\"step\":$STEPS," "$1" | sed 's/.*"t":\([0-9.]*\).*/\1/')
  awk -v a="$join" -v b="$last" 'BEGIN { printf "%.3f", b - a }'
}
RUN=nosync; start_worker base --sync-every 1000000 --steps $STEPS --step-delay-ms 50 --heartbeat-interval 1
wait "$WRK_base" || fail "baseline worker failed"
RUN=stream; start_worker str --sync-every 80 --steps $STEPS --step-delay-ms 50 --heartbeat-interval 1 --simulate-latency-ms 200
wait "$WRK_str" || fail "streaming worker failed"
syncs=$(grep -c '"event":"sync"' "$TMP/str.jsonl")
[ "$syncs" -ge 6 ] || fail "only $syncs fragment syncs happened"
t0=$(train_secs "$TMP/base.jsonl"); t1=$(train_secs "$TMP/str.jsonl")
say "no sync: $t0 s; streaming with $syncs fragment syncs of 200+ ms each: $t1 s"
awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b <= a * 1.05) }' || fail "streaming slowed training by more than 5% ($t1 s vs $t0 s)"
