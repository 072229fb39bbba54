#!/bin/sh
# it_group_async.sh: process groups in async runs (worker/diloco/group.c: async_net, async_settle). A group
# of 2 ranks (tests/tools/group_worker, each rank moving half the shards of every fragment) submits as one
# worker: at each boundary the ranks give their shards' base versions (PREPARE), rank 0 takes the places of
# the whole fragment from dl_submit, hands them to the other rank (PLACES), each rank pushes its part's Δ to
# its places and gets its shards once applied, and the ranks exchange the new values. So a group's
# submission is the one a single process holding its parameters would make, and the run is bit-identical to
# the in-process replay of the order Redis recorded (tests/tools/ref_async), in which the group is one
# worker, and differs from the replay with a wrong setting (H, or no lookahead):
#   gasync     plain async (Delayed Nesterov 3): the group g1 and two single workers of other speeds
#   gastream   async Streaming, 2 fragments of 4 shards (H = 10: a fragment every 5 steps), alpha 0, and
#              --async-lookahead 0.5: every rank aims the start of the whole fragment from the bases and
#              versions the ranks exchanged (replayed without the lookahead: differs); the submission is
#              placed at its boundary and delivered on the ranks' threads while they train (at least half
#              got their parameters after the boundary that placed them had returned)
#   gastorm    plain async with --async-lookahead 0.5 while shard-servers are killed at random (kill -9
#              every 1-1.5 s, and deaths between log write and commit): the ranks' pushes and gets follow
#              the shards to their new owners, and nothing is applied twice or lost
# Both ranks report a sync at the same steps, from the same parameters. Then a group whose part is not
# applied in time (gastop: completed at a second try; galeave: the group leaves and registers again;
# galeavestream: the same in Streaming, weighed by tokens; galeaveshard: with a sharded group), a
# sharded group (FSDP) in an async run (gashard), and dl_submit's refusal of a group not every rank of which
# joined.
. "$(dirname "$0")/lib.sh"
H=10; STEPS=60; SHARDED=""
start_redis

