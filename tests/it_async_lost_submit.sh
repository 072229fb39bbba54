#!/bin/sh
# it_async_lost_submit.sh: a dl_submit whose reply is lost (a Redis restart or a cut while it was in
# flight) costs an async worker nothing. A proxy in front of Redis (tests/tools/drop_proxy.py) stands
# between w1 and Redis; w2 talks to Redis directly. Two ways:
#  A. the command lost (never ran), twice: w1 reconnects and submits again (before, it resent on the
#     dead connection and failed the sync, until it registered again as a new incarnation);
#  B. the reply lost of a submission that ran, twice (the first try and its resend after the
#     reconnect both ran): the resend carries the same submission number, so Redis answers the places
#     the first try got instead of giving it new ones (a place nobody pushes to stops the shard's order:
#     w2 waited for w1's pseudo-gradient until w1 was evicted).
# Each run: w1 keeps its one incarnation, loses no submission, and the shard digests are bit-identical
# to the in-process replay of the submission order (tests/tools/ref_async).
. "$(dirname "$0")/lib.sh"
H=10; STEPS=60
start_redis
# lossy_run RUN LOSE: the async run RUN, w1 behind a proxy that loses the LOSE of its first two dl_submit
lossy_run() {
  RUN=$1
  init_run $RUN --async --trainer quadratic --numel 20000 --shards 4 --workers 2 --snapshot-every 4
  start_server "s_$RUN" --lease-ttl-ms 2000
  rm -f "$TMP/proxy.port" "$TMP/proxy.log"
  python3 tests/tools/drop_proxy.py --redis-port "$PORT" --match dl_submit --drops 2 --lose "$2" \
    --port-file "$TMP/proxy.port" --log "$TMP/proxy.log" > /dev/null 2>&1 &
  PIDS="$PIDS $!"; proxy=$!
  wait_until 10 '[ -s "$TMP/proxy.port" ]' "the proxy"
  REDIS_URL=$URL; URL="redis://127.0.0.1:$(cat "$TMP/proxy.port")"
  start_worker w1 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 2
  URL=$REDIS_URL
  start_worker w2 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 3
  wait_until 60 '! alive $WRK_w1 && ! alive $WRK_w2' "both workers to finish $STEPS steps"
  wait_workers w1 w2
  kill "$proxy" 2>/dev/null
  [ "$(grep -c "lost the $2" "$TMP/proxy.log")" = 2 ] || fail "the proxy did not lose 2 dl_submit: $(cat "$TMP/proxy.log")"
  joins=$($RCLI XRANGE "dl:{$RUN}:events" - + | grep -c '^join$')
  [ "$joins" = 2 ] || fail "$RUN: $joins registrations, want 2 (w1 registered again: $(grep -i regist "$TMP/worker-w1.log"))"
  subs=$($RCLI XRANGE "dl:{$RUN}:events" - + | awk '/^worker$/ {getline; w = $0} /^type$/ {getline; t = $0} /^shard$/ {getline; if (t == "submit" && w == "w1" && $0 == "0") n++} END {print n + 0}')
  [ "$subs" = $((STEPS / H)) ] || fail "$RUN: w1 made $subs submissions of shard 0, want $((STEPS / H))"
  build/tests/tools/ref_async --redis "$URL" --run $RUN --sync-every $H > "$TMP/ref-$RUN.txt" 2> "$TMP/ref-$RUN.log" ||
    fail "reference of $RUN: $(cat "$TMP/ref-$RUN.log")"
  shard_digests $RUN > "$TMP/got-$RUN.txt"
  diff "$TMP/ref-$RUN.txt" "$TMP/got-$RUN.txt" > "$TMP/diff.txt" || fail "$RUN: digests differ from the replayed order: $(cat "$TMP/diff.txt")"
  eval "kill \$SRV_s_$RUN" 2>/dev/null
}

say "A. dl_submit lost before it ran, on its first try and on its resend"
lossy_run lostsub command
say "w1 submitted again: one incarnation, $((STEPS / H)) submissions, bit-identical to the replay"

say "B. dl_submit ran, its reply lost, on its first try and on its resend"
lossy_run lostsubreply reply
say "the resend answered the first try's places: one incarnation, $((STEPS / H)) submissions, bit-identical to the replay"
