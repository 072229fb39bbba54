#!/bin/sh
# it_group_device_hooks.sh: process groups whose ranks reach their parameters through device hooks only
# (diloco_device_ops: a node of GPUs, each rank's model on its own device), bit-identical to the host path.
#
# Each rank of group g1 runs with --device-hooks host (tests/tools/group_worker: worker/trainers/host_device.h's
# host-memory stand-in for a GPU, libdiloco given no params pointer at all, so any access the group's code
# made to params would crash): the device computes the pseudo-gradient of the rank's part against its own
# snapshot, the ranks broadcast their parts of libdiloco's own host copy of the global parameters (base)
# and every rank's device loads the whole fragment (group.c exchange_device). Beside it a group g2 without
# hooks and, in the Streaming run, a single bin/worker w3 with hooks. Each run is checked against the
# in-process reference (tests/tools/ref_quadratic), as it_group_exactness and it_group_stream check the
# host path:
#   1. plain DiLoCo, bf16, 8 shards, 4 rounds: every shard's digest, every rank's last digest, and the
#      ranks' own parameters before every sync equal (each rank's device took the other's part: the
#      quadratic problem is separable, so a rank whose device kept its own values of the other part would
#      still send the right Δ of its own); one delta call a round on each rank, a load for every version;
#   2. the same with int4, error feedback and --download update (the device's fp32 Δ quantized on the host);
#   3. Streaming DiLoCo, 4 fragments, alpha 0.5, 2 in flight, --final-sync: the mix goes through load-mix;
#   4. async Streaming (2 fragments, Delayed Nesterov 3) with --async-lookahead 0.5: g1 with hooks, a single
#      worker with hooks and one without; bit-identical to the replay of the order Redis recorded
#      (tests/tools/ref_async), not to the replay without the lookahead; g1's ranks from the same parameters;
#   5. sharded groups (each rank's device holds its dim-0 chunks of the tiny GPT, run made with --fsdp-ranks 2):
#      g1 with hooks beside g2 without, plain bf16 and Streaming (2 fragments, alpha 0.5, one in flight),
#      and g1 alone in async Streaming with starts ahead, bit-identical to the same runs of single processes;
#      each rank's delta and load hooks called every round (Streaming: mixes).
. "$(dirname "$0")/lib.sh"
NUMEL=64000; SEED=11; H=10; ROUNDS=4
start_redis

check_ref() { # RUN WHAT: the shard digests against the reference in $TMP/ref-RUN.txt
  shard_digests "$1" > "$TMP/got-$1.txt"
  grep '^shard' "$TMP/ref-$1.txt" | diff - "$TMP/got-$1.txt" > "$TMP/diff.txt" ||
    fail "$2: shard digests differ from the reference: $(cat "$TMP/diff.txt")"
}

plain() { # RUN INIT-FLAGS GROUP-FLAGS REF-FLAGS
  RUN=$1
  init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED $2
  start_server "a$RUN" --lease-ttl-ms 2000
  start_server "b$RUN" --lease-ttl-ms 2000
  hook_groups host $RUN $((ROUNDS * H)) $3
  wait_hook_groups $RUN
  build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers g1,g2 --rounds $ROUNDS \
    --sync-every $H $4 --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref-$RUN.txt" || fail "reference"
  check_ref $RUN "$RUN (g1 with device hooks, g2 without)"
  want=$(awk '/^all/ {print $2}' "$TMP/ref-$RUN.txt")
  for g in g1 g2; do
    for r in 0 1; do
      n=$(grep -c "^sync rank $r version" "$TMP/$g-$RUN.out")
      last=$(grep "^sync rank $r " "$TMP/$g-$RUN.out" | tail -n 1 | awk '{print $7}')
      [ "$n" -eq $ROUNDS ] && [ "$last" = "$want" ] ||
        fail "$RUN: $g rank $r: $n syncs ending at '$last'; the reference: $ROUNDS ending at $want"
    done
  done
  # the ranks trained the same parameters (DDP replicas): every rank's device took every rank's part
  for g in g1 g2; do group_same_syncs "$TMP/$g-$RUN.out" "$RUN: $g"; done
  # every Δ came from the device (one delta call a round) and every new version went into it by a load
  for r in 0 1; do
    set -- $(sed -n "s/^hooks rank $r delta \([0-9]*\) snapshot \([0-9]*\) copy \([0-9]*\) mix \([0-9]*\)$/\1 \2 \3 \4/p" "$TMP/g1-$RUN.out")
    [ "${1:-0}" -eq $ROUNDS ] && [ "${3:-0}" -ge $((ROUNDS + 1)) ] ||
      fail "$RUN: g1 rank $r's hooks: delta '${1:-}' (want $ROUNDS), load copy '${3:-}' (want >= $((ROUNDS + 1)): the join and every round)"
  done
  say "$RUN: a group of 2 with device hooks and one without, bit-identical to 2 single workers: $want"
}
plain ghbf16 "" "" ""
plain ghint4 "--compress int4 --download update" "--error-feedback" "--codec int4 --error-feedback --download update"

