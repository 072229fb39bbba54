#!/bin/sh
# it_tsan_worker.sh: real runs with every worker built under ThreadSanitizer (build/tsan/bin/worker: bin/worker
# with libdiloco, common/ and the trainers compiled with -fsanitize=thread; the Makefile's tsan rules).
#
# A worker is several threads around one session: the training thread, the heartbeat, a Streaming
# fragment's round in the background, the barrier's wake listener, the early get's per-owner threads and
# the per-owner push and get threads, sharing the control connection, the owners table and the round's
# counters. test_tsan_ctl covers the control connection alone; this test runs the whole worker through
# the paths a user's run takes, so that ThreadSanitizer sees the threads of a real round:
#   1. sync DiLoCo, 3 workers, 2 shard-servers, one of them killed (-9) and restarted mid-run (owners change
#      under the push and get threads);
#   2. Streaming DiLoCo, 4 fragments (a fragment's round on its own thread while training goes on), with a
#      worker that joins mid-run and a shard-server killed and replaced as it joins;
#   2b. Streaming DiLoCo with 2 fragments in flight (--fragments-in-flight 2), rounds longer than an interval
#      (--simulate-latency-ms) and one slower worker: two rounds of a worker at their barriers at once, the
#      session's wake listener (wake.c's hub) and each round's counters on its own threads; bit-identical
#      to the reference of that schedule;
#   3. async DiLoCo with --async-lookahead and a worker with device hooks (--device-hooks host);
#   4. int3 pseudo-gradients with error feedback and --download update, a worker stopped (SIGSTOP) past the
#      heartbeat timeout mid-interval: evicted, it registers again from the training thread while the
#      heartbeat thread runs;
#   5. process groups: two groups of 2 ranks (tests/tools/group_worker, ranks as threads of one process);
#   6. Streaming DiLoCo, 4 fragments, two one-process group_workers (--ranks 1), which ask their session its
#      version (diloco_version) after every inner step, as a host's progress line may, while fragment 0's
#      round runs on its thread and writes that version when it ends;
#   7. Streaming process groups: two groups of 2 ranks, 2 fragments in flight, each rank's round of a
#      fragment on its own thread while the ranks train and agree at the boundaries; bit-identical to the
#      fragment-schedule reference; and an async Streaming group, its submissions delivered on the ranks'
#      threads, bit-identical to the replay of its order; a sharded group in Streaming, bit-identical to a
#      process alone.
# Every process must exit 0 with no ThreadSanitizer report in its log (a report makes it exit 66), and the
# runs' parameters are bit-identical to their references where the mode's own test checks that (the
# sanitized build computes the same bits). The quadratic trainer: OpenBLAS and OpenMP are not instrumented.
# It found a race in its first run: the get threads of two owners clearing one fragment's device-snapshot
# flag at once (device.c, dl_dev_base_written; now an atomic store). Scenario 6 failed in every run before
# fragment versions were written atomically (dl_set_frag_version): diloco_version's read raced with round_net's
# write of fragment 0's version.
. "$(dirname "$0")/lib.sh"
WORKER=build/tsan/bin/worker
[ -x "$WORKER" ] || fail "build first: make tests-build (builds $WORKER)"
TSAN_OPTIONS="exitcode=66 halt_on_error=0 second_deadlock_stack=1"
export TSAN_OPTIONS
no_reports() { # WORKER...: no ThreadSanitizer report in their logs (a group's: group-NAME.log)
  for w in "$@"; do
    log="$TMP/worker-$w.log"; [ -f "$log" ] || log="$TMP/group-$w.log"
    grep -q "ThreadSanitizer" "$log" &&
      fail "ThreadSanitizer reported in $w: $(grep -A30 'WARNING: ThreadSanitizer' "$log" | head -60)"
  done
  return 0
}
syncs_of() { cat "$TMP/$1.jsonl" 2>/dev/null | grep -c '"event":"sync"'; } # WORKER: its syncs so far
start_redis

