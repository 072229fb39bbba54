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
# exactly its own slices' bytes. Streaming (--fragments 2, which --fsdp-ranks cuts at a tensor boundary, so
# each rank holds a part of every fragment): the same two runs with one fragment in flight and a fragment
# alpha of 0.5 (stream1: every sync's shards digest equals the reference's at the same step) and with two in
# flight and an alpha of 0.25 (stream2); both end bit-identical to 3 processes, the 3 ranks of the sharded group syncing at the
# same steps, once per boundary after the first D. Async Streaming (astream, Delayed Nesterov 2, starts
# ahead 0.5): a sharded group alone in its run ends bit-identical to a process alone in another (one
# member: its order is fixed). Then bad input: a sharded group on a run not cut for its size, ranks
# whose slices overlap, ranks that disagree on being sharded, a rank with no rows of any tensor (2 parameters
# over 3 ranks), a rank with no rows of a fragment's tensors (16 fragments over 7 ranks): one clear error on
# every rank, nothing registered; coordinator init refuses --fsdp-ranks 1, a non-number, and more fragments
# than the model has tensors (a sharded group in an async run of one fragment: tests/it_group_async.sh). (A rank killed with -9:
# tests/it_python_group_sharded_crash.sh.)
. "$(dirname "$0")/lib.sh"
ROUNDS=4; H=10
GPT="--trainer gpt --layers 1 --heads 2 --dim 16 --ctx 8 --vocab 16 --seed 5"
start_redis
extra_of() { case $1 in int3) echo --compress int3 --download update;; stream*) echo --fragments 2;; esac; }
flags_of() { case $1 in fp32) echo --no-bf16;; int3) echo --error-feedback;;
  stream1) echo --fragment-alpha 0.5 --fragments-in-flight 1;; stream2) echo --fragment-alpha 0.25 --fragments-in-flight 2;; esac; }
member() { # RUN ID OUT RANKS [--sharded]
  run=$1; id=$2; out=$3; shift 3
  build/tests/tools/group_worker --redis "$URL" --run "$run" --worker-id "$id" --ranks "$@" --steps $((ROUNDS * H)) \
    --sync-every $H $(flags_of $mode) > "$TMP/$out.out" 2> "$TMP/$out.log" &
  PIDS="$PIDS $!"; MEMBERS="$MEMBERS $!:$out"
}
MEMBERS=""
for mode in bf16 fp32 int3 stream1 stream2; do
  for RUN in s$mode r$mode; do
    init_run $RUN $GPT --shards 1 --fsdp-ranks 3 --workers 3 $(extra_of $mode)
    start_server "a$RUN" --lease-ttl-ms 2000
  done
  member s$mode g1 s$mode-g1 3 --sharded
  member s$mode g2 s$mode-g2 2
  member s$mode w3 s$mode-w3 1
  for id in g1 g2 w3; do member r$mode $id r$mode-$id 1; done
done
mode=astream # async Streaming: a sharded group alone, and a process alone in a run of its own
for RUN in s$mode r$mode; do
  init_run $RUN $GPT --shards 1 --fsdp-ranks 3 --fragments 2 --workers 1 --async --dn-buffer-size 2 --async-lookahead 0.5
  start_server "a$RUN" --lease-ttl-ms 2000
done
member s$mode g1 s$mode-g1 3 --sharded
member r$mode g1 r$mode-g1 1
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

# Streaming: fragment bounds where tensors start; the runs end bit-identical to 3 processes (one alone);
# the sharded ranks sync at the same steps; with one fragment in flight every sync's shards digest is the
# reference's at that step (with two in flight a later round's thread may be writing: none is taken)
python3 -c '
import json, sys
sb = [int(x) for x in sys.argv[1].split(",")]; fb = [int(x) for x in sys.argv[2].split(",")]
starts = {t[2] for t in json.loads(sys.argv[3])}
assert len(fb) == 3 and all(sb[k] in starts for k in fb[:-1]), (fb, [sb[k] for k in fb])' \
  "$($RCLI HGET "dl:{sstream1}:config" shard_bounds)" "$($RCLI HGET "dl:{sstream1}:config" frag_bounds)" \
  "$($RCLI HGET "dl:{sstream1}:config" layout)" 2> "$TMP/fb.txt" ||
  fail "--fsdp-ranks 3 --fragments 2 did not cut its fragments where tensors start: $(cat "$TMP/fb.txt")"
