#!/bin/sh
# it_stream_slow_round.sh: a Streaming worker whose fragment rounds take longer than an interval says so.
# Each boundary waits for the round in flight (worker/diloco/streaming.c), so training stalls at every
# boundary; over a distant link (bench/wan_training: RTT 300 ms, H = 40, 4 fragments kept 57% of the speed,
# 2 fragments 99%) the user sees the speed drop and nothing else. The worker now warns, at most once a
# minute, with the round's time, the interval's and what hides it (fewer fragments, a larger H).
# Run slow: 4 fragments, H = 20 (intervals of 5 steps of 20 ms), each round delayed 400 ms
# (--simulate-latency-ms): both workers warn, once each, naming the fragments option. Run quick: the same
# without the delay and with longer steps: no warning.
# Runs waits and lone: rounds long only for the wait at their barrier (coordinator control set-workers 3 on a
# run of 2 workers for 4 s; a lone worker of a run of 2, stopped with SIGTERM while it waits) are no slow
# link: no warning (it used to blame the link and suggest --fragments-in-flight, at most 1 there).
# test: light (it waits more than it computes: 2 s of CPU in 9 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
start_redis
for RUN in slow quick; do
  init_run $RUN --trainer quadratic --numel 20000 --shards 4 --fragments 4 --workers 2 --seed 3
  start_server "s$RUN" --lease-ttl-ms 2000
  extra="--step-delay-ms 20 --simulate-latency-ms 400"
  [ $RUN = quick ] && extra="--step-delay-ms 50"
  for w in w1 w2; do start_worker $w --sync-every 20 --steps 60 --heartbeat-interval 1 $extra; done
  wait_workers w1 w2
  for w in w1 w2; do
    n=$(grep -c "round took .* longer than the interval of 5 steps" "$TMP/worker-$w.log")
    if [ $RUN = slow ]; then
      [ "$n" -eq 1 ] || fail "$RUN: $w warned $n times about rounds longer than an interval, expected once"
      grep "longer than the interval" "$TMP/worker-$w.log" | grep -q "coordinator init --fragments" ||
        fail "$RUN: $w's warning does not say what to do: $(grep 'longer than the interval' "$TMP/worker-$w.log")"
    else
      [ "$n" -eq 0 ] || fail "$RUN: $w warned although its rounds are short: $(grep 'longer than' "$TMP/worker-$w.log")"
    fi
  done
  say "$RUN: $(grep -h 'longer than the interval' "$TMP"/worker-w1.log | sed 's/.*WARN //' | cut -c1-150)"
  rm -f "$TMP"/w*.jsonl
done

init_run waits --trainer quadratic --numel 2000 --shards 2 --fragments 2 --workers 2 --seed 3
init_run lone --trainer quadratic --numel 2000 --shards 2 --fragments 2 --workers 2 --seed 3
RUN=waits start_server swaits --lease-ttl-ms 2000
RUN=lone start_server slone --lease-ttl-ms 2000
flags="--sync-every 20 --steps 400 --step-delay-ms 5 --heartbeat-interval 1"
RUN=lone; start_worker lone $flags
RUN=waits; for w in w1 w2; do start_worker $w $flags; done
wait_until 20 "[ \"\$(round 0)\" -ge 2 ]" "the first rounds of run waits"
bin/coordinator control --redis "$URL" --run waits set-workers 3 > /dev/null || fail "set-workers 3"
sleep 4
bin/coordinator control --redis "$URL" --run waits set-workers 2 > /dev/null || fail "set-workers 2"
wait_workers w1 w2
term_and_time "$WRK_lone" "the lone worker to stop"
for w in w1 w2 lone; do
  ! grep -q "longer than the interval" "$TMP/worker-$w.log" ||
    fail "$w blamed the link for a wait at its barrier: $(grep 'longer than the interval' "$TMP/worker-$w.log")"
done
say "waits, lone: no warning for a wait at the barrier"
