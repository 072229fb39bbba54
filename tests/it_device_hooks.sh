#!/bin/sh
# it_device_hooks.sh: libdiloco's device hooks (diloco_device_ops) give the same run as the host path.
#
# The workers run with --device-hooks host: a host-memory stand-in for a GPU (worker/trainers/
# host_device.c) computes the pseudo-gradient against its own snapshot and loads the new global
# parameters, and libdiloco is given no params pointer at all (a direct access would crash). Each run
# must end bit-identical to the in-process reference (tests/tools/ref_quadratic), which is what the
# same runs give without hooks (it_sync_exactness, it_stream_exactness):
#   1. plain DiLoCo, bf16, 3 workers with hooks, 5 rounds: every shard's digest and every worker's last
#      digest; each worker called delta 5 times and load-copy 6 times (join + 5 rounds);
#   2. plain DiLoCo, fp32 (--no-bf16), two workers with hooks and one without, in the same run; and
#      the same with int4, error feedback and --download update;
#   3. Streaming DiLoCo, 4 fragments, alpha 0.5 and --final-sync: the mixing goes through load-mix;
#   4. the GPT trainer: the same run with and without hooks, the same digest after every sync.
. "$(dirname "$0")/lib.sh"
SEED=7; H=20
start_redis

hook_counts() { # WORKER -> "delta snapshot copy mix" from its log line
  sed -n 's/.*device hooks: \([0-9]*\) delta, \([0-9]*\) load snapshot, \([0-9]*\) load copy, \([0-9]*\) load mix.*/\1 \2 \3 \4/p' \
    "$TMP/worker-$1.log"
}