# 1. sync, a shard-server killed and restarted while the workers train
RUN=tsan_sync; NUMEL=40000; SEED=5; H=5; ROUNDS=8
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED
start_server a --lease-ttl-ms 1000
start_server b --lease-ttl-ms 1000
for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $((H * ROUNDS)) --heartbeat-interval 1 --step-delay-ms 20; done
wait_until 30 '[ "$(syncs_of w1)" -ge 2 ]' "w1's second sync"
kill -9 "$SRV_b"
start_server b2 --lease-ttl-ms 1000
wait_workers w1 w2 w3
no_reports w1 w2 w3
assert_matches_reference
say "sync: 3 sanitized workers, a shard-server killed and replaced mid-run: no report, bit-identical to the reference"

# 2. Streaming, 4 fragments, a third worker joins mid-run
rm -f "$TMP"/w*.jsonl
RUN=tsan_stream
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --fragments 4 --workers 2 --seed $SEED
start_server c --lease-ttl-ms 2000
start_server d --lease-ttl-ms 2000
for w in w1 w2; do start_worker $w --sync-every 20 --steps 100 --heartbeat-interval 1 --step-delay-ms 10; done
wait_until 30 '[ "$(syncs_of w1)" -ge 3 ]' "w1's third fragment sync"
start_worker w3 --sync-every 20 --steps 40 --heartbeat-interval 1 --step-delay-ms 10
kill -9 "$SRV_d"
start_server d2 --lease-ttl-ms 2000
wait_workers w1 w2 w3
no_reports w1 w2 w3
syncs=$(syncs_of w3)
[ "$syncs" -ge 4 ] || fail "the joiner made $syncs fragment syncs, expected at least 4"
say "Streaming: 2 sanitized workers, a joiner ($syncs fragment syncs) and a server replaced: no report"

# 2b. Streaming with 2 fragments in flight, rounds longer than an interval, w3 slower: rounds overlap
rm -f "$TMP"/w*.jsonl
RUN=tsan_flight; H=20; STEPS=60
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --fragments 4 --workers 3 --seed $SEED
start_server k --lease-ttl-ms 2000
start_server l --lease-ttl-ms 2000
for w in w1 w2 w3; do
  delay=10; [ $w = w3 ] && delay=25
  start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms $delay --simulate-latency-ms 80 \
    --fragments-in-flight 2
done
wait_workers w1 w2 w3
no_reports w1 w2 w3
stream_reference $RUN 2 "$TMP/ref.txt" --alpha 0
shard_digests $RUN > "$TMP/got.txt"
grep '^shard' "$TMP/ref.txt" | diff - "$TMP/got.txt" > "$TMP/diff.txt" || fail "2 in flight: shard digests differ: $(cat "$TMP/diff.txt")"
say "Streaming, 2 fragments in flight, rounds of 80 ms and more over intervals of 50 ms: no report, bit-identical to the reference"

# 3. async with the start ahead; one worker through the device hooks
RUN=tsan_async
init_run $RUN --async --trainer quadratic --numel $NUMEL --shards 4 --workers 3 --dn-buffer-size 3 --async-lookahead 0.5
start_server e --lease-ttl-ms 2000
start_server f --lease-ttl-ms 2000
start_worker fast --sync-every 10 --steps 60 --heartbeat-interval 1 --step-delay-ms 5
start_worker mid --sync-every 10 --steps 60 --heartbeat-interval 1 --step-delay-ms 15 --device-hooks host
start_worker slow --sync-every 10 --steps 60 --heartbeat-interval 1 --step-delay-ms 25
wait_workers fast mid slow
no_reports fast mid slow
ref_async_check $RUN 10 "with its starts ahead" --async-lookahead 0
say "async with --async-lookahead and device hooks: no report"

