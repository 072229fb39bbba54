#!/bin/sh
# it_group_exactness.sh: process groups in libdiloco (diloco.h "Process groups"). Three runs at once,
# bf16, fp32, and int3 with --download update and error feedback, each trained by two groups g1 and g2
# of 2 ranks (tests/tools/group_worker: ranks as threads, each with its own session and its own copy of
# the quadratic trainer), 2 shard-servers, 8 shards. Each run's shard digests and every rank's digest
# after every sync equal those of the in-process reference of 2 single-process workers g1, g2
# (tests/tools/ref_quadratic); every closed round has the 2 groups as its 2 participants; every round
# each group's ranks together send what one process sends (rank 0 + rank 1 bytes up = one worker's
# Δ of all shards) and receive what one process receives. A run with --weight-by tokens: group g1 of 2 and
# a single bin/worker w3 with the same H, weighted 2:1 (the group's tokens are its ranks' sum), bit-identical
# to the reference weighing them so (and not to the one weighing them 1:1). Then a mixed run: group g1 with a single
# bin/worker w2 (bit-identical to ref g1,w2; the group's bytes per round w2's, more only in a round that resent a
# part after a lease moved); then bad input: ranks
# that disagree on group size, run, H or the model's size, and a group larger than the run's shards: one clear error
# on every rank and nothing registered; the Functions refuse a rank joining a group that already
# arrived at a barrier, a second join, a wrong size, and an arrival before every rank joined (GROUP /
# BADARG), writing nothing.
. "$(dirname "$0")/lib.sh"
NUMEL=60000; SEED=5; ROUNDS=4; H=10
start_redis
flags_of() { case $1 in fp32) echo --no-bf16;; int3) echo --error-feedback;; esac; }
for mode in bf16 fp32 int3; do
  RUN=g$mode; extra=""
  [ $mode = int3 ] && extra="--compress int3 --download update"
  init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED $extra
  start_server a$mode --lease-ttl-ms 2000
  start_server b$mode --lease-ttl-ms 2000
  for g in g1 g2; do
    build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id $g --ranks 2 --steps $((ROUNDS * H)) \
      --sync-every $H $(flags_of $mode) > "$TMP/$g-$mode.out" 2> "$TMP/group-$g-$mode.log" &
    eval "G_${g}_$mode=$!"; PIDS="$PIDS $!"
  done
done
for mode in bf16 fp32 int3; do
  RUN=g$mode
  for g in g1 g2; do eval "pid=\$G_${g}_$mode"; wait "$pid" || fail "group $g ($mode) exited with status $?: $(cat "$TMP/$g-$mode.out")"; done
  ref_flags="$(flags_of $mode)"
  [ $mode = int3 ] && ref_flags="--codec int3 --error-feedback --download update"
  build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers g1,g2 --rounds $ROUNDS \
    --sync-every $H $ref_flags --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref-$mode.txt" || fail "reference"
  shard_digests $RUN > "$TMP/got-$mode.txt"
  grep '^shard' "$TMP/ref-$mode.txt" | diff - "$TMP/got-$mode.txt" > "$TMP/diff.txt" \
    || fail "$mode: shard digests differ from the reference of two single workers: $(cat "$TMP/diff.txt")"
  want=$(awk '/^all/ {print $2}' "$TMP/ref-$mode.txt")
  for g in g1 g2; do
    for r in 0 1; do
      n=$(grep -c "^sync rank $r version" "$TMP/$g-$mode.out")
      [ "$n" -eq $ROUNDS ] || fail "$mode: $g rank $r reported $n syncs, not $ROUNDS"
      last=$(grep "^sync rank $r " "$TMP/$g-$mode.out" | tail -n 1 | awk '{print $7}')
      [ "$last" = "$want" ] || fail "$mode: $g rank $r ends at $last, the reference at $want"
    done
    # the ranks agree on every version's digest
    v=$(awk '/^sync/ {print $5, $7}' "$TMP/$g-$mode.out" | sort -u | cut -d' ' -f1 | uniq -d)
    [ -z "$v" ] || fail "$mode: the ranks of $g disagree at version(s) $v"
  done
  # two participants (the groups) in every closed round, never a rank
  for r in $(seq 0 $((ROUNDS - 1))); do
    p=$($RCLI HGET "dl:{$RUN}:f0:r$r" participants)
    case "$p" in g1:*,g2:*) ;; *) fail "$mode: round $r participants '$p' (want the two groups)";; esac
  done
  say "$mode: 2 groups of 2 ranks bit-identical to 2 single workers: $want"
done