group() { # ID DELAY-MS [FLAGS...]: a group of 2 ranks as worker ID of $RUN; WRK_ID its pid (wait_workers)
  id=$1; delay=$2; shift 2
  build/tests/tools/group_worker --redis "$URL" --run "$RUN" --worker-id "$id" --ranks 2 --steps $STEPS \
    --sync-every $H --heartbeat-ms 1000 --step-delay-ms "$delay" "$@" > "$TMP/$id-$RUN.out" 2> "$TMP/worker-$id.log" &
  eval "WRK_$id=$!"; PIDS="$PIDS $!"
}
same_steps() { # ID MIN [steps-only]: both ranks of group ID synced at the same steps, at least MIN times,
  # each time holding the same parameters (the digest of the whole vector as each rank trained it: DDP
  # replicas; steps-only: a sharded group's, whose ranks hold different halves)
  fields='$NF, $(NF-4)'; [ "${3:-}" = steps-only ] && fields='$NF'
  s0=$(grep '^sync rank 0 ' "$TMP/$1-$RUN.out" | awk "{print $fields}" | tr '\n' ' ')
  s1=$(grep '^sync rank 1 ' "$TMP/$1-$RUN.out" | awk "{print $fields}" | tr '\n' ' ')
  [ -n "$s0" ] && [ "$s0" = "$s1" ] ||
    fail "$RUN: the ranks of $1 synced at different steps or from different parameters (step, digest): rank 0 '$s0', rank 1 '$s1'"
  n=$(echo $s0 | wc -w); [ "${3:-}" = steps-only ] || n=$((n / 2))
  [ "$n" -ge "$2" ] || fail "$RUN: $1 synced $n times, want $2 or more: $(tail -n 5 "$TMP/worker-$1.log")"
}
new_run() { # RUN FRAGMENTS INIT-FLAGS...: an async run whose fragments have 4 shards each
  RUN=$1; nf=$2; shift 2
  init_run $RUN --async --trainer quadratic --numel 24000 --shards $((4 * nf)) --fragments $nf --workers 3 "$@"
  NSRV=0
}
start_three() { # the group g1 (SHARDED: --sharded) and the single workers w1, w2 of other speeds
  group g1 5 $SHARDED
  start_worker w1 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 10
  start_worker w2 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 15
}
finish() { # RUN: servers gone, logs cleared for the next run
  for p in $(live_servers); do eval "kill \$SRV_s$p"; done
  rm -f "$TMP"/*.jsonl
}

new_run gasync 1 --dn-buffer-size 3
keep_servers 2 --lease-ttl-ms 2000
start_three
wait_workers g1 w1 w2
same_steps g1 $((STEPS / H))
ref_async_check gasync $H "(a group of 2 ranks and 2 workers)" --sync-every 20
[ "$($RCLI XRANGE "dl:{gasync}:events" - + | grep -c '^g1$')" -ge $((STEPS / H)) ] || fail "gasync: g1 made too few submissions"
finish

new_run gastream 2 --dn-buffer-size 3 --async-lookahead 0.5
keep_servers 2 --lease-ttl-ms 2000
start_three
wait_workers g1 w1 w2
same_steps g1 $((STEPS * 2 / H - 1))
# the submissions were delivered while the ranks trained: line k settles the one placed at the boundary of
# line k - 1, whose call returned (field 24) before the submission's last byte came (field 23; an async
# round stamps no barrier or get phase)
over=$(grep '^sync rank 0 ' "$TMP/g1-$RUN.out" | awk '{ret[NR] = $24} NR > 1 && $23 > ret[NR - 1] {k++} END {print k + 0}')
n=$(grep -c '^sync rank 0 ' "$TMP/g1-$RUN.out")
[ "$over" -ge $(((n - 1) / 2)) ] || fail "gastream: $over of $((n - 1)) submissions were delivered after the boundary that placed them returned"
say "gastream: $over of $((n - 1)) submissions delivered while the ranks trained"
ref_async_check gastream $H "(Streaming, a group of 2 ranks and 2 workers, with its starts ahead)" --async-lookahead 0
finish

new_run gastorm 1 --dn-buffer-size 3 --snapshot-every 4 --async-lookahead 0.5
STEPS=120; start_three; STEPS=60
storm 200 --lease-ttl-ms 600 --fault-crash-before-commit 0.05 -- g1 w1 w2
wait_workers g1 w1 w2
[ "$KILLS" -ge 2 ] || fail "only $KILLS kills happened: the storm proved too little"
same_steps g1 $((120 / H))
ref_async_check gastorm $H "(a group of 2 ranks and 2 workers with starts ahead, under $KILLS shard-server kills)" --async-lookahead 0
finish

# A rank's part not applied within the sync timeout (async_settle): the owner of shard 0 is stopped (SIGSTOP,
# its leases long enough not to move) while the group alone trains, until the group says its submission was
# not applied on every rank. Resumed at once, the server takes the second try, which completes the
# submission (gastop); resumed only once the group has left the run after the second try's timeout
# (galeave), the group's places whose Δ the server lacks become no-ops, it registers again and goes on.
# Either way nothing is lost or applied twice: the run is the replay of its order, the new registration and
# the no-op places included. galeavestream is galeave in Streaming (2 fragments) with each submission weighed
# by its tokens (--weight-by tokens, the ranks' sum: ref_async reads the group's size from its join event):
# registered again, the group's tokens count anew, and the other fragment's next submission weighs only the
# steps trained since (until 1 December a group that registered again at a failed round, group.c rejoin,
# kept counting from that fragment's previous Δ: digests differed from the replay). galeaveshard is galeave
# with a sharded group: its registration records the versions every rank holds (each holds only its own
# shards: the ranks gather them first, group_member.c), without which the replay cannot place the dropped
# window (until 1 December it recorded rank 0's shards alone, and ref_async refused the run).
stopped_once() { # RUN now|left FRAGMENTS [INIT-FLAGS...]: the group g1 alone; shard 0's owner stopped from
  # before the first failure until it (now) or until the group left the run (left: its record dl:{RUN}:left:g1)
  r=$1; until=$2; nf=$3; shift 3
  new_run $r $nf --dn-buffer-size 0 --workers 1 "$@"
  keep_servers 2 --lease-ttl-ms 30000
  group g1 20 $SHARDED --sync-timeout-ms 1500 --net-timeout-ms 1000
  wait_until 20 '[ "$($RCLI HGET "dl:{$RUN}:shards" 0:version)" -ge 2 ]' "two submissions of g1"
  eval "pid=\$SRV_$($RCLI HGET "dl:{$RUN}:shards" 0:owner)"
  kill -STOP "$pid"
  wait_until 20 'grep -q "not applied on every rank" "$TMP/worker-g1.log"' "the group to see its part fail" 0.05
  [ "$until" = left ] && wait_until 20 '[ "$($RCLI EXISTS "dl:{$RUN}:left:g1")" = 1 ]' "the group to leave the run" 0.05
  kill -CONT "$pid"
  wait_workers g1
  same_steps g1 1 ${SHARDED:+steps-only} # (a sharded group's ranks hold different halves)
}
stopped_once gastop now 1
grep -q 'the group.s submission was applied at a second try' "$TMP/worker-g1.log" ||
  fail "gastop: the second try did not complete the submission: $(grep -E 'WARN|ERROR' "$TMP/worker-g1.log" | head -n 5)"
ref_async_check gastop $H "(a group of 2 ranks whose part failed once and was completed at a second try)" --sync-every 20
finish
left_again() { # RUN: the group left and registered again, bit-identical to the replay. The failed part's
  # place is a no-op when its Δ never reached the stopped server; when the stop came after the push was
  # acknowledged (the get failed), the server applies the stored Δ once resumed (an owner looks a stored Δ
  # up by worker and incarnation, not by membership: docs/async.md). Either way the replay holds; which one
  # happened is the replay's count of no-op places (0 or 1). Until 1 December the test required a no-op
  # place, and failed now and then.
  grep -q 'the group leaves the run and registers again' "$TMP/worker-g1.log" ||
    fail "$1: the group did not leave: $(grep -E 'WARN|ERROR' "$TMP/worker-g1.log" | head -n 5)"
  build/tests/tools/ref_async --redis "$URL" --run $1 --sync-every $H > "$TMP/ref-$1.txt" 2> "$TMP/ref-$1.log" ||
    fail "reference of $1: $(cat "$TMP/ref-$1.log")"
  shard_digests $1 | diff "$TMP/ref-$1.txt" - > "$TMP/diff.txt" || fail "$1: digests differ from the replay: $(cat "$TMP/diff.txt")"
  grep -q ' 1 new registrations, ' "$TMP/ref-$1.log" || fail "$1: the replay saw no new registration: $(cat "$TMP/ref-$1.log")"
  say "$1: the group left and registered again; bit-identical to the $(sed 's/.*replayed //' "$TMP/ref-$1.log")"
}
stopped_once galeave left 1
left_again galeave
finish
stopped_once galeavestream left 2 --weight-by tokens --weight-ref-tokens 20
left_again galeavestream
finish
SHARDED=--sharded; stopped_once galeaveshard left 1 --fsdp-ranks 2; SHARDED=""
left_again galeaveshard
finish

# Async Streaming: every rank's thread places the group's submission (the same submission number and bases
# on every rank: dl_submit answers the ranks after the first with the places the first got), so no training
# thread waits for Redis. gasplit: g1 reaches Redis through a proxy that lets its first dl_submit through and
# loses the next 10 (the other rank's 5 tries of 2 sends each), so one rank of the group placed the
# submission and the other could not: at the next boundary that rank places it again, gets the same places,
# and delivers its part (the submission applied at a second try). gastale: g1, slow, in a run with
# --max-staleness 1, gets refusals as STALE, each recorded once however many ranks made the call; as a worker
# of one process, the group then takes the current global parameters of that fragment only (group.c,
# refused), so the run is bit-identical to the replay with the refused windows (the group reset every
# fragment before: not the replay); gastale1: the same in plain async (the group took a refusal as a failure
# and recovered before: the same parameters, a registration check and a warning that said the round did not
# complete). Neither may recover.
new_run gasplit 2 --dn-buffer-size 3
keep_servers 2 --lease-ttl-ms 2000
drop_proxy g1 "$PORT" --match dl_submit --skip 1 --drops 10 --lose command
REDIS_URL=$URL; URL="redis://127.0.0.1:$PPORT_g1"; group g1 5; URL=$REDIS_URL
start_worker w1 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 10
start_worker w2 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 15
wait_workers g1 w1 w2
[ "$(grep -c lost "$TMP/proxy-gasplit-g1.log")" = 10 ] || fail "gasplit: the proxy lost $(grep -c lost "$TMP/proxy-gasplit-g1.log") dl_submit calls, not 10"
grep -q 'the group.s submission was applied at a second try' "$TMP/worker-g1.log" ||
  fail "gasplit: the rank whose calls were lost did not complete the submission: $(grep -E 'WARN|ERROR' "$TMP/worker-g1.log" | head -n 5)"
same_steps g1 $((STEPS * 2 / H - 1))
ref_async_check gasplit $H "(Streaming, a group one of whose ranks placed its submission at a second try)" --sync-every 20
finish

stale_run() { # RUN FRAGMENTS WHAT: the slow group g1 and two fast workers, --max-staleness 1
  new_run $1 $2 --dn-buffer-size 3 --max-staleness 1
  keep_servers 2 --lease-ttl-ms 2000
  group g1 27
  start_worker w1 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 3
  start_worker w2 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 12
  wait_workers g1 w1 w2
  refused=$($RCLI XRANGE "dl:{$RUN}:events" - + | awk '/^worker$/ {getline; w = $0} /^code$/ {getline; if ($0 == "STALE" && w == "g1") n++} END {print n + 0}')
  seen=$(sed -n 's/.*WARN \(submission of fragment [0-9]* based on version [0-9]*\) refused as stale: rank [01]: STALE .*/\1/p' \
    "$TMP/worker-g1.log" | sort -u | wc -l)
  [ "$seen" -ge 1 ] || fail "$RUN: no submission of g1 was refused as STALE (the staleness bound proved too loose)"
  if [ "$refused" != "$seen" ]; then
    # (seen once, not reproduced in 17 runs: keep the events, which keep_failed_logs copies, to tell a
    # shard-server's dl_reject from a refusal recorded twice)
    $RCLI XRANGE "dl:{$RUN}:events" - + > "$TMP/events-$RUN.log"
    fail "$RUN: the group saw $seen submissions refused as STALE and Redis recorded $refused refusals (events in events-$RUN.log)"
  fi
  grep -q "did not complete for the group" "$TMP/worker-g1.log" &&
    fail "$RUN: the group recovered: $(grep -m 1 'did not complete for the group' "$TMP/worker-g1.log")"
  ref_async_check $RUN $H "($3, a slow group $refused of whose submissions were refused as STALE)" --skip-refused
  total=$($RCLI XRANGE "dl:{$RUN}:events" - + | grep -c '^STALE$')
  grep -q "and $total tries refused as STALE" "$TMP/ref-$RUN.log" || fail "$RUN: the replay did not take the $total refusals: $(cat "$TMP/ref-$RUN.log")"
  finish
}
stale_run gastale 2 Streaming
stale_run gastale1 1 "plain async"

