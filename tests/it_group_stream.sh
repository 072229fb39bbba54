#!/bin/sh
# it_group_stream.sh: Streaming DiLoCo with process groups (worker/diloco/group.c: group_stream_step). A run
# of 4 fragments of 4 shards each, H = 20 (a fragment every 5 steps): two groups g1, g2 of 2 ranks
# (tests/tools/group_worker; each rank moves a part of every fragment) and a single bin/worker w3. A group
# prepares each fragment's Δ at its boundary, its ranks' rounds run on threads while they train, and the
# ranks agree on the outcome and apply the new values at the next boundary (D boundaries later), as a worker
# of one process applies its fragment in flight, so the run is bit-identical to the fragment-schedule reference of
# three single workers (tests/tools/ref_quadratic --frag-bounds): every shard's digest; both ranks of a group
# report a sync at the same steps (one per boundary after the first), each time from the same parameters,
# and at least half of a group's rounds got their parameters after the boundary that sent them had returned
# (they overlapped the training: a blocking round never does).
# Made four times: --fragment-alpha 0 and 0.5 (a group mixes its ranks' own values of the fragment with the
# new global ones, as a single worker does) with one fragment in flight, then 2 in flight with alpha 0 and 4
# (every fragment) with alpha 0.5: each fragment applied D boundaries after its round (--fragments-in-flight
# D); the run with 2 in flight ends with a force sync (--final-sync: the rounds in flight settled by the ranks
# together, then every fragment at once; the reference's --final-sync). Then a limit: a run whose fragments have fewer shards than the group has ranks is refused, with its
# reason on every rank. And a run of 40 fragments, bit-identical to its reference.
. "$(dirname "$0")/lib.sh"
NUMEL=64000; SEED=9; H=20; STEPS=100
start_redis

stream_run() { # RUN ALPHA D [--final-sync]: the two groups and w3, checked against the reference
  RUN=$1; alpha=$2; depth=$3; final=${4:-}
  init_run $RUN --trainer quadratic --numel $NUMEL --shards 16 --fragments 4 --workers 3 --seed $SEED
  start_server "a$RUN" --lease-ttl-ms 2000
  start_server "b$RUN" --lease-ttl-ms 2000
  for g in g1 g2; do
    build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id $g --ranks 2 --steps $STEPS --sync-every $H \
      --heartbeat-ms 1000 --step-delay-ms 10 --fragment-alpha "$alpha" --fragments-in-flight "$depth" $final > "$TMP/$g-$RUN.out" 2> "$TMP/group-$g-$RUN.log" &
    eval "G_$g=$!"; PIDS="$PIDS $!"
  done
  start_worker w3 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 10 --fragment-alpha "$alpha" --fragments-in-flight "$depth" $final
  for g in g1 g2; do eval "pid=\$G_$g"; wait "$pid" || fail "group $g exited with status $?: $(cat "$TMP/$g-$RUN.out")"; done
  wait_workers w3
  build/tests/tools/ref_quadratic --numel $NUMEL --shards 16 --seed $SEED --workers g1,g2,w3 --sync-every $H \
    --steps $STEPS --alpha "$alpha" --in-flight "$depth" $final --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" \
    --frag-bounds "$($RCLI HGET "dl:{$RUN}:config" frag_bounds)" > "$TMP/ref-$RUN.txt" || fail "reference"
  shard_digests $RUN > "$TMP/got-$RUN.txt"
  grep '^shard' "$TMP/ref-$RUN.txt" | diff - "$TMP/got-$RUN.txt" > "$TMP/diff.txt" \
    || fail "alpha $alpha, $depth in flight: shard digests differ from the fragment-schedule reference of g1, g2, w3: $(cat "$TMP/diff.txt")"
  for g in g1 g2; do
    group_same_syncs "$TMP/$g-$RUN.out" "$g"
    n=$(($(echo $s0 | wc -w) / 2))
    # the rounds ran while the ranks trained: line k settles the round sent at the boundary of line k - D
    # (the first D boundaries settle nothing), and that boundary's call returned (field 24) before the round
    # got its parameters (field 22); a blocking round got them inside that call
    over=$(grep '^sync rank 0 ' "$TMP/$g-$RUN.out" | awk -v D="$depth" '{ret[NR] = $24} NR > D && $22 > ret[NR - D] {k++} END {print k + 0}')
    [ "$over" -ge $(((n - depth) / 2)) ] || fail "$g: $over of $((n - depth)) rounds got their parameters after the boundary that sent them returned: they did not overlap the training"
    [ "$n" -ge $((STEPS * 4 / H - depth)) ] || fail "$g: $n syncs, want one per boundary after the first $depth ($((STEPS * 4 / H - depth)))"
  done
  for g in g1 g2; do # a force sync at the end: the rounds in flight settled by the ranks together first
    [ -z "$final" ] && break
    f0=$(grep '^final rank 0 ' "$TMP/$g-$RUN.out" | cut -d' ' -f4-); f1=$(grep '^final rank 1 ' "$TMP/$g-$RUN.out" | cut -d' ' -f4-)
    [ -n "$f0" ] && [ "$f0" = "$f1" ] || fail "$g: the ranks' final syncs differ: rank 0 '$f0', rank 1 '$f1'"
  done
  say "alpha $alpha, $depth in flight${final:+, $final}: 2 groups of 2 ranks and a single worker, Streaming (4 fragments): bit-identical to the reference ($(shard_versions $RUN) versions), each group's ranks synced at the same $n steps, $over rounds of g2 overlapped its training"
}
stream_run gstream 0 1
stream_run gsalpha 0.5 1
stream_run gsflight2 0 2 --final-sync
stream_run gsflight4 0.5 4

