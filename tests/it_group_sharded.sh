#!/bin/sh
# it_group_sharded.sh: sharded process groups (FSDP, fully_shard: diloco.h "Sharded groups",
# docs/PROTOCOL.md "Process groups"). A run of the tiny GPT's layout (16 tensors, 3696 parameters) made with
# `coordinator init --fsdp-ranks 3 --shards 1` has a shard boundary at every tensor's and every rank's
# dim-0 chunk boundary. For bf16, fp32, and int3 with --download update and error feedback, at once:
#   run sMODE: g1, a sharded group of 3 ranks (tests/tools/group_worker --sharded: each rank hands libdiloco
#              only its dim-0 chunk of every tensor, as fully_shard holds them), g2, a DDP group of 2 ranks,
#              and w3, one process;
#   run rMODE: the same init, g1, g2 and w3 each one process (the reference).
# Both runs end on the same shard digests (the same parameter bytes); every sync of every rank and
# process reports the same shards digest at each version (the sharded ranks sum theirs through the
# group's allgather: no rank gathers the model); every closed round has the 3 members as participants;
# each round the sharded group's ranks together send and receive what one process does, each rank
# exactly its own slices' bytes. Then bad input: a sharded group on a run not cut for its size, ranks
# whose slices overlap, ranks that disagree on being sharded, a rank with no rows of any tensor (2 parameters
# over 3 ranks): one clear error on every rank, nothing
# registered; coordinator init refuses --fsdp-ranks 1, a non-number, and --fsdp-ranks with --fragments (a
# sharded group in an async run: tests/it_group_async.sh). (A rank killed with -9:
# tests/it_python_group_sharded_crash.sh.)
. "$(dirname "$0")/lib.sh"
ROUNDS=4; H=10
GPT="--trainer gpt --layers 1 --heads 2 --dim 16 --ctx 8 --vocab 16 --seed 5"
start_redis
extra_of() { [ "$1" = int3 ] && echo --compress int3 --download update; }
flags_of() { case $1 in fp32) echo --no-bf16;; int3) echo --error-feedback;; esac; }
member() { # RUN ID OUT RANKS [--sharded]
  run=$1; id=$2; out=$3; shift 3
  build/tests/tools/group_worker --redis "$URL" --run "$run" --worker-id "$id" --ranks "$@" --steps $((ROUNDS * H)) \
    --sync-every $H $(flags_of $mode) > "$TMP/$out.out" 2> "$TMP/$out.log" &
  PIDS="$PIDS $!"; MEMBERS="$MEMBERS $!:$out"
}
MEMBERS=""
for mode in bf16 fp32 int3; do
  for RUN in s$mode r$mode; do
    init_run $RUN $GPT --shards 1 --fsdp-ranks 3 --workers 3 $(extra_of $mode)
    start_server "a$RUN" --lease-ttl-ms 2000
  done
  member s$mode g1 s$mode-g1 3 --sharded
  member s$mode g2 s$mode-g2 2
  member s$mode w3 s$mode-w3 1
  for id in g1 g2 w3; do member r$mode $id r$mode-$id 1; done
done
for m in $MEMBERS; do
  wait "${m%%:*}" || fail "${m#*:} exited with status $?: $(cat "$TMP/${m#*:}.out")"
done
ns=$($RCLI HGET "dl:{sbf16}:config" shards)
[ "$ns" -gt 40 ] || fail "--fsdp-ranks 3 cut $ns shards (16 tensors of 3 chunks each need more than 40)"

# shards digest of every sync line: version -> digest, one per version for a whole member
versions() { awk '/^sync/ {print $5, $NF}' "$TMP/$1.out" | sort -u; }
for mode in bf16 fp32 int3; do
  shard_digests s$mode > "$TMP/got-$mode.txt"
  shard_digests r$mode > "$TMP/ref-$mode.txt"
  diff "$TMP/ref-$mode.txt" "$TMP/got-$mode.txt" > "$TMP/diff.txt" ||
    fail "$mode: the run with a sharded group ends on other parameters than the one of single processes: $(cat "$TMP/diff.txt")"
  versions r$mode-w3 > "$TMP/want-$mode.txt"
  [ "$(wc -l < "$TMP/want-$mode.txt")" -eq $ROUNDS ] || fail "$mode: the reference synced $(wc -l < "$TMP/want-$mode.txt") times"
  for out in s$mode-g1 s$mode-g2 s$mode-w3 r$mode-g1 r$mode-g2; do
    versions $out | diff "$TMP/want-$mode.txt" - > "$TMP/diff.txt" ||
      fail "$mode: $out's shards digests differ from the reference's (a line per version): $(cat "$TMP/diff.txt")"
  done
  for r in 0 1 2; do
    n=$(grep -c "^sync rank $r version" "$TMP/s$mode-g1.out")
    [ "$n" -eq $ROUNDS ] || fail "$mode: sharded rank $r reported $n syncs, not $ROUNDS"
  done
  for v in $(seq 0 $((ROUNDS - 1))); do
    p=$($RCLI HGET "dl:{s$mode}:f0:r$v" participants)
    case "$p" in g1:*,g2:*,w3:*) ;; *) fail "$mode: round $v participants '$p' (want g1, g2, w3)";; esac
  done
  say "$mode: a sharded group of 3, a DDP group of 2 and a process end bit-identical to 3 processes: $(tail -n 1 "$TMP/want-$mode.txt")"