# A sharded group (FSDP: group_worker --sharded, each rank holding only its half of the one tensor, the run
# cut for 2 ranks by --fsdp-ranks 2) in an async run with --async-lookahead 0.5: rank 0 places the group's
# submission for every shard of the run from the versions the ranks gave (each sees only its own shards),
# each rank delivers and aims the start of its own, nothing is exchanged; the run is the replay of its
# order, the group one worker. (Its ranks' parameters are their own halves: only the steps are compared.)
new_run gashard 1 --dn-buffer-size 3 --async-lookahead 0.5 --fsdp-ranks 2
keep_servers 2 --lease-ttl-ms 2000
SHARDED=--sharded; start_three; SHARDED=""
wait_workers g1 w1 w2
same_steps g1 $((STEPS / H)) steps-only
ref_async_check gashard $H "(a sharded group of 2 ranks and 2 workers, with starts ahead)" --async-lookahead 0
finish

# the Function itself: dl_submit of a group one of whose ranks has not joined is refused (GROUP), writing no
# place; once both joined it gives the places and marks the group synced (a rank cannot join it any more)
RUN=gasub
init_run $RUN --async --trainer quadratic --numel 8000 --shards 2 --workers 1
K="dl:{$RUN}:config"
inc=$($RCLI FCALL dl_register 1 "$K" gl host 5 2 | head -n 1)
$RCLI FCALL dl_submit 1 "$K" gl "$inc" 0 1 0 0 1 0 | grep -q 'GROUP rank 1 of worker gl has not joined: a group submits only once every rank joined' ||
  fail "a submission before every rank joined was not refused: $($RCLI FCALL dl_submit 1 "$K" gl "$inc" 0 1 0 0 1 0)"
[ "$($RCLI EXISTS "dl:{$RUN}:subs:0")" = 0 ] && [ "$($RCLI HGET "dl:{$RUN}:shards" 0:next)" != 1 ] ||
  fail "the refused submission took a place"
[ "$($RCLI FCALL dl_group_join 1 "$K" gl "$inc" 1 2)" = OK ] || fail "rank 1 could not join"
[ "$($RCLI FCALL dl_submit 1 "$K" gl "$inc" 0 1 0 0 1 0 | tr '\n' ' ')" = "0 0 " ] || fail "the group's submission got no places"
$RCLI FCALL dl_group_join 1 "$K" gl "$inc" 1 2 | grep -q 'GROUP' || fail "a rank joined a group that submitted"
say "dl_submit: refused (GROUP, no place taken) until every rank joined; then places 0 0, and the group counts as synced"