RUN=ghstream; STEPS=100
init_run $RUN --trainer quadratic --numel $NUMEL --shards 16 --fragments 4 --workers 3 --seed $SEED
start_server "a$RUN" --lease-ttl-ms 2000
start_server "b$RUN" --lease-ttl-ms 2000
hook_groups host $RUN $STEPS --step-delay-ms 5 --fragment-alpha 0.5 --fragments-in-flight 2 --final-sync
start_worker w3 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 5 --fragment-alpha 0.5 \
  --fragments-in-flight 2 --final-sync --device-hooks host
wait_hook_groups $RUN
wait_workers w3
build/tests/tools/ref_quadratic --numel $NUMEL --shards 16 --seed $SEED --workers g1,g2,w3 --sync-every $H \
  --steps $STEPS --alpha 0.5 --in-flight 2 --final-sync --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" \
  --frag-bounds "$($RCLI HGET "dl:{$RUN}:config" frag_bounds)" > "$TMP/ref-$RUN.txt" || fail "reference"
check_ref $RUN "Streaming, alpha 0.5, 2 in flight (g1 and w3 with device hooks)"
for g in g1 g2; do
  f0=$(grep '^final rank 0 ' "$TMP/$g-$RUN.out" | cut -d' ' -f4-); f1=$(grep '^final rank 1 ' "$TMP/$g-$RUN.out" | cut -d' ' -f4-)
  [ -n "$f0" ] && [ "$f0" = "$f1" ] || fail "$RUN: $g's ranks' final syncs differ: rank 0 '$f0', rank 1 '$f1'"
done
f1=$(grep '^final rank 0 ' "$TMP/g1-$RUN.out" | awk '{print $NF}'); f2=$(grep '^final rank 0 ' "$TMP/g2-$RUN.out" | awk '{print $NF}')
[ "$f1" = "$f2" ] || fail "$RUN: after the final sync g1 (device hooks) holds $f1, g2 $f2"
mix=$(sed -n 's/^hooks rank 1 delta [0-9]* snapshot [0-9]* copy [0-9]* mix \([0-9]*\)$/\1/p' "$TMP/g1-$RUN.out")
[ "${mix:-0}" -gt 0 ] || fail "$RUN: g1 rank 1 never mixed through its device (load mix: '${mix:-}')"
say "$RUN: Streaming (4 fragments, alpha 0.5, 2 in flight, final sync): g1 with device hooks, g2 and w3, bit-identical to the reference; both groups end at $f1"

# async Streaming with starts ahead: the start of each fragment goes into the device (lookahead.c's load)
RUN=ghasync; STEPS=60
init_run $RUN --async --trainer quadratic --numel 24000 --shards 8 --fragments 2 --workers 3 --dn-buffer-size 3 \
  --async-lookahead 0.5
start_server "a$RUN" --lease-ttl-ms 2000
start_server "b$RUN" --lease-ttl-ms 2000
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps $STEPS --sync-every $H \
  --heartbeat-ms 1000 --step-delay-ms 5 --device-hooks host > "$TMP/g1-$RUN.out" 2> "$TMP/group-g1-$RUN.log" &
G1=$!; PIDS="$PIDS $G1"
start_worker w1 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 10 --device-hooks host
start_worker w2 --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 15
wait "$G1" || fail "$RUN: group g1 (device hooks) exited with status $?: $(tail -n 5 "$TMP/g1-$RUN.out")"
wait_workers w1 w2
group_same_syncs "$TMP/g1-$RUN.out" "$RUN: g1"
ref_async_check $RUN $H "(async Streaming with starts ahead: g1 and w1 with device hooks, w2 without)" --async-lookahead 0