done

# bytes (bf16: 2 up, 4 down per parameter): the sharded ranks together move one process's, each rank its
# own slices' (the group's digest of each rank's part differs, its parts' sizes add up to the model);
# never less, and exactly in at least half the rounds (a lease settling may resend a shard)
numel=$($RCLI HGET "dl:{sbf16}:config" numel)
awk -v n="$numel" -v last=$ROUNDS '/^sync/ {up[$5] += $9; down[$5] += $11}
  END {for (v in up) {
         if (up[v] < 2 * n || down[v] < 4 * n) {print "version " v ": up " up[v] " down " down[v]; bad = 1}
         if (up[v] == 2 * n && down[v] == 4 * n) exact++
       }
       if (2 * exact < last) {print "only " exact + 0 " of " last " rounds moved exactly one process'"'"'s bytes"; bad = 1}
       exit bad}' "$TMP/sbf16-g1.out" > "$TMP/bytes.txt" || fail "sharded bytes: $(cat "$TMP/bytes.txt")"
awk '/^sync/ && $9 > 0 {print $3, $9}' "$TMP/sbf16-g1.out" | sort -u | awk '{n[$1]++} END {for (r in n) if (n[r] > 2) exit 1}' ||
  fail "a sharded rank's bytes up vary: $(awk '/^sync/ {print $3, $5, $9}' "$TMP/sbf16-g1.out")"
say "each round the sharded group's 3 ranks sent $((2 * numel)) bytes and received $((4 * numel)) in total, each its own slices"

# bad input: one clear error on every rank, nothing registered
RUN=sbad
init_run $RUN $GPT --shards 1 --fsdp-ranks 3 --workers 1
start_server abad --lease-ttl-ms 2000
bad_case() { # WHAT RANKS EXPECTED-TEXT [group_worker flags]
  what=$1; ranks=$2; text=$3; shift 3
  build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id gb --steps 10 --sync-every 5 --ranks "$ranks" \
    --sharded "$@" > "$TMP/bad-$what.out" 2>&1 && fail "$what: the group started"
  for r in $(seq 0 $((ranks - 1))); do
    grep -q "^error rank $r: .*$text" "$TMP/bad-$what.out" || fail "$what: rank $r did not say '$text': $(cat "$TMP/bad-$what.out")"
  done
  [ "$($RCLI HLEN "dl:{$RUN}:workers")" = 0 ] || fail "$what: a member stayed registered"
}
bad_case size 2 "rank [01]: slice [0-9]* of this rank [a-z]* at element [0-9]*, inside shard [0-9]* .*--fsdp-ranks 2"
bad_case overlap 3 'ranks 0 and 1 both hold shard 0 of run .sbad.: the ranks. slices must not overlap' --bad OVERLAP
bad_case mixed 3 'disagree on sharded parameters' --bad UNSHARDED
RUN=sbad2 # 2 parameters over 3 ranks: rank 2's dim-0 chunk is empty
init_run $RUN --trainer quadratic --numel 2 --shards 1 --fsdp-ranks 3 --workers 1
bad_case empty 3 'rank 2: this rank holds no parameters'
[ "$($RCLI HGET "dl:{$RUN}:state" joins)" = 0 ] || fail "bad input registered a member"
RUN=sbad
[ "$($RCLI HGET "dl:{$RUN}:state" joins)" = 0 ] || fail "bad input registered a member"
for bad in "--fsdp-ranks 1" "--fsdp-ranks 2,x" "--fsdp-ranks 2 --fragments 2"; do
  bin/coordinator init --redis "$URL" --run sbadinit $GPT $bad > "$TMP/badinit.log" 2>&1
  [ $? = 2 ] && grep -q -- '--fsdp-ranks' "$TMP/badinit.log" || fail "coordinator init $bad: $(cat "$TMP/badinit.log")"
done
[ "$($RCLI EXISTS "dl:{sbadinit}:config")" = 0 ] || fail "a refused init made the run"
say "bad input (a run not cut for the group's size, overlapping slices, ranks that disagree on being sharded, a rank with nothing to hold): every rank says why, nothing registered"
