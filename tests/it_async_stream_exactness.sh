#!/bin/sh
# it_async_stream_exactness.sh: async Streaming DiLoCo: every H/F steps a worker submits the next fragment
# on its own, and the fragment takes the versions it got at the next boundary (worker/diloco/streaming.c,
# async.c). Three workers of different speeds, the quadratic trainer, Delayed Nesterov; 2 fragments of 2
# shards (H = 10: a fragment every 5 steps) and once 3 fragments of 2 shards (H = 12: every 4 steps, so a
# fragment's later intervals, (F-1) H/F steps from its start, differ from one interval). Each fragment is an
# order of its own in Redis; the in-process replay of those orders (tests/tools/ref_async: one line of
# versions per fragment, the worker's fragment schedule) gives the shards' digests bit for bit, and a replay
# with a wrong setting differs:
#   plain                          one worker joining mid-run, from the versions each fragment had then
#                                  (replayed as if H were 20: the schedule matters)
#   --async-lookahead 0.5          each fragment's next interval starts ahead, its Δ from that start
#                                  (replayed without the lookahead); also with 3 fragments
#   --async-lookahead 0.75, rebase Δ from the base, rebased by the servers (replayed with the plain rule)
#   --weight-by tokens, --staleness-weight sqrt   a fragment's first Δ weighs its (f+1) H/F steps, later
#                                  ones H (replayed with the rebase rule)
# One worker of the 3-fragment and of the rebase run has device hooks (--device-hooks host: a CUDA worker's
# path), through which it takes each fragment's start and measures its Δ against the device's snapshot.
# Staleness is unbounded, or K large for rebase (runs with STALE refusals, Streaming too, are replayed in
# it_async_stale_replay.sh).
. "$(dirname "$0")/lib.sh"
STEPS=60; JOINER=-
start_redis
one_run() { # RUN H FRAGMENTS HOOKED WHAT OFF-ARGS -- INIT-FLAGS...: three workers (HOOKED, one of them or
  # -, through device hooks), checked against the replay
  RUN=$1; h=$2; nf=$3; hooked=$4; said=$5; off=$6; shift 7
  init_run $RUN --async --trainer quadratic --numel 12000 --shards $((2 * nf)) --fragments $nf --workers 3 \
    --dn-buffer-size 3 "$@"
  [ "$($RCLI HGET "dl:{$RUN}:config" frag_bounds)" = "$(seq -s, 0 2 $((2 * nf)))" ] ||
    fail "$RUN: fragments $($RCLI HGET "dl:{$RUN}:config" frag_bounds), want 2 shards each"
  NSRV=0; keep_servers 2
  i=0
  for w in fast mid slow; do
    i=$((i + 1)); hooks=""; [ $w = "$hooked" ] && hooks="--device-hooks host"
    [ $w = "$JOINER" ] && wait_until 20 '[ "$(submissions $RUN fast)" -ge 3 ]' "fast's first submissions"
    start_worker $w --sync-every $h --steps $STEPS --heartbeat-interval 1 --step-delay-ms $((5 * i)) $hooks
  done
  wait_workers fast mid slow
  ref_async_check $RUN $h "$said" $off
  [ "$hooked" = - ] || device_hooks_used "$hooked"
  for p in $(live_servers); do eval "kill \$SRV_s$p"; done
  rm -f "$TMP"/*.jsonl
}
JOINER=slow # (it starts once fast has made 3 submissions)
one_run stream_plain 10 2 - "of its fragments' orders, slow joining late" "--sync-every 20" --
grep -q "worker slow joined run stream_plain at version [1-9]" "$TMP/worker-slow.log" ||
  fail "slow did not join mid-run: $(grep joined "$TMP/worker-slow.log")"
JOINER=-
one_run stream_ahead 10 2 - "with its starts ahead" "--async-lookahead 0" -- --async-lookahead 0.5
one_run stream_ahead3 12 3 mid "with its starts ahead" "--async-lookahead 0" -- --async-lookahead 0.5
one_run stream_rebase 10 2 slow "with its starts ahead and the rebase rule" "--async-rule plain" -- \
  --async-lookahead 0.75 --async-rule rebase --max-staleness 64
one_run stream_weighted 10 2 - "weighted by its tokens and staleness" "--async-rule rebase" -- \
  --weight-by tokens --weight-ref-tokens 10 --staleness-weight sqrt --staleness-ref 1
