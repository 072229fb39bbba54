#!/bin/sh
# it_evaluator.sh: the evaluator role (bin/worker --evaluate-every N) publishes the validation loss of
# the global model to dl:{R}:evals, entry ID <version>-1, once per N versions.
#  1. quadratic run, evaluator every 2 versions: killed (SIGKILL) mid-run and restarted, with a second
#     evaluator racing it: the stream's versions are strictly increasing (no duplicate), the restarted
#     ones continued after the last entry, and the final version's loss equals
#     what `bin/worker --eval-only` prints for the same parameters. --eval-only run mid-run does not join
#     (no event names it): a run's barriers never wait for an evaluation.
#     `coordinator status`, /status and /metrics show the newest evaluation.
#  2. a tiny GPT on the Bible: the loss published for the final version equals --eval-only's, and falls.
. "$(dirname "$0")/lib.sh"
start_redis

# evals RUN: "version loss" lines of dl:{RUN}:evals, in stream order
evals() {
  $RCLI XRANGE "dl:{$1}:evals" - + | awk '/-1$/ {id=$1; sub(/-1$/, "", id); next}
    prev == "loss" {loss=$1} prev == "version" {v=$1} {prev=$1} prev == "time" && v != "" {print v, loss; v=""}'
}
# eval_only RUN FLAGS: the loss --eval-only prints for the current global parameters
eval_only() {
  run=$1; shift
  bin/worker --redis "$URL" --run "$run" --worker-id "eval-only-$run" --eval-only "$@" > "$TMP/eval-only-$run.txt" \
    2> "$TMP/eval-only-$run.log" || fail "--eval-only of $run: $(tail -n 3 "$TMP/eval-only-$run.log")"
  awk '{print $2}' "$TMP/eval-only-$run.txt"
}
start_evaluator() { # NAME RUN FLAGS
  name=$1; run=$2; shift 2
  bin/worker --redis "$URL" --run "$run" --evaluate-every "$@" > "$TMP/evaluator-$name.log" 2>&1 &
  pid=$!; PIDS="$PIDS $pid"; eval "EV_$name=$pid"
}

# ---- 1. quadratic: restart, a racing second evaluator, equality with --eval-only
RUN=quad; H=5; STEPS=80
init_run $RUN --trainer quadratic --numel 20000 --shards 4 --workers 2 --seed 7
start_server s1 --lease-ttl-ms 3000
start_evaluator a $RUN 2
for w in w1 w2; do start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms 25; done
wait_until 30 "[ \$($RCLI XLEN 'dl:{$RUN}:evals') -ge 2 ]" "two evaluations"
mid=$(eval_only $RUN) # while the workers train: --eval-only reads the run, it does not join it
$RCLI XRANGE "dl:{$RUN}:events" - + | grep -q "eval-only-$RUN" &&
  fail "--eval-only joined the run (a member's barrier would wait for its evaluation)"
say "quadratic: --eval-only mid-run printed $mid and left no trace among the run's members and events"
kill -9 "$EV_a"
before=$(evals $RUN | tail -n 1 | cut -d' ' -f1)
start_evaluator b $RUN 2
start_evaluator c $RUN 2
wait_workers w1 w2
final=$((STEPS / H))
wait_until 30 "evals $RUN | tail -n 1 | grep -q '^$final '" "the evaluation of version $final"
kill "$EV_b" "$EV_c"
for e in b c; do
  eval "wait \$EV_$e" || fail "evaluator $e exited with status $? on SIGTERM"
  grep -q "evaluator of run '$RUN': stopped by a signal" "$TMP/evaluator-$e.log" || fail "evaluator $e did not say it stopped"
done
evals $RUN > "$TMP/quad.evals"
say "quadratic: $(wc -l < "$TMP/quad.evals") evaluations: $(cut -d' ' -f1 "$TMP/quad.evals" | tr '\n' ' ')"
awk 'NR > 1 && $1 <= last {exit 1} {last = $1}' "$TMP/quad.evals" \
  || fail "versions not strictly increasing: $(cat "$TMP/quad.evals")"
