#!/bin/sh
# it_window_once.sh: after a failed sync, every window of inner steps is applied once, and with
# --weight-by tokens a pseudo-gradient weighs the tokens of every step it covers (worker/diloco/async.c,
# round.c, delta.c). Each run has one shard-server and two workers of different speeds, w2 through device
# hooks (the CUDA worker's path), each failing one sync mid-run; each is bit-identical to the in-process
# replay that knows the failures, and differs from the replay without (or with the old behaviour).
#
# refused (async): Redis refuses a dl_submit (a proxy in front of it answers with the out-of-memory error:
#   nothing of it reached a server). Training goes on, and the next Δ covers both windows (2H steps) and
#   weighs 2H steps' tokens. Before, it weighed H: the tokens counted as sent when Δ was computed.
# late (async): the submission got its places and its pushes were acknowledged, but its get is refused (a
#   proxy in front of the shard-server answers it with a data-plane error): its Δ is applied, the worker
#   does not know the result. At its next sync the worker completes that submission (its Δ again to its
#   places, acknowledged as applied; the gets) and continues from the versions it got: the steps trained
#   meanwhile are dropped, with their tokens. Before, the next Δ covered both windows from the same start,
#   so the first window was applied twice (ref_async --twice replays exactly that).
# late_retry (async, --async-lookahead 0.5): the same, and the completion's get is refused too: the
#   completion comes one boundary later (ref_async --late at the try, --failed at the completion that
#   failed), and not as if the first of the two tries had failed and the second been late.
# stream_refused, stream_late (Streaming async, 2 fragments): the same two failures of one fragment's
#   submission; the other fragment goes on as usual, and ref_async replays each fragment's order with them
#   (the first with --async-lookahead 0.5: the fragment's start ahead is kept across the refused try).
# sync_late (sync): the same refused get in a sync round. The round has the worker's Δ; the worker's next
#   sync completes the round (sync.c, as before) and drops the steps trained meanwhile: now with their
#   tokens, which before weighed its next round's Δ too (2H).
. "$(dirname "$0")/lib.sh"
H=10; STEPS=60
start_redis