# bytes: per round, a group's ranks together send one worker's pseudo-gradient and receive one worker's
# parameters (bf16: 2 bytes up, 4 down per parameter), each rank its part. A round in which a shard
# changes owner (the two servers settle their leases at start, or a lease moves under load) resends that
# shard's part to the new owner, so a round may move more, never less; at least half the rounds are exact.
for g in g1 g2; do
  awk -v n=$NUMEL -v last=$ROUNDS '/^sync/ {up[$5] += $9; down[$5] += $11; r[$3 "," $5] = $9}
    END {for (v in up) {
           if (up[v] < 2 * n || down[v] < 4 * n) {print "version " v ": up " up[v] " down " down[v]; bad = 1}
           if (up[v] == 2 * n && down[v] == 4 * n) exact++
         }
         if (2 * exact < last) {print "only " exact + 0 " of " last " rounds moved exactly one process'"'"'s bytes"; bad = 1}
         for (k in r) if (r[k] <= 0) {print k " sent nothing"; bad = 1}
         exit bad}' "$TMP/$g-bf16.out" > "$TMP/bytes.txt" || fail "bf16 $g bytes: $(cat "$TMP/bytes.txt")"
done
say "each round a group of 2 sent $((2 * NUMEL)) bytes and received $((4 * NUMEL)) in total, split over its ranks"

# token weighting (--weight-by tokens), alongside the mixed run below: group g1 of 2 ranks weighs the tokens
# of both its ranks, twice those of the single worker w3 with the same H
RUN=gweight
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED --weight-by tokens
start_server aweight --lease-ttl-ms 2000
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps $((ROUNDS * H)) \
  --sync-every $H > "$TMP/g1-weight.out" 2> "$TMP/group-g1-weight.log" &
wpid=$!; PIDS="$PIDS $wpid"
start_worker w3 --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1

# mixed: a group and a single bin/worker in one run
RUN=gmix
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED
start_server amix --lease-ttl-ms 2000
start_server bmix --lease-ttl-ms 2000
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps $((ROUNDS * H)) \
  --sync-every $H > "$TMP/g1-mix.out" 2> "$TMP/group-g1-mix.log" &
gpid=$!; PIDS="$PIDS $gpid"
start_worker w2 --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1
wait "$gpid" || fail "group g1 (mixed) exited with status $?: $(cat "$TMP/g1-mix.out")"
wait_workers w2
build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers g1,w2 --rounds $ROUNDS \
  --sync-every $H --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref-mix.txt" || fail "reference"
shard_digests $RUN > "$TMP/got-mix.txt"
grep '^shard' "$TMP/ref-mix.txt" | diff - "$TMP/got-mix.txt" > "$TMP/diff.txt" || fail "mixed: shard digests differ: $(cat "$TMP/diff.txt")"
grep '"event":"sync"' "$TMP/w2.jsonl" | sed 's/.*"version":\([0-9]*\).*"bytes_up":\([0-9]*\).*"digest":"\([0-9a-f]*\)".*/\1 \2 \3/' \
  > "$TMP/w2-sync.txt"
awk '/^sync/ {print $5, $9, $7}' "$TMP/g1-mix.out" | awk '{up[$1] += $2; d[$1] = $3} END {for (v in up) print v, up[v], d[v]}' |
  sort -n > "$TMP/g1-sync.txt"
cut -d' ' -f1,3 "$TMP/g1-sync.txt" | diff - "$(cut -d' ' -f1,3 "$TMP/w2-sync.txt" > "$TMP/w2-vd.txt"; echo "$TMP/w2-vd.txt")" \
  > "$TMP/diff.txt" || fail "mixed: the group's (version, digest) differ from w2's: $(cat "$TMP/diff.txt")"
# the group's bytes up per round: those of w2 (one process), more only in a round that resent a part to a
# shard's new owner (a lease moved), never less; exactly w2's in at least half the rounds
awk -v last=$ROUNDS 'NR == FNR {w2[$1] = $2; next} {if ($2 < w2[$1]) {print "version " $1 ": group " $2 " < w2 " w2[$1]; bad = 1}
    if ($2 == w2[$1]) same++} END {if (2 * same < last) {print "only " same + 0 " rounds alike"; bad = 1}; exit bad}' \
  "$TMP/w2-sync.txt" "$TMP/g1-sync.txt" > "$TMP/bytes.txt" || fail "mixed: bytes up of the group against w2's: $(cat "$TMP/bytes.txt")"