grep -q "next at version $(((before / 2 + 1) * 2))" "$TMP/evaluator-b.log" "$TMP/evaluator-c.log" \
  || fail "the restarted evaluator did not continue after version $before"
[ "$(awk -v b="$before" '$1 > b' "$TMP/quad.evals" | wc -l)" -ge 2 ] || fail "no evaluations after the restart"
got=$(tail -n 1 "$TMP/quad.evals" | cut -d' ' -f2)
want=$(eval_only $RUN)
[ "$got" = "$want" ] || fail "published loss $got for version $final, --eval-only prints $want"
say "quadratic: version $final loss $got = --eval-only"
short=$(printf '%.4f' "$got")
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status.txt" || fail "coordinator status"
grep -q "^validation loss $short at version $final " "$TMP/status.txt" || fail "status: $(grep -i validation "$TMP/status.txt")"
HP=$(free_port)
bin/coordinator serve --redis "$URL" --run $RUN --http "127.0.0.1:$HP" --print-every 0 > "$TMP/coord.log" 2>&1 &
PIDS="$PIDS $!"
wait_until 10 "curl -s http://127.0.0.1:$HP/metrics > $TMP/metrics.txt" "GET /metrics"
grep -q "^diloco_eval_version{run=\"$RUN\"} $final\$" "$TMP/metrics.txt" || fail "metrics: $(grep eval "$TMP/metrics.txt")"
# compared as numbers: /metrics prints more digits than $short, which is rounded, not cut
m=$(sed -n "s/^diloco_eval_loss{run=\"$RUN\"} //p" "$TMP/metrics.txt")
awk -v m="$m" -v g="$got" 'BEGIN { d = m - g; exit !(m != "" && d < 1e-6 && d > -1e-6) }' \
  || fail "metrics: $(grep eval "$TMP/metrics.txt")"
curl -s "http://127.0.0.1:$HP/status" | python3 -c '
import json, sys
d = json.load(sys.stdin); n = int(sys.argv[1]); final = int(sys.argv[2])
assert len(d["evals"]) == n and d["eval_version"] == final and d["evals"][-1]["version"] == final, d["evals"]
assert abs(d["eval_loss"] - float(sys.argv[3])) < 1e-6' "$(wc -l < "$TMP/quad.evals")" $final "$got" \
  || fail "/status evals"
say "status, /status and /metrics show version $final at $short"

# ---- 2. tiny GPT
prepare_bible
RUN=gpt; H=10; STEPS=40
GPT="--data build/kjv.tok --seq 32 --threads 1 --eval-batches 4"
init_run $RUN --trainer gpt --layers 1 --heads 2 --dim 32 --ctx 32 --shards 2 --workers 2 --seed 3
start_server s2 --lease-ttl-ms 3000
start_evaluator g $RUN 1 $GPT
for i in 0 1; do
  start_worker "g$i" --sync-every $H --steps $STEPS --heartbeat-interval 1 $GPT --num-shards 2 --shard-index $i \
    --batch 4 --lr 3e-3 --warmup 5 --eval-every 0
done
wait_workers g0 g1
final=$((STEPS / H))
wait_until 60 "evals $RUN | tail -n 1 | grep -q '^$final '" "the evaluation of version $final"
kill "$EV_g"
evals $RUN > "$TMP/gpt.evals"
got=$(tail -n 1 "$TMP/gpt.evals" | cut -d' ' -f2)
want=$(eval_only $RUN $GPT)
[ "$got" = "$want" ] || fail "GPT: published loss $got for version $final, --eval-only prints $want"
first=$(head -n 1 "$TMP/gpt.evals" | cut -d' ' -f2)
awk -v a="$first" -v b="$got" 'BEGIN { exit !(b < a - 0.3) }' || fail "GPT validation loss did not fall: $first -> $got"
say "GPT: $(wc -l < "$TMP/gpt.evals") evaluations, $first -> $got; version $final = --eval-only"