# a run of 40 fragments (more than a message's fixed fields once held: REGISTER hands each fragment's round
# as an array): a group of 2 and a single worker, one fragment every 2 steps, bit-identical to the reference
RUN=gsmany; FH=80
init_run $RUN --trainer quadratic --numel $NUMEL --shards 80 --fragments 40 --workers 2 --seed $SEED
start_server "a$RUN" --lease-ttl-ms 2000
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps 160 --sync-every $FH \
  --heartbeat-ms 1000 > "$TMP/g1-$RUN.out" 2> "$TMP/group-g1-$RUN.log" &
G_g1=$!; PIDS="$PIDS $!"
start_worker w3 --sync-every $FH --steps 160 --heartbeat-interval 1
wait "$G_g1" || fail "the group of a 40-fragment run exited with status $?: $(cat "$TMP/g1-$RUN.out")"
wait_workers w3
build/tests/tools/ref_quadratic --numel $NUMEL --shards 80 --seed $SEED --workers g1,w3 --sync-every $FH --steps 160 \
  --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" --frag-bounds "$($RCLI HGET "dl:{$RUN}:config" frag_bounds)" \
  > "$TMP/ref-$RUN.txt" || fail "reference of $RUN"
shard_digests $RUN > "$TMP/got-$RUN.txt"
grep '^shard' "$TMP/ref-$RUN.txt" | diff - "$TMP/got-$RUN.txt" > "$TMP/diff.txt" ||
  fail "40 fragments: shard digests differ from the fragment-schedule reference of g1, w3: $(cat "$TMP/diff.txt")"
say "40 fragments: a group of 2 and a single worker, bit-identical to the reference ($(grep -c '^sync rank 0 ' "$TMP/g1-$RUN.out") syncs of rank 0)"

# the limits: each refused on every rank with its reason, nothing registered
limit() { # RUN WHAT FLAGS... -> the group refused with WHAT on both ranks
  r=$1; what=$2; shift 2
  build/tests/tools/group_worker --redis "$URL" --run $r --worker-id gbad --ranks 2 --steps 10 --sync-every $H "$@" \
    > "$TMP/bad-$r.out" 2>&1 && fail "a group joined run $r with $*"
  [ "$(grep -c "^error rank [01]: .*$what" "$TMP/bad-$r.out")" = 2 ] || fail "run $r: not both ranks said '$what': $(cat "$TMP/bad-$r.out")"
  [ "$($RCLI HEXISTS "dl:{$r}:workers" gbad)" = 0 ] || fail "run $r: the refused group is registered"
}
init_run gsthin --trainer quadratic --numel 8000 --shards 4 --fragments 4 --workers 1 --seed $SEED
limit gsthin "needs at least 2 shards in each fragment"
say "a run of 4 fragments of 1 shard: refused on both ranks, nothing registered"
