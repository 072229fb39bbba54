#!/bin/sh
# it_sync_stale_bytes.sh: a sync's bytes_up (diloco_sync_info, the worker's `sync` telemetry) counts only
# the pseudo-gradient bytes that sync sent. A worker kicked while it trains (its heartbeat learns it at
# once) loses its round: that sync sends nothing, registers again and takes the parameters again, so it
# reports bytes_up 0, not the bytes of the round before. It is the run's only worker, so it registers into
# the round it left, whose parameters it holds: it fetches none of them (bytes_down 0; worker/diloco/fetch.c
# leaves out the shards held at their committed version: before, bytes_down was the whole vector again).
. "$(dirname "$0")/lib.sh"
RUN=stalebytes; NUMEL=20000
syncs() { n=$(grep -c '"event":"sync"' "$TMP/w1.jsonl" 2>/dev/null); echo "${n:-0}"; }
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 2 --workers 1
start_server s1 --lease-ttl-ms 2000
# 1 s of training per round; heartbeats every 0.1 s notice a kick long before the next sync
start_worker w1 --sync-every 20 --steps 0 --heartbeat-interval 0.1 --step-delay-ms 50
wait_until 20 '[ "$(syncs)" -ge 2 ]' "two syncs"
full=$(grep '"event":"sync"' "$TMP/w1.jsonl" | tail -n 1)
[ "$(echo "$full" | field bytes_up)" -eq $((NUMEL * 2)) ] ||
  fail "a normal bf16 sync of $NUMEL parameters should send $((NUMEL * 2)) bytes: $full"
n=$(syncs)
wait_until 5 '[ "$(syncs)" -gt $n ]' "the next sync"
$RCLI FCALL dl_kick 1 "dl:{$RUN}:config" w1 > /dev/null || fail "dl_kick"
wait_until 15 'grep -q "\"stale\":true" "$TMP/w1.jsonl"' "the kicked worker's lost round"
stale=$(grep '"stale":true' "$TMP/w1.jsonl" | head -n 1)
grep -q "heartbeat: UNKNOWN_WORKER" "$TMP/worker-w1.log" || fail "the heartbeat did not notice the kick before the sync: $stale"
[ "$(echo "$stale" | field bytes_up)" -eq 0 ] || fail "the lost round sent nothing but reports bytes_up: $stale"
[ "$(echo "$stale" | field bytes_down)" -eq 0 ] || fail "the lost round fetched parameters it held at their committed version: $stale"
grep -q "fragment 0: 2 of its 2 shard(s) held at their committed version" "$TMP/worker-w1.log" ||
  fail "w1 does not say it held both shards: $(grep -i held "$TMP/worker-w1.log")"
n=$(syncs)
wait_until 10 '[ "$(syncs)" -gt $((n + 1)) ]' "syncs after registering again"
[ "$(grep '"event":"sync"' "$TMP/w1.jsonl" | tail -n 1 | field bytes_up)" -eq $((NUMEL * 2)) ] || fail "syncs after the kick"
say "normal sync: $((NUMEL * 2)) bytes up; the lost round: $stale"