say "mixed: a group of 2 and a single worker agree on every version's digest, send the same bytes (more only after a lease moved), match the reference"
RUN=gweight
wait "$wpid" || fail "group g1 (weighted) exited with status $?: $(cat "$TMP/g1-weight.out")"
wait_workers w3
wref() { build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers g1,w3 --rounds $ROUNDS \
           --sync-every $H --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" "$@" | grep '^shard'; }
wref --weight-tokens --ranks-of g1=2 > "$TMP/ref-weight.txt" || fail "weighted reference"
wref --weight-tokens > "$TMP/ref-weight1.txt" || fail "weighted reference (the group as one rank)"
shard_digests $RUN > "$TMP/got-weight.txt"
diff "$TMP/ref-weight.txt" "$TMP/got-weight.txt" > "$TMP/diff.txt" ||
  fail "--weight-by tokens: digests differ from the reference weighing the group's 2 ranks' tokens: $(cat "$TMP/diff.txt")"
cmp -s "$TMP/ref-weight1.txt" "$TMP/got-weight.txt" && fail "weighing the group's tokens twice or once made no difference: the test proves nothing"
say "--weight-by tokens: the group weighs both ranks' tokens (2:1 against a single worker), bit-identical to the reference"

# bad input: one clear error on every rank, nothing registered
RUN=gbad
init_run $RUN --trainer quadratic --numel 1000 --shards 2 --workers 1 --seed $SEED
start_server abad --lease-ttl-ms 2000
bad_case() { # WHAT EXPECTED-TEXT [group_worker flags]
  what=$1; text=$2; shift 2
  build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id gb --steps 10 --sync-every 5 "$@" \
    > "$TMP/bad-$what.out" 2>&1 && fail "$what: the group started"
  for r in $(seq 0 $((${RANKS:-2} - 1))); do
    grep -q "^error rank $r: .*$text" "$TMP/bad-$what.out" || fail "$what: rank $r did not say '$text': $(cat "$TMP/bad-$what.out")"
  done
  [ "$($RCLI HLEN "dl:{$RUN}:workers")" = 0 ] || fail "$what: a member stayed registered"
}
bad_case size 'disagree' --ranks 2 --bad SIZE
bad_case run 'rank 1: .*not-this-run' --ranks 2 --bad RUN
bad_case h 'disagree on sync_every' --ranks 2 --bad H
bad_case numel "rank 1: run 'gbad' has 1000 parameters but this trainer has 999" --ranks 2 --bad NUMEL
RANKS=3 bad_case big 'needs a run of at least 3 shards' --ranks 3
# a rank restarted alone (its old group, with rank 0, goes on): one clear error on both ranks, nothing
# committed after the group's first round
RUN=grestart
init_run $RUN --trainer quadratic --numel 1000 --shards 2 --workers 1 --seed $SEED
start_server arestart --lease-ttl-ms 2000
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id gr --ranks 2 --steps 20 --sync-every 5 --bad RESTART \
  > "$TMP/bad-restart.out" 2>&1 && fail "restart: the group went on: $(cat "$TMP/bad-restart.out")"
for r in 0 1; do
  grep -q "^error rank $r: .*rank 1 opened the group anew (a rank restarted alone) while rank 0 is in worker gr, incarnation 1, at version 1 .*that group already synced.*restart every rank of the group" \
    "$TMP/bad-restart.out" || fail "restart: rank $r did not say why: $(cat "$TMP/bad-restart.out")"
done
[ "$(shard_versions $RUN)" = "1 1" ] || fail "restart: shard versions $(shard_versions $RUN), want 1 1 (the first round only)"
[ "$($RCLI HLEN "dl:{$RUN}:workers")" = 0 ] || fail "restart: the group stayed registered"
say "a rank restarted alone: both ranks say its group already synced, nothing committed after that"
RUN=gbad
joins=$($RCLI HGET "dl:{$RUN}:state" joins)
[ "$joins" = 0 ] || fail "bad input registered $joins time(s)"
say "bad input (group size, run, H, a model of another size, a group larger than the shards): every rank says why, nothing registered"

# the Functions themselves (what a rank restarted alone, or a buggy client, would send)
K="dl:{$RUN}:config"
inc=$($RCLI FCALL dl_register 1 "$K" gl host 5 2 | head -n 1)
$RCLI FCALL dl_arrive 1 "$K" gl "$inc" 0 0 0 | grep -q 'GROUP rank 1 of worker gl has not joined' ||
  fail "an arrival before every rank joined was not refused"
[ "$($RCLI HEXISTS "dl:{$RUN}:f0:r0" g:gl:0)" = 0 ] || fail "the refused arrival wrote its field"
$RCLI FCALL dl_group_join 1 "$K" gl "$inc" 1 3 | grep -q 'BADARG worker gl was registered as a group of 2' ||
  fail "a join with another group size was not refused"
[ "$($RCLI FCALL dl_group_join 1 "$K" gl "$inc" 1 2)" = OK ] || fail "rank 1 could not join"
$RCLI FCALL dl_group_join 1 "$K" gl "$inc" 1 2 | grep -q 'GROUP rank 1 of worker gl joined already' ||
  fail "a second join was not refused"
$RCLI FCALL dl_heartbeat 1 "$K" gl "$inc" 2.5 0.25 40 5 0 > /dev/null && $RCLI FCALL dl_heartbeat 1 "$K" gl "$inc" 9 9 9 7 1 > /dev/null
bin/coordinator status --redis "$URL" --run $RUN --json | python3 -c '
import json, sys
w = [w for w in json.load(sys.stdin)["workers"] if w["id"] == "gl"][0]
assert (w["tokens"], w["speed"], w["loss"], w["step"], w["group"]) == (12, 2.5, 0.25, 40, 2), w' ||
  fail "the group's heartbeat record: tokens must be its ranks' sum, speed/loss/step rank 0's"
bin/coordinator status --redis "$URL" --run $RUN | grep -q '^  gl (2 ranks) ' || fail "coordinator status does not show the group's size"
$RCLI FCALL dl_arrive 1 "$K" gl "$inc" 0 0 0 | grep -q '^open' || fail "rank 0's arrival"
[ "$($RCLI HEXISTS "dl:{$RUN}:f0:r0" a:gl)" = 0 ] || fail "half the group counted as arrived"
before=$($RCLI HGET "dl:{$RUN}:workers" gl | od -c | md5sum)
$RCLI FCALL dl_group_join 1 "$K" gl "$inc" 1 2 | grep -q 'GROUP worker gl (incarnation '"$inc"') has already synced' ||
  fail "a rank joining a group that already synced was not refused: $($RCLI FCALL dl_group_join 1 "$K" gl "$inc" 1 2)"
[ "$($RCLI HGET "dl:{$RUN}:workers" gl | od -c | md5sum)" = "$before" ] || fail "the refused join changed the group's record"
$RCLI FCALL dl_arrive 1 "$K" gl "$inc" 0 0 1 | grep -q '^closed' || fail "the group's arrival with its last rank"
[ "$($RCLI HGET "dl:{$RUN}:f0:r0" participants)" = "gl:$inc" ] || fail "participants: $($RCLI HGET "dl:{$RUN}:f0:r0" participants)"
rej=$($RCLI HGET "dl:{$RUN}:state" rejections)
[ "$($RCLI FCALL dl_deregister 1 "$K" gl "$inc" 1)" = OK ] && [ "$($RCLI FCALL dl_deregister 1 "$K" gl "$inc" 0)" = GONE ] ||
  fail "deregistering a group from two ranks"
# the other rank's next heartbeat (before it learns the group ended) is told GONE, not counted as a rejection
$RCLI FCALL dl_heartbeat 1 "$K" gl "$inc" 1 1 1 1 0 | grep -q '^GONE worker gl (incarnation '"$inc"') left the run' ||
  fail "a heartbeat of a rank whose group left: $($RCLI FCALL dl_heartbeat 1 "$K" gl "$inc" 1 1 1 1 0)"
[ "$($RCLI HGET "dl:{$RUN}:state" rejections)" = "$rej" ] ||
  fail "a rank's heartbeat after its group left on purpose counted a rejection ($rej -> $($RCLI HGET "dl:{$RUN}:state" rejections))"
[ "$($RCLI ZSCORE "dl:{$RUN}:heartbeats" gl)" = "" ] && [ "$($RCLI HEXISTS "dl:{$RUN}:workers" gl)" = 0 ] ||
  fail "the GONE heartbeat wrote the group back"
# an evicted group's beats are still rejections (only a group that left on purpose is remembered)
inc2=$($RCLI FCALL dl_register 1 "$K" gl host 5 2 | head -n 1)
[ "$($RCLI FCALL dl_kick 1 "$K" gl)" = OK ] || fail "kicking the group"
$RCLI FCALL dl_heartbeat 1 "$K" gl "$inc2" 1 1 1 1 0 | grep -q '^UNKNOWN_WORKER' || fail "an evicted group's heartbeat was not refused"
[ "$($RCLI HGET "dl:{$RUN}:state" rejections)" -gt "$rej" ] || fail "an evicted group's heartbeat was not counted as a rejection"
say "the Functions refuse a join after the group synced, a second join, a wrong size, an early arrival; the group counts once all ranks arrived; a group that left is no rejection"
