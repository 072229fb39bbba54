#!/bin/sh
# it_stream_in_flight.sh: Streaming DiLoCo with more than one fragment in flight (worker --fragments-in-flight
# D, worker/diloco/streaming.c): a fragment sent at boundary k is applied at boundary k + D. 4 fragments of 2
# shards, 3 workers, H = 20 (a fragment every 5 steps):
#   1. D = 2 (alpha 0.5 and a final sync of every fragment) and D = 3 (alpha 0): the final global parameters
#      are bit-identical to the in-process reference of that schedule (ref_quadratic --in-flight D) and differ
#      from the reference of D = 1, so the run did apply each fragment D intervals late;
#   2. D = 2 with rounds longer than an interval (--simulate-latency-ms 150, intervals of 5 steps of 20 ms;
#      w3 slower, so the others wait at barriers: two rounds of one worker at their barriers at once): the run
#      finishes, every round closed, bit-identical to the reference;
#   3. D = 2 with a shard-server killed (-9) after w1's sixth sync and replaced: the new owner gets the kept
#      pseudo-gradients again, every round closes, bit-identical to the reference;
#   4. the option's checks: 0, more than the run's fragments, and more than 1 in an async run are refused,
#      each naming the option; an H the fragments do not divide (6 with 4) is warned about at open.
. "$(dirname "$0")/lib.sh"
NUMEL=40000; SEED=23; H=20; STEPS=100
start_redis
exact() { # RUN D [ref args]: bit-identical to the reference of D in flight, and (D > 1) not to that of 1
  _r=$1; _dd=$2; shift 2
  stream_reference $_r $_dd "$TMP/ref-$_r.txt" "$@"
  shard_digests $_r > "$TMP/got-$_r.txt"
  grep '^shard' "$TMP/ref-$_r.txt" | diff - "$TMP/got-$_r.txt" > "$TMP/diff.txt" ||
    fail "$_r: shard digests differ from the reference of $_dd fragments in flight: $(cat "$TMP/diff.txt")"
  stream_reference $_r 1 "$TMP/ref1-$_r.txt" "$@"
  grep '^shard' "$TMP/ref1-$_r.txt" | diff - "$TMP/got-$_r.txt" > /dev/null &&
    fail "$_r: the run equals the reference of one fragment in flight: D was not applied"
  return 0
}
for cfg in 2:0.5 3:0 2:slow 2:kill; do
  D=${cfg%%:*}; alpha=${cfg#*:}; extra=""; final=""; kill=""; STEPS=100
  [ "$alpha" = 0.5 ] && final=--final-sync
  [ "$alpha" = slow ] && { alpha=0; STEPS=60; extra="--simulate-latency-ms 150 --step-delay-ms 20"; }
  [ "$alpha" = kill ] && { alpha=0; kill=1; extra="--simulate-latency-ms 60 --step-delay-ms 20"; }
  RUN="flight$D${extra:+slow}$kill"
  init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --fragments 4 --workers 3 --seed $SEED
  start_server "a$RUN" --lease-ttl-ms 1000
  start_server "b$RUN" --lease-ttl-ms 1000
  for w in w1 w2 w3; do
    slower=""; [ -n "$extra" ] && [ -z "$kill" ] && [ $w = w3 ] && slower="--step-delay-ms 30"
    start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 1 --fragment-alpha $alpha \
      --fragments-in-flight $D $final $extra $slower
  done
  if [ -n "$kill" ]; then
    wait_until 30 '[ "$(cat "$TMP/w1.jsonl" 2>/dev/null | grep -c "\"event\":\"sync\"")" -ge 6 ]' "w1's sixth sync"
    eval "kill -9 \$SRV_b$RUN"
    start_server "c$RUN" --lease-ttl-ms 1000
  fi
  wait_workers w1 w2 w3
  [ -z "$kill" ] || grep -q "committed version" "$TMP/server-c$RUN.log" ||
    fail "$RUN: the replacing shard-server committed nothing: $(tail -3 "$TMP/server-c$RUN.log")"
  exact $RUN $D --alpha $alpha $final
  want=$((STEPS / (H / 4) / 4)); [ -n "$final" ] && want=$((want + 1))
  [ "$(shard_versions $RUN)" = "$want $want $want $want $want $want $want $want" ] ||
    fail "$RUN: versions per shard $(shard_versions $RUN), expected $want each (a round that did not close)"
  syncs=$(grep -c '"event":"sync"' "$TMP/w1.jsonl")
  say "D $D alpha $alpha ${extra:+(rounds delayed: $extra) }${kill:+(a server killed, replaced) }: bit-identical to the reference of D in flight, not to D = 1 ($want versions per shard, $syncs fragment syncs by w1, $(grep -c 'longer than' "$TMP/worker-w1.log") warnings of rounds that outlast their intervals)"
  rm -f "$TMP"/w*.jsonl
done
# the option's checks: each refused at open with the option named
bin/worker --redis "$URL" --run flight2 --trainer quadratic --fragments-in-flight 0 --steps 1 > "$TMP/d0.log" 2>&1 &&
  fail "--fragments-in-flight 0 was accepted"
grep -q "fragments-in-flight" "$TMP/d0.log" || fail "D 0: no clear error: $(cat "$TMP/d0.log")"
bin/worker --redis "$URL" --run flight2 --trainer quadratic --fragments-in-flight 5 --steps 4 --sync-every 4 \
  > "$TMP/d5.log" 2>&1 && fail "--fragments-in-flight 5 joined a run of 4 fragments"
grep -q "fragments-in-flight 5 (diloco_options.fragments_in_flight): run 'flight2' has 4 fragment(s)" "$TMP/d5.log" || fail "D 5: no clear error: $(cat "$TMP/d5.log")"
# D = F with alpha 0: each fragment's new values come back just as it is due again, so every Δ after its
# first would be zero (the run would learn nothing): refused, naming both ways out
bin/worker --redis "$URL" --run flight2 --trainer quadratic --fragments-in-flight 4 --steps 4 --sync-every 4 \
  > "$TMP/d4.log" 2>&1 && fail "--fragments-in-flight 4 with alpha 0 joined a run of 4 fragments"
grep -q "fragments-in-flight 4 .*every pseudo-gradient after its first would be zero; use at most 3 in flight, or a --fragment-alpha" "$TMP/d4.log" ||
  fail "D 4 = F, alpha 0: no clear error: $(cat "$TMP/d4.log")"
# H that the fragments do not divide: legal, but each fragment syncs every F x floor(H/F) steps, not H: said at open
RUN=flight2
start_worker hodd --sync-every 6 --steps 0 --heartbeat-interval 1
wait_until 10 "grep -q 'sync-every 6 (diloco_options.sync_every) is not a multiple of the 4 fragments' \"\$TMP/worker-hodd.log\"" \
  "the warning of an H the fragments do not divide"
grep -q "each fragment syncs every 4 steps, not 6; use a multiple of 4 (e.g. 8)" "$TMP/worker-hodd.log" ||
  fail "H 6, F 4: the warning does not say the H it gets and one to use: $(cat "$TMP/worker-hodd.log")"
wait_until 10 "grep -q 'joined run flight2' \"\$TMP/worker-hodd.log\"" "hodd's join line"
grep "joined run flight2" "$TMP/worker-hodd.log" | grep -q "H=4, not the 6 asked for" ||
  fail "H 6, F 4: the join line does not show the H in effect: $(grep 'joined run' "$TMP/worker-hodd.log")"
kill -TERM "$WRK_hodd"
RUN=flightasync
init_run $RUN --trainer quadratic --numel 4000 --shards 4 --fragments 2 --async
bin/worker --redis "$URL" --run $RUN --trainer quadratic --fragments-in-flight 2 --steps 4 --sync-every 4 \
  > "$TMP/da.log" 2>&1 && fail "--fragments-in-flight 2 joined an async run"
grep -q "fragments-in-flight 2 (diloco_options.fragments_in_flight): run 'flightasync' is asynchronous" "$TMP/da.log" || fail "async: no clear error: $(cat "$TMP/da.log")"
say "refused: $(tail -c 120 "$TMP/d0.log" | tr '\n' ' ') | $(grep -h 'fragments-in-flight 5' "$TMP/d5.log" | sed 's/.*ERROR //' | cut -c1-110) | $(grep -h 'asynchronous' "$TMP/da.log" | sed 's/.*ERROR //' | cut -c1-110) | $(grep -h 'would be zero' "$TMP/d4.log" | sed 's/.*ERROR //' | cut -c1-110)"
