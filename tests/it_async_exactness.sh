#!/bin/sh
# it_async_exactness.sh: async DiLoCo with three workers of different speeds (5, 10, 20 ms per step).
# Submissions are applied one at a time in the order Redis gave them; an in-process replay of that
# order (tests/tools/ref_async) gives bit-identical parameters, with Delayed Nesterov off and on (N=3),
# with --weight-by tokens (each submission scaled by its tokens / 20), with --staleness-weight inverse and
# sqrt (each submission scaled by its weight of seq - base, the values dl_submit recorded; reference 0 and
# 1, so most weights are below 1), and again while shard-servers are
# killed at random (kill -9 every 1-1.5 s, and deaths between
# log write and commit). An async run made without --dn-buffer-size gets N = --workers. A --weight-ref-tokens
# far from the submissions' tokens (1000000 for 10) is warned about once.
# test: light (it waits more than it computes: 9 s of CPU in 38 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
H=10; STEPS=120
start_redis
check() { # RUN
  build/tests/tools/ref_async --redis "$URL" --run "$1" --sync-every $H > "$TMP/ref-$1.txt" 2> "$TMP/ref-$1.log" || \
    fail "reference of $1: $(cat "$TMP/ref-$1.log")"
  shard_digests "$1" > "$TMP/got-$1.txt"
  diff "$TMP/ref-$1.txt" "$TMP/got-$1.txt" > "$TMP/diff.txt" || fail "$1: digests differ from the replayed order: $(cat "$TMP/diff.txt")"
  stale=$($RCLI XRANGE "dl:{$1}:events" - + | awk '/^staleness$/ {getline; if ($0 > m) m = $0} END {print m + 0}')
  say "$1: bit-identical to the replay of $(cat "$TMP/ref-$1.log" | sed 's/.*replayed //'); max staleness $stale"
}
run_workers() { # RUN
  RUN=$1
  start_worker fast --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 5
  start_worker mid --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 10
  start_worker slow --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 20
}
one_run() { # RUN INIT-FLAGS...: a fault-free run of the three workers, checked against the replay
  RUN=$1; shift
  init_run $RUN --async --trainer quadratic --numel 40000 --shards 4 --workers 3 --snapshot-every 4 "$@"
  NSRV=0; keep_servers 2 --lease-ttl-ms 2000
  run_workers $RUN
  wait_workers fast mid slow
  check $RUN
  for p in $(live_servers); do eval "kill \$SRV_s$p"; done
  rm -f "$TMP"/*.jsonl
}
# an async run made without --dn-buffer-size gets Delayed Nesterov over one submission per worker; sync none
init_run async_default --async --trainer quadratic --numel 1000 --shards 2 --workers 3
init_run sync_default --trainer quadratic --numel 1000 --shards 2 --workers 3
[ "$($RCLI HGET 'dl:{async_default}:config' dn_buffer)" = 3 ] && grep -q 'Delayed Nesterov 3' "$TMP/init-async_default.log" ||
  fail "async default: dn_buffer $($RCLI HGET 'dl:{async_default}:config' dn_buffer), want 3: $(cat "$TMP/init-async_default.log")"
[ "$($RCLI HGET 'dl:{sync_default}:config' dn_buffer)" = 0 ] || fail "a sync run got a Delayed Nesterov buffer"
one_run async_dn0 --dn-buffer-size 0
one_run async_dn3 --dn-buffer-size 3
one_run async_weighted --dn-buffer-size 0 --weight-by tokens --weight-ref-tokens 20
one_run async_stale_inverse --dn-buffer-size 3 --staleness-weight inverse --staleness-ref 0
one_run async_stale_sqrt --staleness-weight sqrt --staleness-ref 1 --weight-by tokens --weight-ref-tokens 20
# a --weight-ref-tokens far from a submission's tokens scales every step far down: said once (scale 0.5 above: not)
grep -q "enters the outer step scaled" "$TMP"/worker-*.log && fail "a token scale of 0.5 was warned about"
RUN=async_ref_far
init_run $RUN --async --trainer quadratic --numel 1000 --shards 2 --workers 1 --weight-by tokens --weight-ref-tokens 1000000
NSRV=0; keep_servers 1
start_worker far --sync-every 10 --steps 20 --heartbeat-interval 1
wait_workers far
grep -q "submission of 10 tokens enters the outer step scaled by 10 / 1000000 = 1e-05 .*the run barely moves; init the run with --weight-ref-tokens near the tokens of a normal submission (about 10 here)" "$TMP/worker-far.log" ||
  fail "--weight-ref-tokens 1000000 for submissions of 10 tokens: no warning: $(cat "$TMP/worker-far.log")"
[ "$(grep -c 'enters the outer step scaled' "$TMP/worker-far.log")" = 1 ] || fail "the token scale was warned about more than once"
say "--weight-ref-tokens 1000000 for 10-token submissions: warned once (scale 1e-05)"
for p in $(live_servers); do eval "kill \$SRV_s$p"; done

RUN=async_storm
init_run $RUN --async --trainer quadratic --numel 40000 --shards 4 --workers 3 --dn-buffer-size 3 --snapshot-every 4
NSRV=0
H=10; STEPS=150
i=0; for w in fast mid slow; do i=$((i + 1)); start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms $((10 * i)); done
storm 200 --lease-ttl-ms 600 --fault-crash-before-commit 0.05 -- fast mid slow
wait_workers fast mid slow
[ "$KILLS" -ge 3 ] || fail "only $KILLS kills happened: the storm proved too little"
check $RUN
say "under $KILLS shard-server kills"