run_sync() { # RUN BF16FLAG HOOKS_W1 HOOKS_W2 HOOKS_W3
  run=$1; bf=$2; RUN=$run
  init_run $RUN --trainer quadratic --numel 200000 --shards 8 --workers 3 --seed $SEED ${INIT_EXTRA:-}
  start_server "a$RUN" --lease-ttl-ms 2000
  start_server "b$RUN" --lease-ttl-ms 2000
  start_worker w1 --sync-every $H --steps 100 --heartbeat-interval 1 $bf --device-hooks "$3"
  start_worker w2 --sync-every $H --steps 100 --heartbeat-interval 1 $bf --device-hooks "$4"
  start_worker w3 --sync-every $H --steps 100 --heartbeat-interval 1 $bf --device-hooks "$5"
  wait_workers w1 w2 w3
  [ "$(shard_versions $RUN)" = "5 5 5 5 5 5 5 5" ] || fail "$RUN: shard versions: $(shard_versions $RUN)"
  build/tests/tools/ref_quadratic --numel 200000 --shards 8 --seed $SEED --workers w1,w2,w3 --rounds 5 \
    --sync-every $H $bf ${REF_EXTRA:-} --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref-$RUN.txt" \
    || fail "reference"
  shard_digests $RUN > "$TMP/got-$RUN.txt"
  grep '^shard' "$TMP/ref-$RUN.txt" | diff - "$TMP/got-$RUN.txt" > "$TMP/diff.txt" || \
    fail "$RUN: shard digests differ from the reference: $(cat "$TMP/diff.txt")"
  want=$(awk '/^all/ {print $2}' "$TMP/ref-$RUN.txt")
  for w in w1 w2 w3; do
    got=$(grep '"event":"sync"' "$TMP/$w.jsonl" | tail -n 1 | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/')
    [ "$got" = "$want" ] || fail "$RUN: worker $w ends with digest $got, reference $want"
  done
  say "$RUN: bit-identical to the reference ($want)"
}

# 1. bf16, every worker through the hooks
run_sync hooks16 "" host host host
for w in w1 w2 w3; do
  [ "$(hook_counts $w)" = "5 0 6 0" ] || fail "hooks16: $w hook calls (delta snapshot copy mix): '$(hook_counts $w)', want '5 0 6 0'"
done
rm -f "$TMP"/w*.jsonl "$TMP"/worker-w*.log

# 2. fp32, mixed: w3 through the host buffer
run_sync hooks32 --no-bf16 host host off
[ "$(hook_counts w1)" = "5 0 6 0" ] || fail "hooks32: w1 hook calls '$(hook_counts w1)'"
[ -z "$(hook_counts w3)" ] || fail "hooks32: w3 ran with --device-hooks off but reports hook calls"
rm -f "$TMP"/w*.jsonl "$TMP"/worker-w*.log

# 2b. int4 with error feedback and --download update: the device gives an fp32 Δ that libdiloco
# quantizes, and the updates applied to base reach the device through load-copy; w3 without hooks
INIT_EXTRA="--compress int4 --download update" REF_EXTRA="--codec int4 --download update" \
  run_sync hooks4 --error-feedback host host off
[ "$(hook_counts w1 | cut -d' ' -f1)" = 5 ] || fail "hooks4: w1 hook calls '$(hook_counts w1)'"
unset INIT_EXTRA REF_EXTRA
rm -f "$TMP"/w*.jsonl "$TMP"/worker-w*.log

# 3. Streaming, alpha 0.5, final full sync
RUN=hstream; NUMEL=80000; STEPS=100
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --fragments 4 --workers 3 --seed 21
start_server "a$RUN" --lease-ttl-ms 2000
start_server "b$RUN" --lease-ttl-ms 2000
for w in w1 w2 w3; do
  start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 1 --fragment-alpha 0.5 --final-sync --device-hooks host
done
wait_workers w1 w2 w3
build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed 21 --workers w1,w2,w3 --sync-every $H \
  --steps $STEPS --alpha 0.5 --final-sync --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" \
  --frag-bounds "$($RCLI HGET "dl:{$RUN}:config" frag_bounds)" > "$TMP/ref-$RUN.txt" || fail "reference"
shard_digests $RUN > "$TMP/got-$RUN.txt"
grep '^shard' "$TMP/ref-$RUN.txt" | diff - "$TMP/got-$RUN.txt" > "$TMP/diff.txt" || \
  fail "$RUN: shard digests differ from the fragment-schedule reference: $(cat "$TMP/diff.txt")"
set -- $(hook_counts w1)
[ "${4:-0}" -gt 0 ] || fail "$RUN: w1 never mixed through the device hooks: '$(hook_counts w1)'"
say "$RUN: bit-identical to the reference (w1: $1 delta, $3 load copy, $4 load mix)"

# 4. the GPT trainer (CPU), two workers with hooks against the same run without: the same global
#    parameters after every round (synthetic tokens: this is about bytes, not learning)
gpt_run() { # RUN HOOKS -> digests of the 3 rounds in $TMP/digests-RUN
  RUN=$1
  init_run $RUN --trainer gpt --layers 2 --heads 4 --dim 64 --ctx 64 --vocab 256 --shards 4 --fragments 2 --workers 2 --seed 3
  start_server "a$RUN" --lease-ttl-ms 2000
  start_server "b$RUN" --lease-ttl-ms 2000
  for w in g1 g2; do
    start_worker $w --sync-every 4 --steps 12 --heartbeat-interval 1 --batch 2 --seq 32 --threads 1 --fragment-alpha 0.25 \
      --device cpu --device-hooks "$2" --data-seed "$(echo $w | tr -d g)"
  done
  wait_workers g1 g2
  grep '"event":"sync"' "$TMP/g1.jsonl" | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/' > "$TMP/digests-$RUN"
  [ "$(wc -l < "$TMP/digests-$RUN")" -ge 5 ] || fail "$RUN: g1 made $(wc -l < "$TMP/digests-$RUN") syncs"
  mkdir -p "$TMP/$RUN" && mv "$TMP"/g*.jsonl "$TMP"/worker-g*.log "$TMP/$RUN/"
}
gpt_run gpthooks host
gpt_run gpthost off
diff "$TMP/digests-gpthooks" "$TMP/digests-gpthost" > /dev/null || \
  fail "GPT: digests with and without hooks differ: $(paste "$TMP/digests-gpthooks" "$TMP/digests-gpthost")"
say "GPT (Streaming, 2 fragments, alpha 0.25): the same $(wc -l < "$TMP/digests-gpthost") global digests with and without hooks"
