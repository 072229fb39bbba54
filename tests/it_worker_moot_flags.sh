#!/bin/sh
# it_worker_moot_flags.sh: a worker flag that the run (or the other flags) makes moot is said at start, in
# a WARN line that says what happens instead, never silently dropped:
#   - --no-bf16 on an int4 run (which sends int4 whatever the flag), as --error-feedback on a bf16 run;
#   - --sync-every larger than --steps (the worker would leave before its first sync), pointing to
#     --final-sync; with --final-sync no warning, and its one sync is committed;
# and the workers then train as usual.
. "$(dirname "$0")/lib.sh"
start_redis
RUN=q4
init_run $RUN --trainer quadratic --numel 10 --workers 1 --shards 1 --compress int4
start_worker nobf --steps 2 --sync-every 2 --no-bf16
start_server s1
RUN=plain
init_run $RUN --trainer quadratic --numel 10 --workers 1 --shards 1
start_worker ef --steps 2 --sync-every 2 --error-feedback
start_server s2
wait_workers ef
RUN=q4 wait_workers nobf
grep -q "WARN --no-bf16 applies to bf16 runs .*this run's pseudo-gradients are int4: ignored" "$TMP/worker-nobf.log" \
  || fail "no warning that --no-bf16 is ignored on an int4 run: $(grep -i warn "$TMP/worker-nobf.log")"
grep -q "WARN --error-feedback applies to block-quantized runs" "$TMP/worker-ef.log" \
  || fail "no warning that --error-feedback is ignored on a bf16 run"
say "--no-bf16 on an int4 run and --error-feedback on a bf16 run: each said to be ignored; both trained"

RUN=plain
v0=$(shard_versions $RUN)
start_worker never --steps 3 --sync-every 5
wait_workers never
grep -q "WARN --sync-every 5 is more than --steps 3: .*--final-sync" "$TMP/worker-never.log" \
  || fail "no warning that --sync-every 5 > --steps 3 never syncs: $(grep -i warn "$TMP/worker-never.log")"
[ "$(shard_versions $RUN)" = "$v0" ] || fail "version moved without a sync: $v0 -> $(shard_versions $RUN)"
start_worker last --steps 3 --sync-every 5 --final-sync
wait_workers last
grep -q "WARN --sync-every" "$TMP/worker-last.log" && fail "warned with --final-sync: $(grep WARN "$TMP/worker-last.log")"
[ "$(shard_versions $RUN)" = "$((v0 + 1))" ] || fail "--final-sync: version $v0 -> $(shard_versions $RUN), want $((v0 + 1))"
say "--sync-every 5 > --steps 3: warned (run stayed at version $v0); with --final-sync: no warning, version $((v0 + 1))"
