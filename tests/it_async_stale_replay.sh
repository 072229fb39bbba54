#!/bin/sh
# it_async_stale_replay.sh: async runs with a tight staleness bound (--max-staleness 1), where dl_submit
# refuses some of the slow worker's submissions as STALE, replay bit for bit. The worker trained the refused
# window from the versions its previous submission got, then fetched the current versions and trained on
# from them (worker/diloco/round.c: round_net, fetch_current; round_settle, params_apply with alpha 0; the
# lookahead cleared; the tokens not given back). Its reject event records the base of every shard of the
# refused submission (`bases`, lua/40_barriers.lua: reject_stale), from which tests/tools/ref_async replays
# that window. Each run: at least one STALE refusal in the events, each naming every shard of its fragment;
# the shards' digests equal the replay's, and differ from the replay that skips the refused windows
# (--skip-refused, the replay before this). Plain async with the lookahead and token weights (the paths a
# refusal changes), the rebase rule, and Streaming (2 fragments).
. "$(dirname "$0")/lib.sh"
STEPS=60
start_redis
one_run() { # RUN H FRAGMENTS WHAT -- INIT-FLAGS...: fast, mid and slow workers, checked against the replay
  RUN=$1; h=$2; nf=$3; said=$4; shift 5
  init_run $RUN --async --trainer quadratic --numel 12000 --shards $((2 * nf)) --fragments $nf --workers 3 \
    --dn-buffer-size 3 --max-staleness 1 "$@"
  NSRV=0; keep_servers 2
  i=0
  for w in fast mid slow; do
    i=$((i + 1))
    start_worker $w --sync-every $h --steps $STEPS --heartbeat-interval 1 --step-delay-ms $((3 * i * i))
  done
  wait_workers fast mid slow
  $RCLI XRANGE "dl:{$RUN}:events" - + > "$TMP/events-$RUN.txt"
  refused=$(grep -c '^STALE$' "$TMP/events-$RUN.txt")
  [ "$refused" -ge 1 ] || fail "$RUN: no submission was refused as STALE (the staleness bound proved too loose)"
  # every refusal names each shard of one fragment (2 shards per fragment): one line of bases per refusal
  awk '/^bases$/ {getline; print}' "$TMP/events-$RUN.txt" > "$TMP/bases-$RUN.txt"
  [ "$(grep -c . "$TMP/bases-$RUN.txt")" = "$refused" ] &&
    awk '$0 !~ /^[0-9]+:[0-9]+,[0-9]+:[0-9]+$/ {bad = 1} END {exit bad}' "$TMP/bases-$RUN.txt" ||
    fail "$RUN: $refused STALE refusals, bases recorded: $(tr '\n' ' ' < "$TMP/bases-$RUN.txt")"
  # async has no rounds: the worker says which version its refused submission was based on
  grep -q "WARN submission of fragment [0-9]* based on version [0-9]* refused as stale: " "$TMP/worker-slow.log" ||
    fail "$RUN: slow did not say its submission was refused: $(grep -h WARN "$TMP"/worker-*.log | head -n 3)"
  ! grep -h "lost (stale)" "$TMP"/worker-*.log || fail "$RUN: an async worker spoke of a round lost"
  ref_async_check $RUN $h "with the refused tries ($said)" --skip-refused
  grep -q "and $refused tries refused as STALE" "$TMP/ref-$RUN.log" || fail "$RUN: the replay did not take the $refused refusals: $(cat "$TMP/ref-$RUN.log")"
  for p in $(live_servers); do eval "kill \$SRV_s$p"; done
  rm -f "$TMP"/*.jsonl
}
one_run stale_plain 10 1 "plain async, starts ahead, weighted by tokens" -- --async-lookahead 0.5 \
  --weight-by tokens --weight-ref-tokens 10
one_run stale_stream 10 2 "Streaming, 2 fragments" --
one_run stale_rebase 10 1 "the rebase rule, starts ahead" -- --async-rule rebase --async-lookahead 0.75