# workers_ran STEPS: start w1 and w2 (URL_w1, URL_w2: their Redis) for STEPS steps and wait for them
workers_ran() {
  direct=$URL
  URL=$URL_w1; start_worker w1 --sync-every $H --steps $1 --heartbeat-interval 1 --step-delay-ms 3
  URL=$URL_w2; start_worker w2 --sync-every $H --steps $1 --heartbeat-interval 1 --step-delay-ms 5 --device-hooks host
  URL=$direct
  wait_workers w1 w2
  joins=$($RCLI XRANGE "dl:{$RUN}:events" - + | grep -c '^join$')
  [ "$joins" = 2 ] || fail "$RUN: $joins registrations, want 2"
  device_hooks_used w2
}
# failed_once RUN: each proxy refused DROPS requests (default 1) and each worker reported that many failed
# syncs in a row
failed_once() {
  for w in w1 w2; do
    [ "$(grep -c "lost the error" "$TMP/proxy-$1-$w.log")" = "${DROPS:-1}" ] ||
      fail "$w's proxy did not refuse ${DROPS:-1} request(s): $(cat "$TMP/proxy-$1-$w.log")"
    grep -q "sync failed (${DROPS:-1} in a row" "$TMP/worker-$w.log" || fail "$w did not report its failed sync(s)"
    eval "kill \$PROXY_$w"
  done
}
# check_run WANT_SUBMISSIONS REF_ARGS -- OTHER_REF_ARGS: the async run failed once per worker and each worker
# made WANT submissions (of shard 0; -: the caller counted them); the digests equal ref_async with REF_ARGS and
# differ from it with OTHER_REF_ARGS
check_run() {
  want=$1; shift
  args=""; while [ "$1" != "--" ]; do args="$args $1"; shift; done; shift
  failed_once $RUN
  for w in w1 w2; do
    [ "$want" = - ] && break
    n=$(submissions $RUN $w)
    [ "$n" = "$want" ] || fail "$RUN: $w made $n submissions, want $want"
  done
  build/tests/tools/ref_async --redis "$URL" --run $RUN --sync-every $H $args > "$TMP/ref-$RUN.txt" \
    2> "$TMP/ref-$RUN.log" || fail "reference of $RUN: $(cat "$TMP/ref-$RUN.log")"
  shard_digests $RUN > "$TMP/got-$RUN.txt"
  diff "$TMP/ref-$RUN.txt" "$TMP/got-$RUN.txt" > "$TMP/diff.txt" ||
    fail "$RUN: digests differ from the replay with$args: $(cat "$TMP/diff.txt")"
  build/tests/tools/ref_async --redis "$URL" --run $RUN --sync-every $H "$@" > "$TMP/off-$RUN.txt" 2> /dev/null ||
    fail "reference of $RUN with $*"
  cmp -s "$TMP/off-$RUN.txt" "$TMP/got-$RUN.txt" && fail "$RUN: the run equals the replay with $*"
  other="the replay with $*"; [ $# = 0 ] && other="the replay without them"
  say "$RUN: bit-identical to the replay of $(sed 's/.*replayed //' "$TMP/ref-$RUN.log") with$args, not to $other"
}

WEIGHT="--weight-by tokens --weight-ref-tokens $H"

# refused: w1's 3rd dl_submit and w2's 4th are refused by Redis (a proxy in front of it for each)
RUN=refused
init_run $RUN --async --trainer quadratic --numel 20000 --shards 4 --workers 2 --dn-buffer-size 2 $WEIGHT
NSRV=0; keep_servers 1
drop_proxy w1 "$PORT" --match dl_submit --skip 2 --drops 1 --lose error; URL_w1=redis://127.0.0.1:$PPORT_w1
drop_proxy w2 "$PORT" --match dl_submit --skip 3 --drops 1 --lose error; URL_w2=redis://127.0.0.1:$PPORT_w2
workers_ran $STEPS
grep -q "OOM" "$TMP/worker-w1.log" || fail "w1's failed sync was not Redis's refusal"
# (the replay without the failed tries trains H steps for those submissions instead of 2H)
check_run $((STEPS / H - 1)) --failed w1:3,w2:4 --
for p in $(live_servers); do eval "kill \$SRV_s$p"; done

# behind_dataplane [DROPS]: the run's shard-server behind two proxies in a chain (w2's in front of w1's); each
# refuses its worker's get of shard 0 after its push of shard 0 of its 3rd (w1) or 4th (w2) submission or
# round, and the next DROPS - 1 gets (default 1: that one only)
behind_dataplane() {
  SPORT=$(free_port)
  drop_proxy w1 "$SPORT" --dataplane w1 --match get --after-pushes 3 --drops "${1:-1}" --lose error
  drop_proxy w2 "$PPORT_w1" --dataplane w2 --match get --after-pushes 4 --drops "${1:-1}" --lose error
  start_server s0 --listen 127.0.0.1:$SPORT --advertise 127.0.0.1:$PPORT_w2
  URL_w1=$URL; URL_w2=$URL
}

RUN=late
init_run $RUN --async --trainer quadratic --numel 20000 --shards 4 --workers 2 --dn-buffer-size 2 $WEIGHT
behind_dataplane
workers_ran $STEPS
grep -q "refused by drop_proxy" "$TMP/worker-w1.log" || fail "w1's failed sync was not the refused get"
for w in w1 w2; do
  grep -q "the submission whose result did not come is applied" "$TMP/worker-$w.log" ||
    fail "$w did not complete its submission whose get failed"
done
# each made every submission but the one at the sync that completed the late one
check_run $((STEPS / H - 1)) --late w1:3,w2:4 -- --twice w1:3,w2:4
kill $SRV_s0

# late_ahead: the same with --async-lookahead 0.5, where a failed submission keeps the start (lookahead.c):
# the interval after the completion starts from the versions got, not ahead
RUN=late_ahead
init_run $RUN --async --trainer quadratic --numel 20000 --shards 4 --workers 2 --dn-buffer-size 2 $WEIGHT \
  --async-lookahead 0.5
behind_dataplane
workers_ran $STEPS
check_run $((STEPS / H - 1)) --late w1:3,w2:4 -- --late w1:3,w2:4 --async-lookahead 0
kill $SRV_s0

# late_retry: the same, and the completion's get at the next boundary is refused as well (2 drops): that
# boundary fails too (sync failed, 2 in a row), the one after completes the submission. Each worker makes two
# submissions fewer than its tries (the completions send nothing); the replay that knows it (--failed at the
# failed completion) holds, the other reading of the same records (the first try failed, the second late)
# does not: a test that reads such records (it_ha_cluster_async_failover) can tell the two apart.
RUN=late_retry
init_run $RUN --async --trainer quadratic --numel 20000 --shards 4 --workers 2 --dn-buffer-size 2 \
  --async-lookahead 0.5
behind_dataplane 2
workers_ran $STEPS
for w in w1 w2; do
  grep -q "the submission whose result did not come is applied" "$TMP/worker-$w.log" ||
    fail "$RUN: $w did not complete its submission at last"
  n=$(submissions $RUN $w)
  [ "$n" = $((STEPS / H - 2)) ] || fail "$RUN: $w made $n submissions, want $((STEPS / H - 2))"
done
DROPS=2 check_run - --late w1:3,w2:4 --failed w1:4,w2:5 -- --failed w1:3,w2:4 --late w1:4,w2:5
kill $SRV_s0

# stream_subs RUN: each worker's submissions of shards 0-3 ("w1 N N N N w2 N N N N")
stream_subs() {
  for w in w1 w2; do
    $RCLI XRANGE "dl:{$1}:events" - + | awk -v who="$w" '/^worker$/ {getline; w = $0} /^type$/ {getline; t = $0}
      /^shard$/ {getline; if (t == "submit" && w == who) n[$0]++} END {printf "%s %d %d %d %d ", who, n[0], n[1], n[2], n[3]}'
  done
}
# Streaming async (2 fragments of 2 shards, one sent every H/2 steps: a worker's try N sends fragment
# (N-1) mod 2). stream_refused, with --async-lookahead 0.5: Redis refuses w1's 3rd dl_submit (fragment 0)
# and w2's 4th (fragment 1): that fragment's next submission covers both windows from the start ahead before
# them (lookahead.c keeps it per fragment), and weighs their tokens.
S=$((STEPS / H))
RUN=stream_refused
init_run $RUN --async --fragments 2 --trainer quadratic --numel 20000 --shards 4 --workers 2 --dn-buffer-size 2 $WEIGHT \
  --async-lookahead 0.5
NSRV=0; keep_servers 1
drop_proxy w1 "$PORT" --match dl_submit --skip 2 --drops 1 --lose error; URL_w1=redis://127.0.0.1:$PPORT_w1
drop_proxy w2 "$PORT" --match dl_submit --skip 3 --drops 1 --lose error; URL_w2=redis://127.0.0.1:$PPORT_w2
workers_ran $STEPS
subs=$(stream_subs $RUN)
[ "$subs" = "w1 $((S - 1)) $((S - 1)) $S $S w2 $S $S $((S - 1)) $((S - 1)) " ] ||
  fail "$RUN: submissions of shards 0-3: $subs (want one fewer of w1's fragment 0 and of w2's fragment 1)"
check_run - --failed w1:3,w2:4 -- --failed w1:3,w2:4 --async-lookahead 0
for p in $(live_servers); do eval "kill \$SRV_s$p"; done

# stream_late: the same refused get of a fragment 0 submission (w1's 3rd, w2's 4th of it: tries 5 and 7) is
# completed at that fragment's next turn, which sends nothing; fragment 1 goes on as usual (before, each
# worker made every submission). The replay without the failures differs.
RUN=stream_late
init_run $RUN --async --fragments 2 --trainer quadratic --numel 20000 --shards 4 --workers 2 --dn-buffer-size 2 $WEIGHT
behind_dataplane
workers_ran $STEPS
for w in w1 w2; do
  grep -q "fragment 0: the submission whose result did not come is applied" "$TMP/worker-$w.log" ||
    fail "$RUN: $w did not complete its submission whose get failed"
done
subs=$(stream_subs $RUN)
[ "$subs" = "w1 $((S - 1)) $((S - 1)) $S $S w2 $((S - 1)) $((S - 1)) $S $S " ] ||
  fail "$RUN: submissions of shards 0-3: $subs (want one fewer of fragment 0 for each)"
check_run - --late w1:5,w2:7 --
kill $SRV_s0

# sync_late: w1's get of round 2 and w2's of round 3 refused. Each takes part in the round after it only once
# it has trained and dropped a window (the others wait at that round's barrier), so each trains a window more
# than the rounds; the rounds take every worker's Δ.
RUN=sync_late; SEED=5; ROUNDS=$((STEPS / H))
init_run $RUN --trainer quadratic --numel 20000 --shards 4 --workers 2 --seed $SEED $WEIGHT
behind_dataplane
workers_ran $((STEPS + H))
failed_once $RUN
for w in w1 w2; do
  grep -q "completed late; continuing from its parameters" "$TMP/worker-$w.log" || fail "$w did not complete its round"
done
commits=$($RCLI XRANGE "dl:{$RUN}:events" - + | grep -c '^commit$')
[ "$commits" = $((4 * ROUNDS)) ] || fail "$RUN: $commits commits, want $((4 * ROUNDS)) (each round once per shard)"
ref() { build/tests/tools/ref_quadratic --numel 20000 --shards 4 --seed $SEED --workers w1,w2 --rounds $ROUNDS \
          --sync-every $H --weight-tokens --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" "$@" | grep '^shard'; }
ref --late w1=2,w2=3 > "$TMP/ref-$RUN.txt" || fail "reference of $RUN"
ref > "$TMP/off-$RUN.txt" || fail "reference of $RUN without the failures"
shard_digests $RUN > "$TMP/got-$RUN.txt"
diff "$TMP/ref-$RUN.txt" "$TMP/got-$RUN.txt" > "$TMP/diff.txt" ||
  fail "$RUN: digests differ from the replay with --late w1=2,w2=3: $(cat "$TMP/diff.txt")"
cmp -s "$TMP/off-$RUN.txt" "$TMP/got-$RUN.txt" && fail "$RUN: the run equals the replay without the failures"
say "$RUN: $ROUNDS rounds bit-identical to the replay with --late w1=2,w2=3, not without"
