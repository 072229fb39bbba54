#!/bin/sh
# it_worker_moot_flags.sh: a worker flag that the run (or the other flags) makes moot is said at start, in
# a WARN line that says what happens instead, never silently dropped:
#   - --no-bf16 on an int4 run (which sends int4 whatever the flag), as --error-feedback on a bf16 run;
#   - --sync-every larger than --steps (the worker would leave before its first sync), pointing to
#     --final-sync; with --final-sync no warning, and its one sync is committed;
#   - --seed on a GPT worker (the parameters' init seed: a worker takes the run's parameters), unless it is
#     the run's;
# and the workers then train as usual. And model flags that make another model than a gpt run's are
# refused leading with what differs in the flags' terms (the run's layers=.. heads=.., the worker's flags),
# then the first tensor that differs where one does (--heads changes none: it trained another model).
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
# --no-bf16 on a top-k run (only block codecs were said) and --fragment-alpha on a run of one fragment
RUN=tk
init_run $RUN --trainer quadratic --numel 10 --workers 1 --shards 1 --compress topk
start_server s3
start_worker tknobf --steps 2 --sync-every 2 --no-bf16
wait_workers tknobf
grep -q "WARN --no-bf16 applies to bf16 runs .*this run's pseudo-gradients are topk: ignored" "$TMP/worker-tknobf.log" \
  || fail "no warning that --no-bf16 is ignored on a topk run: $(grep -i warn "$TMP/worker-tknobf.log")"
RUN=plain
start_worker alpha --steps 2 --sync-every 2 --fragment-alpha 0.5
wait_workers alpha
grep -q "WARN --fragment-alpha applies to Streaming runs .*this run has one fragment: ignored" "$TMP/worker-alpha.log" \
  || fail "no warning that --fragment-alpha is ignored on a run of one fragment: $(grep -i warn "$TMP/worker-alpha.log")"
say "--no-bf16 on a topk run and --fragment-alpha on one fragment: each said to be ignored"

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

RUN=g1
init_run $RUN --trainer gpt --layers 1 --heads 2 --dim 32 --ctx 32 --workers 1 --shards 1 --seed 7
lead="run 'g1' has a gpt of layers=1 heads=2 dim=32 ctx=32 vocab=256; this worker was started with"
way="drop the model flags (workers take the model from the run) or start a new run"
bin/worker --redis "$URL" --run $RUN --layers 2 --connect-timeout 0 > "$TMP/layers.log" 2>&1 && fail "--layers 2 on a 1-layer run: exit 0"
grep -q "ERROR $lead --layers 2: $way; tensor 14 of the run is 'lnf.weight' \[32\] at offset 21920, the gpt trainer's is 'h.1.ln1.weight'" \
  "$TMP/layers.log" || fail "--layers 2 on a 1-layer run: $(cat "$TMP/layers.log")"
bin/worker --redis "$URL" --run $RUN --heads 4 --dim 32 --connect-timeout 0 > "$TMP/heads.log" 2>&1 && fail "--heads 4 on a 2-head run: exit 0"
grep -q "ERROR $lead --heads 4: $way$" "$TMP/heads.log" || fail "--heads 4 on a 2-head run: $(cat "$TMP/heads.log")"
say "model flags other than the run's: refused, saying the run's model and the flags, then the first tensor that differs"

start_server s3
start_worker seed --steps 2 --sync-every 2 --seq 16 --batch 1 --seed 5
start_worker same --steps 2 --sync-every 2 --seq 16 --batch 1 --seed 7 --layers 1
wait_workers seed same
grep -q "WARN --seed 5 is ignored: a worker takes its parameters from the run (run 'g1' was initialised with seed 7" \
  "$TMP/worker-seed.log" || fail "no warning that --seed 5 is ignored: $(grep -i warn "$TMP/worker-seed.log")"
grep -q "WARN --seed" "$TMP/worker-same.log" && fail "warned about the run's own seed and model: $(grep WARN "$TMP/worker-same.log")"
say "--seed 5 on a worker of a seed-7 run: said to be ignored, and it trained; --seed 7 --layers 1 (the run's): nothing said"