# sharded groups (FSDP): each rank's device holds only its dim-0 chunks, the hooks take the rank's own
# ranges and nothing is exchanged; a run with g1 (hooks) and g2 (none), both sharded over 2 ranks, against
# the same run of g1 and g2 as single processes: plain bf16, and Streaming (2 fragments, alpha 0.5), then
# async Streaming with starts ahead, a sharded group with hooks alone against a process alone
GPT="--trainer gpt --layers 1 --heads 2 --dim 16 --ctx 8 --vocab 16 --seed 5"
sharded_member() { # RUN ID OUT RANKS [group_worker flags]
  _run=$1; _id=$2; _out=$3; shift 3
  build/tests/tools/group_worker --redis "$URL" --run "$_run" --worker-id "$_id" --ranks "$@" --steps $((ROUNDS * H)) \
    --sync-every $H > "$TMP/$_out.out" 2> "$TMP/$_out.log" &
  PIDS="$PIDS $!"; MEMBERS="$MEMBERS $!:$_out"
}
MEMBERS=""
for mode in shbf16 shstream shasync; do
  case $mode in
    shbf16) init="--workers 2"; flags="";;
    shstream) init="--workers 2 --fragments 2"; flags="--fragment-alpha 0.5 --fragments-in-flight 1";;
    shasync) init="--workers 1 --fragments 2 --async --dn-buffer-size 2 --async-lookahead 0.5"; flags="";;
  esac
  for RUN in s$mode r$mode; do
    init_run $RUN $GPT --shards 1 --fsdp-ranks 2 $init
    start_server "a$RUN" --lease-ttl-ms 2000
  done
  sharded_member s$mode g1 s$mode-g1 2 --sharded --device-hooks host $flags
  sharded_member r$mode g1 r$mode-g1 1 $flags
  [ $mode = shasync ] && continue # (one member: its order is fixed)
  sharded_member s$mode g2 s$mode-g2 2 --sharded $flags
  sharded_member r$mode g2 r$mode-g2 1 $flags
done
for m in $MEMBERS; do
  wait "${m%%:*}" || fail "${m#*:} exited with status $?: $(tail -n 5 "$TMP/${m#*:}.out")"
done
for mode in shbf16 shstream shasync; do
  shard_digests s$mode > "$TMP/got-$mode.txt"
  shard_digests r$mode > "$TMP/ref-$mode.txt"
  diff "$TMP/ref-$mode.txt" "$TMP/got-$mode.txt" > "$TMP/diff.txt" ||
    fail "$mode: the run with a sharded group on device hooks ends on other parameters than single processes: $(cat "$TMP/diff.txt")"
  s0=$(grep "^sync rank 0 " "$TMP/s$mode-g1.out" | awk '{print $NF}' | tr '\n' ' ')
  s1=$(grep "^sync rank 1 " "$TMP/s$mode-g1.out" | awk '{print $NF}' | tr '\n' ' ')
  [ -n "$s0" ] && [ "$s0" = "$s1" ] || fail "$mode: g1's sharded ranks synced at steps '$s0' and '$s1'"
  for r in 0 1; do # each rank's Δ came from its device, every new version of its part went into it by a load
    set -- $(sed -n "s/^hooks rank $r delta \([0-9]*\) snapshot \([0-9]*\) copy \([0-9]*\) mix \([0-9]*\)$/\1 \2 \3 \4/p" "$TMP/s$mode-g1.out")
    [ "${1:-0}" -ge $ROUNDS ] && [ $((${3:-0} + ${4:-0})) -ge $ROUNDS ] ||
      fail "$mode: g1 rank $r's hooks: delta '${1:-}', load copy '${3:-}' mix '${4:-}' (want $ROUNDS or more of each)"
    [ $mode != shstream ] || [ "${4:-0}" -gt 0 ] || fail "$mode: g1 rank $r never mixed through its device"
  done
  say "$mode: a sharded group of 2 on device hooks (each rank's device its own chunks) ends bit-identical to single processes, its ranks synced at steps $s0"
done
