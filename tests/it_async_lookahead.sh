#!/bin/sh
# it_async_lookahead.sh: async DiLoCo with --async-lookahead G (docs/async.md, "Starting ahead"): each
# worker starts its next interval at got + c (got - prev), c = G x stale / moved from the versions of its
# previous submission (worker/diloco/lookahead.c). Three workers of different speeds (so c varies), the
# quadratic trainer, Delayed Nesterov; once with the plain rule (Δ measured from the start) and once with
# the rebase rule (Δ measured from the base). Each run is bit-identical to the in-process replay of its
# order (tests/tools/ref_async, which recomputes every start from the versions it replayed) and differs
# from the replay without the lookahead. Staleness is unbounded in the plain run and K is large in the
# rebase run (runs with STALE refusals are replayed in it_async_stale_replay.sh).
# One worker of each run has device hooks (--device-hooks host, worker/trainers/host_device.c: the path of
# a CUDA worker, with the parameters in host memory): it takes its start through the load hook and its Δ
# against the device's snapshot (the start for plain, base for rebase), and the run stays bit-identical.
# Also: the flag's checks (async only, G in [0, 2], the summary line), and a Streaming mix (fragment
# alpha > 0), which it does not support yet, refused at open with the reason.
. "$(dirname "$0")/lib.sh"
H=10
start_redis
check() { ref_async_check "$1" $H "with its starts ahead" --async-lookahead 0; } # RUN: against the replay with the run's settings, and without
workers() { # STEPS DELAY DELAY DELAY HOOKED: fast, mid, slow; HOOKED (one of them) with device hooks
  steps=$1; hooked=$5; shift; set -- fast "$1" mid "$2" slow "$3"
  while [ $# -gt 0 ]; do
    hooks=""; [ "$1" = "$hooked" ] && hooks="--device-hooks host"
    start_worker "$1" --sync-every $H --steps "$steps" --heartbeat-interval 1 --step-delay-ms "$2" $hooks
    shift 2
  done
}

# the flag's checks
bin/coordinator init --redis "$URL" --run bad1 --trainer quadratic --numel 100 --async-lookahead 0.5 > "$TMP/bad1.txt" 2>&1 &&
  fail "a sync run took --async-lookahead"
grep -q "async setting" "$TMP/bad1.txt" || fail "bad1: $(cat "$TMP/bad1.txt")"
bin/coordinator init --redis "$URL" --run bad2 --trainer quadratic --numel 100 --async --async-lookahead 3 > "$TMP/bad2.txt" 2>&1 &&
  fail "--async-lookahead 3 was taken"
grep -q "async-lookahead" "$TMP/bad2.txt" || fail "bad2: $(cat "$TMP/bad2.txt")"
say "flags: a sync run and G = 3 refused"

RUN=ahead_plain
init_run $RUN --async --trainer quadratic --numel 40000 --shards 4 --workers 3 --dn-buffer-size 3 --async-lookahead 0.5
grep -q "workers start 0.5 ahead" "$TMP/init-$RUN.log" || fail "init summary: $(cat "$TMP/init-$RUN.log")"
[ "$($RCLI HGET "dl:{$RUN}:config" async_lookahead)" = 0.5 ] || fail "config async_lookahead: $($RCLI HGET "dl:{$RUN}:config" async_lookahead)"
NSRV=0; keep_servers 2
timeout 30 bin/worker --redis "$URL" --run $RUN --worker-id refused --steps 10 --sync-every $H --fragment-alpha 0.5 \
  > "$TMP/refused.log" 2>&1 && fail "a worker with --fragment-alpha 0.5 joined a lookahead run"
grep -q "async-lookahead" "$TMP/refused.log" || fail "worker with a fragment alpha: $(tail -3 "$TMP/refused.log")"
say "a worker with a fragment alpha is refused with the reason"
# a rebase run has --async-lookahead 0.5 unless told otherwise: the refusal says so, and how to allow an alpha
bin/coordinator init --redis "$URL" --run rb2 --trainer quadratic --numel 4000 --shards 4 --fragments 2 --async \
  --async-rule rebase > "$TMP/init-rb2.log" 2>&1 || fail "init rb2: $(cat "$TMP/init-rb2.log")"
timeout 30 bin/worker --redis "$URL" --run rb2 --worker-id refused2 --steps 10 --sync-every $H --fragment-alpha 0.5 \
  > "$TMP/refused2.log" 2>&1 && fail "a worker with --fragment-alpha 0.5 joined a rebase run"
grep "fragment alpha" "$TMP/refused2.log" | grep "default" | grep -q -- "--async-lookahead 0" ||
  fail "rb2: the refusal does not say the lookahead is rebase's default: $(grep ERROR "$TMP/refused2.log")"
workers 60 5 10 20 mid
wait_workers fast mid slow
check $RUN
device_hooks_used mid
for p in $(live_servers); do eval "kill \$SRV_s$p"; done

RUN=ahead_rebase
init_run $RUN --async --trainer quadratic --numel 40000 --shards 4 --workers 3 --dn-buffer-size 3 --async-lookahead 0.75 \
  --async-rule rebase --max-staleness 64
NSRV=0; keep_servers 2
workers 60 5 10 20 slow
wait_workers fast mid slow
check $RUN
device_hooks_used slow
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status.txt" 2>&1 || fail "coordinator status: $(cat "$TMP/status.txt")"
grep -q "async: Delayed Nesterov 3 (paper), rule rebase, workers start 0.75 ahead, max staleness 64" "$TMP/status.txt" ||
  fail "status: $(cat "$TMP/status.txt")"
grep -q "^submissions applied [0-9]" "$TMP/status.txt" || fail "status of an async run, no submissions line: $(head -3 "$TMP/status.txt")"
grep -q "open round" "$TMP/status.txt" && fail "status of an async run speaks of rounds: $(head -3 "$TMP/status.txt")"
say "coordinator status shows the rule, the lookahead and the submissions applied ($(grep -o '^submissions applied [0-9]*' "$TMP/status.txt"))"
# the limit is a tunable: coordinator control set-max-staleness (a rebase run keeps it within its window)
bin/coordinator control --redis "$URL" --run $RUN set-max-staleness 8 > "$TMP/ms.txt" 2>&1 || fail "set-max-staleness 8: $(cat "$TMP/ms.txt")"
[ "$($RCLI HGET "dl:{$RUN}:tunables" max_staleness)" = 8 ] || fail "max_staleness is $($RCLI HGET "dl:{$RUN}:tunables" max_staleness) after set-max-staleness 8"
bin/coordinator control --redis "$URL" --run $RUN set-max-staleness 0 > "$TMP/ms0.txt" 2>&1 && fail "a rebase run took max_staleness 0"
grep -q "max_staleness" "$TMP/ms0.txt" || fail "set-max-staleness 0: $(cat "$TMP/ms0.txt")"
[ "$($RCLI HGET "dl:{$RUN}:tunables" max_staleness)" = 8 ] || fail "a refused set-max-staleness changed the limit"
say "coordinator control set-max-staleness: 8 taken, 0 refused in a rebase run ($(cat "$TMP/ms0.txt" | cut -c1-120))"
# below the workers - 1 (3 workers: 2) it is set, and said: most submissions of equal workers would be refused
grep -q '"warning"' "$TMP/ms.txt" && fail "set-max-staleness 8 with 3 workers warned: $(cat "$TMP/ms.txt")"
bin/coordinator control --redis "$URL" --run $RUN set-max-staleness 1 > "$TMP/ms1.txt" 2>&1 || fail "set-max-staleness 1: $(cat "$TMP/ms1.txt")"
grep -q '"warning":"max_staleness 1 with 3 expected workers: .*use 2 or more' "$TMP/ms1.txt" ||
  fail "set-max-staleness 1 with 3 workers gave no warning: $(cat "$TMP/ms1.txt")"
[ "$($RCLI HGET "dl:{$RUN}:tunables" max_staleness)" = 1 ] || fail "set-max-staleness 1 was not set"
