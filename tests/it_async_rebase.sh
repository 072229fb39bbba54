#!/bin/sh
# it_async_rebase.sh: async DiLoCo with --async-rule rebase (each submission enters the outer step as
# g + theta_now - theta_base; the first run with --rebase-fraction 0.5: g + 0.5 (theta_now - theta_base))
# and Delayed Nesterov, three workers of different speeds (so staleness
# varies). The run is bit-identical to the in-process replay of its order (tests/tools/ref_async, which
# rebases with the theta of every version it replayed), and differs from the replay without the rule; it
# stays bit-identical while shard-servers are killed at random (kill -9, and deaths between log write and
# commit), which makes replacements rebuild the versions a submission may be based on from Redis.
# Redis keeps what the rule needs and no more: each shard's snapshot is at least K = --max-staleness
# versions behind it (so a load can rebuild K versions back), and not more than 2K + snapshot_every (one
# snapshot is prepared at a time: the next multiple of snapshot_every after the last one was written).
# (K is large enough that no submission is refused as STALE: it_async_stale_replay.sh replays refusals.)
# Also: the flag's checks (async only, K >= 1, default K = 4 x workers, --async-lookahead 0.5 by default:
# its runs start ahead, docs/async.md) and dl_set max_staleness within K.
. "$(dirname "$0")/lib.sh"
H=10; K=8; E=4
start_redis
check() { ref_async_check "$1" $H "(rebased)" --async-rule plain; } # RUN: against the replay with the run's settings, and without
check_durable() { # RUN: every shard's snapshot is K to 2K + E versions behind it
  n=$($RCLI HGET "dl:{$1}:config" shards); k=0
  while [ "$k" -lt "$n" ]; do
    v=$($RCLI HGET "dl:{$1}:shards" "$k:version"); snap=$($RCLI HGET "dl:{$1}:shards" "$k:snap")
    logs=$($RCLI HGET "dl:{$1}:shards" "$k:log" | tr ',' '\n' | grep -c .)
    sv=${snap%%.*}
    [ "$sv" -gt 0 ] || fail "$1 shard $k: no snapshot recorded after version 0 (version $v)"
    [ $((v - sv)) -ge $K ] || fail "$1 shard $k: snapshot $sv is less than $K versions behind version $v"
    [ $((v - sv)) -le $((2 * K + E)) ] || fail "$1 shard $k: snapshot $sv is more than 2K + E behind version $v: GC keeps too much"
    [ "$logs" -eq $((v - sv)) ] || fail "$1 shard $k: $logs log entries for versions $sv..$v"
    k=$((k + 1))
  done
  say "$1: snapshots $K to $((2 * K + E)) versions behind, log entries from there only"
}
workers() { # STEPS DELAY...: fast, mid, slow
  steps=$1; shift; set -- fast "$1" mid "$2" slow "$3"
  while [ $# -gt 0 ]; do start_worker "$1" --sync-every $H --steps "$steps" --heartbeat-interval 1 --step-delay-ms "$2"; shift 2; done
}

# the flag's checks
bin/coordinator init --redis "$URL" --run bad1 --trainer quadratic --numel 100 --async-rule rebase > "$TMP/bad1.txt" 2>&1 &&
  fail "a sync run took --async-rule rebase"
grep -q "async setting" "$TMP/bad1.txt" || fail "bad1: $(cat "$TMP/bad1.txt")"
bin/coordinator init --redis "$URL" --run bad2 --trainer quadratic --numel 100 --async --async-rule rebase --max-staleness 0 \
  > "$TMP/bad2.txt" 2>&1 && fail "a rebase run took --max-staleness 0 (no bound)"
grep -q "max-staleness K of 1 or more" "$TMP/bad2.txt" || fail "bad2: $(cat "$TMP/bad2.txt")"
init_run defaults --async --trainer quadratic --numel 100 --shards 2 --workers 3 --async-rule rebase
[ "$($RCLI HGET 'dl:{defaults}:config' rebase_window)" = 12 ] && [ "$($RCLI HGET 'dl:{defaults}:tunables' max_staleness)" = 12 ] ||
  fail "default window: $($RCLI HGET 'dl:{defaults}:config' rebase_window), want 4 x 3 workers"
grep -q "rebase x 1 on the last 12 versions, workers start 0.5 ahead" "$TMP/init-defaults.log" || fail "init summary: $(cat "$TMP/init-defaults.log")"
[ "$($RCLI HGET 'dl:{defaults}:config' async_lookahead)" = 0.5 ] || fail "default lookahead with rebase: $($RCLI HGET 'dl:{defaults}:config' async_lookahead)"
for bad in 0 13; do
  out=$($RCLI FCALL dl_set 1 'dl:{defaults}:config' max_staleness $bad 2>&1)
  echo "$out" | grep -q "must be in \[1, 12\]" || fail "dl_set max_staleness $bad in a run that holds 12 versions: $out"
done
[ "$($RCLI FCALL dl_set 1 'dl:{defaults}:config' max_staleness 2)" = OK ] || fail "dl_set max_staleness 2 refused"
say "flags: sync and unbounded runs refused, default K = 4 x workers and lookahead 0.5, max_staleness kept within [1, K]"

RUN=rebase_half
init_run $RUN --async --trainer quadratic --numel 40000 --shards 4 --workers 3 --dn-buffer-size 3 --snapshot-every $E \
  --async-rule rebase --max-staleness $K --rebase-fraction 0.5
NSRV=0; keep_servers 2 --lease-ttl-ms 2000
workers 100 5 10 20
wait_workers fast mid slow
check $RUN
check_durable $RUN
for p in $(live_servers); do eval "kill \$SRV_s$p"; done

RUN=rebase_storm
init_run $RUN --async --trainer quadratic --numel 40000 --shards 4 --workers 3 --dn-buffer-size 3 --snapshot-every $E \
  --async-rule rebase --max-staleness $K
NSRV=0
workers 80 10 20 30
storm 120 --lease-ttl-ms 600 --fault-crash-before-commit 0.05 -- fast mid slow
wait_workers fast mid slow
[ "$KILLS" -ge 3 ] || fail "only $KILLS kills happened: the storm proved too little"
check $RUN
say "under $KILLS shard-server kills"