# 4. int3 + error feedback + --download update; w3 evicted mid-interval and back
RUN=tsan_evict; NUMEL=8000; H=10; ROUNDS=5
init_run $RUN --trainer quadratic --numel $NUMEL --shards 4 --workers 3 --min-workers 2 --seed $SEED \
  --heartbeat-timeout 0.8 --compress int3 --download update
start_server g --lease-ttl-ms 2000
start_server h --lease-ttl-ms 2000
for w in w1 w2; do
  start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 0.2 --step-delay-ms 100 --error-feedback
done
start_worker w3 --sync-every $H --steps 0 --heartbeat-interval 0.2 --step-delay-ms 100 --error-feedback # stopped by SIGTERM
wait_until 30 '[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -ge 1 ]' "round 0 to close"
sleep 0.3
kill -STOP "$WRK_w3"
wait_until 10 '[ "$($RCLI HEXISTS "dl:{$RUN}:workers" w3)" = 0 ]' "w3 to be evicted"
kill -CONT "$WRK_w3"
wait_workers w1 w2
kill -TERM "$WRK_w3" # (it lost steps to the eviction: it would wait for a second worker at its next barrier)
wait_workers w3
no_reports w1 w2 w3
grep -q "registering again" "$TMP/worker-w3.log" || fail "w3 did not register again: $(grep -i evict "$TMP/worker-w3.log")"
say "int3 / update: w3 evicted mid-interval, registered again, stopped by SIGTERM: no report"

# 5. two groups of 2 ranks
RUN=tsan_group; NUMEL=60000; ROUNDS=4; H=10
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED
start_server i --lease-ttl-ms 2000
start_server j --lease-ttl-ms 2000
for g in g1 g2; do
  build/tsan/bin/group_worker --redis "$URL" --run $RUN --worker-id $g --ranks 2 --steps $((ROUNDS * H)) \
    --sync-every $H > "$TMP/$g.out" 2> "$TMP/group-$g.log" &
  eval "G_$g=$!"; PIDS="$PIDS $!"
done
for g in g1 g2; do eval "pid=\$G_$g"; wait "$pid" || fail "group $g exited with status $?: $(tail -5 "$TMP/group-$g.log")"; done
no_reports g1 g2
REF_WORKERS=g1,g2 assert_matches_reference
say "groups: 2 sanitized groups of 2 ranks, no report, bit-identical to the reference"

# 6. Streaming, diloco_version asked after every step while fragment 0 is in flight
RUN=tsan_version; NUMEL=20000; H=20
init_run $RUN --trainer quadratic --numel $NUMEL --shards 4 --fragments 4 --workers 2 --seed $SEED
start_server m --lease-ttl-ms 2000
for g in v1 v2; do
  build/tsan/bin/group_worker --redis "$URL" --run $RUN --worker-id $g --ranks 1 --steps $((3 * H)) \
    --sync-every $H --step-delay-ms 5 > "$TMP/$g.out" 2> "$TMP/group-$g.log" &
  eval "G_$g=$!"; PIDS="$PIDS $!"
done
for g in v1 v2; do eval "pid=\$G_$g"; wait "$pid" || fail "$g exited with status $?: $(tail -5 "$TMP/group-$g.log")"; done
no_reports v1 v2
syncs=$(grep -c '^sync rank 0' "$TMP/v1.out")
[ "$syncs" -ge 10 ] || fail "v1 made $syncs fragment syncs, expected at least 10 (3 intervals of 4 fragments)"
say "Streaming, diloco_version after every step while fragment 0 is in flight ($syncs fragment syncs): no report"

# 7. Streaming process groups: each rank's round of a fragment on a thread of its own (two in flight, at their
# barriers at once through the rank's wake listener) while the ranks train and agree at the boundaries
RUN=tsan_gstream; NUMEL=32000; H=20; STEPS=60
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --fragments 4 --workers 2 --seed $SEED
start_server n --lease-ttl-ms 2000
for g in s1 s2; do
  build/tsan/bin/group_worker --redis "$URL" --run $RUN --worker-id $g --ranks 2 --steps $STEPS --sync-every $H \
    --step-delay-ms 5 --fragments-in-flight 2 > "$TMP/$g.out" 2> "$TMP/group-$g.log" &
  eval "G_$g=$!"; PIDS="$PIDS $!"
