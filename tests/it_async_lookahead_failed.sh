#!/bin/sh
# it_async_lookahead_failed.sh: with --async-lookahead G (plain rule), a submission that fails (Redis refuses
# the dl_submit: training goes on, sync failed 1 in a row) keeps the start the worker trained from: the next
# Δ covers both windows and is measured from that start (worker/diloco/lookahead.c). Before, the start had
# been overwritten by the base when the submission went out, so that Δ also carried the lookahead offset.
# Two workers of different speeds, each behind its own proxy in front of Redis (tests/tools/drop_proxy.py)
# that answers one of its dl_submit, mid-run, with Redis's out-of-memory refusal: w1 its 3rd, w2 (with
# device hooks: the start through the load hook, Δ against the device's snapshot) its 4th. Each keeps its
# incarnation and makes one submission fewer, and the run is bit-identical to the replay that knows the
# failed tries (tests/tools/ref_async --failed: 2H steps from the previous start for the submission after
# one) and differs from the replay that does not. Once with the rebase rule too (Δ from the base, which
# the failure does not change), whose keep and aim share the code.
. "$(dirname "$0")/lib.sh"
H=10; STEPS=60
start_redis

# behind NAME SKIP: a proxy for worker NAME that relays its first SKIP dl_submit and refuses the next one;
# sets URL_NAME, the proxy's pid in PROXY_NAME
behind() {
  drop_proxy "$1" "$PORT" --match dl_submit --skip "$2" --drops 1 --lose error
  eval "URL_$1=redis://127.0.0.1:\$PPORT_$1"
}

# failed_run RUN INIT_FLAGS...: the run, w1 failing its 3rd try, w2 (hooked) its 4th; checked against the replays
failed_run() {
  RUN=$1; shift
  init_run $RUN --async --trainer quadratic --numel 20000 --shards 4 --workers 2 --dn-buffer-size 2 "$@"
  NSRV=0; keep_servers 2
  behind w1 2; behind w2 3
  DIRECT=$URL
  URL=$URL_w1; start_worker w1 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 3
  URL=$URL_w2; start_worker w2 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 5 --device-hooks host
  URL=$DIRECT
  wait_workers w1 w2
  for w in w1 w2; do
    [ "$(grep -c "lost the error" "$TMP/proxy-$RUN-$w.log")" = 1 ] || fail "$w's proxy did not refuse one dl_submit: $(cat "$TMP/proxy-$RUN-$w.log")"
    grep -q "sync failed (1 in a row.*OOM" "$TMP/worker-$w.log" || fail "$w did not report its failed submission"
    n=$(submissions $RUN $w)
    [ "$n" = $((STEPS / H - 1)) ] || fail "$RUN: $w made $n submissions, want $((STEPS / H - 1)) (one of $((STEPS / H)) tries failed)"
    eval "kill \$PROXY_$w"
  done
  joins=$($RCLI XRANGE "dl:{$RUN}:events" - + | grep -c '^join$')
  [ "$joins" = 2 ] || fail "$RUN: $joins registrations, want 2"
  device_hooks_used w2
  build/tests/tools/ref_async --redis "$URL" --run $RUN --sync-every $H --failed w1:3,w2:4 > "$TMP/ref-$RUN.txt" \
    2> "$TMP/ref-$RUN.log" || fail "reference of $RUN: $(cat "$TMP/ref-$RUN.log")"
  shard_digests $RUN > "$TMP/got-$RUN.txt"
  diff "$TMP/ref-$RUN.txt" "$TMP/got-$RUN.txt" > "$TMP/diff.txt" ||
    fail "$RUN: digests differ from the replay with the failed tries: $(cat "$TMP/diff.txt")"
  build/tests/tools/ref_async --redis "$URL" --run $RUN --sync-every $H > "$TMP/off-$RUN.txt" 2> /dev/null ||
    fail "reference of $RUN without the failed tries"
  cmp -s "$TMP/off-$RUN.txt" "$TMP/got-$RUN.txt" && fail "$RUN: the run equals the replay that does not know the failed tries"
  say "$RUN: w1 and w2 each failed one try and went on; bit-identical to the replay of $(sed 's/.*replayed //' "$TMP/ref-$RUN.log") with the failed tries, not without"
  for p in $(live_servers); do eval "kill \$SRV_s$p"; done
}

failed_run ahead_failed_plain --async-lookahead 0.5
failed_run ahead_failed_rebase --async-lookahead 0.75 --async-rule rebase --max-staleness 64