steps_of() { grep "^sync rank $2 " "$TMP/$1.out" | awk '{print $NF}' | tr '\n' ' '; }
for mode in stream1 stream2 astream; do
  shard_digests s$mode > "$TMP/got-$mode.txt"
  shard_digests r$mode > "$TMP/ref-$mode.txt"
  diff "$TMP/ref-$mode.txt" "$TMP/got-$mode.txt" > "$TMP/diff.txt" ||
    fail "$mode: the run with a sharded group ends on other parameters than the one of single processes: $(cat "$TMP/diff.txt")"
  d=1; [ $mode = stream2 ] && d=2 # (the first D boundaries settle no round)
  want=$((2 * ROUNDS - d)); s0=$(steps_of s$mode-g1 0)
  [ "$(echo $s0 | wc -w)" -eq $want ] || fail "$mode: sharded rank 0 synced at steps '$s0', want $want syncs"
  for r in 1 2; do
    [ "$(steps_of s$mode-g1 $r)" = "$s0" ] || fail "$mode: sharded ranks 0 and $r synced at other steps: '$s0', '$(steps_of s$mode-g1 $r)'"
  done
  say "$mode: a sharded group of 3 ranks in a Streaming run of 2 fragments ends bit-identical to single processes, its ranks synced at the same $want steps"
done
awk '/^sync/ {print $NF, $(NF-2)}' "$TMP/rstream1-w3.out" | sort -u > "$TMP/want-stream1.txt"
grep -q -v ' 0000000000000000$' "$TMP/want-stream1.txt" || fail "stream1: the reference took no shards digest"
for out in sstream1-g1 sstream1-g2 sstream1-w3; do
  awk '/^sync/ {print $NF, $(NF-2)}' "$TMP/$out.out" | sort -u | diff "$TMP/want-stream1.txt" - > "$TMP/diff.txt" ||
    fail "stream1: $out's shards digests differ from the reference's (step, digest): $(cat "$TMP/diff.txt")"
done
say "stream1: every sync of the sharded group's ranks (their parts summed) has the reference's shards digest at its step"

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
RUN=sbad3 # 16 fragments (one per tensor) over 7 ranks: rank 4 holds no row of wpe.weight's 8 (2 per rank)
init_run $RUN $GPT --shards 1 --fsdp-ranks 7 --fragments 16 --workers 1
bad_case fragment 7 "rank 4: this rank holds none of fragment 1's shards"
[ "$($RCLI HGET "dl:{$RUN}:state" joins)" = 0 ] || fail "bad input registered a member"
[ "$($RCLI HGET "dl:{$RUN}:state" joins)" = 0 ] || fail "bad input registered a member"
RUN=sbad
[ "$($RCLI HGET "dl:{$RUN}:state" joins)" = 0 ] || fail "bad input registered a member"
for bad in "--fsdp-ranks 1" "--fsdp-ranks 2,x" "--fsdp-ranks 2 --fragments 17"; do
  bin/coordinator init --redis "$URL" --run sbadinit $GPT $bad > "$TMP/badinit.log" 2>&1
  rc=$?
  [ $rc != 0 ] && grep -q -- '--fsdp-ranks' "$TMP/badinit.log" || fail "coordinator init $bad (status $rc): $(cat "$TMP/badinit.log")"
done
grep -q 'need 17 tensors and the model has 16' "$TMP/badinit.log" || fail "17 fragments of 16 tensors: $(cat "$TMP/badinit.log")"
[ "$($RCLI EXISTS "dl:{sbadinit}:config")" = 0 ] || fail "a refused init made the run"
say "bad input (a run not cut for the group's size, overlapping slices, ranks that disagree on being sharded, a rank with nothing to hold, a rank with nothing of a fragment): every rank says why, nothing registered"