done
# beside them, a sharded (FSDP) group of 2 in a Streaming run of the tiny GPT (2 fragments of whole tensors,
# 2 in flight) and, unsanitized, a process alone in a run of its own: the same digests
GPT="--trainer gpt --layers 1 --heads 2 --dim 16 --ctx 8 --vocab 16 --seed 5"
for RUN in tsan_gshard tsan_gshardref; do
  init_run $RUN $GPT --shards 1 --fsdp-ranks 2 --fragments 2 --workers 1
  start_server "n$RUN" --lease-ttl-ms 2000
done
RUN=tsan_gstream
build/tsan/bin/group_worker --redis "$URL" --run tsan_gshard --worker-id f1 --ranks 2 --sharded --steps 40 --sync-every 10 \
  --fragments-in-flight 2 --fragment-alpha 0.5 > "$TMP/f1.out" 2> "$TMP/group-f1.log" &
G_f1=$!; PIDS="$PIDS $!"
build/tests/tools/group_worker --redis "$URL" --run tsan_gshardref --worker-id f1 --ranks 1 --steps 40 --sync-every 10 \
  --fragments-in-flight 2 --fragment-alpha 0.5 > "$TMP/f1ref.out" 2> "$TMP/group-f1ref.log" ||
  fail "the sharded group's reference exited with status $?: $(tail -5 "$TMP/group-f1ref.log")"
for g in s1 s2 f1; do eval "pid=\$G_$g"; wait "$pid" || fail "group $g exited with status $?: $(tail -5 "$TMP/group-$g.log")"; done
no_reports s1 s2 f1
shard_digests tsan_gshard > "$TMP/got-gshard.txt"; shard_digests tsan_gshardref > "$TMP/ref-gshard.txt"
diff "$TMP/ref-gshard.txt" "$TMP/got-gshard.txt" > "$TMP/diff.txt" ||
  fail "sharded Streaming group: shard digests differ from a process alone: $(cat "$TMP/diff.txt")"
build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers s1,s2 --sync-every $H --steps $STEPS \
  --in-flight 2 --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" --frag-bounds "$($RCLI HGET "dl:{$RUN}:config" frag_bounds)" \
  > "$TMP/ref-$RUN.txt" || fail "Streaming groups: reference"
shard_digests $RUN > "$TMP/got-$RUN.txt"
grep '^shard' "$TMP/ref-$RUN.txt" | diff - "$TMP/got-$RUN.txt" > "$TMP/diff.txt" ||
  fail "Streaming groups: shard digests differ from the fragment-schedule reference: $(cat "$TMP/diff.txt")"
say "Streaming groups: 2 sanitized groups of 2 ranks, 2 fragments in flight, no report, bit-identical to the reference; a sanitized sharded group of 2 in Streaming: no report, bit-identical to a process"
# and async: each submission placed at its boundary, delivered on the ranks' threads while they train
RUN=tsan_gastream; H=10
init_run $RUN --async --trainer quadratic --numel $NUMEL --shards 8 --fragments 2 --workers 1 --seed $SEED
start_server o --lease-ttl-ms 2000
build/tsan/bin/group_worker --redis "$URL" --run $RUN --worker-id a1 --ranks 2 --steps $STEPS --sync-every $H \
  --step-delay-ms 5 > "$TMP/a1.out" 2> "$TMP/group-a1.log" || fail "group a1 exited with status $?: $(tail -5 "$TMP/group-a1.log")"
no_reports a1
ref_async_check $RUN $H "(a sanitized async Streaming group)" --sync-every 20
