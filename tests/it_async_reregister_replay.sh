#!/bin/sh
# it_async_reregister_replay.sh: async runs in which a worker registers again replay bit for bit.
# A worker that registers again (worker/diloco/round.c: round_rejoin, round_net, on_failure) drops the steps it
# trained since it last took versions, takes every fragment from the run (not ahead, its tokens counted anew,
# its AdamW state kept) and its next boundary comes a whole interval later; a place of its old incarnation
# that no Δ reached is committed as a no-op (participants 0). Its join event records the inner steps it had
# trained (`steps`) and the versions it held (`held`, lua/30_workers.lua), from which tests/tools/ref_async
# replays the dropped steps. Five runs (2 workers of different speeds, the quadratic trainer, starts ahead,
# weighted by tokens), plain async and Streaming (2 fragments):
#   evicted, stream_evicted: w1 is SIGSTOPped after its 2nd submission until the reaper evicts it, then
#     SIGCONTed: it registers again, mid-interval (its heartbeat told it) or at a boundary (its submission in
#     flight was refused: Streaming registers at that round's settling, on the training thread), and trains on;
#   lost, stream_lost: w1 reaches Redis through tests/tools/drop_proxy.py, which loses every reply of its 3rd
#     dl_submit: that place stays without a Δ, the get of the fragment's next submission is answered `need`
#     for it and w1 registers again at once (it_async_need_pause.sh): one no-op place, whose window went with
#     that next submission's Δ;
#   lost_evicted: the same lost reply, w1 stopped during its tries until the reaper evicts it: the no-op place
#     is followed by the registration, not by a submission; w1 trained on from that try's start and dropped it.
# Each run: w1 registered twice, the second time after trained steps, holding a version of every shard; the
# shards' digests equal the replay's and differ from the replay that ignores the registrations
# (--skip-rejoins) or replays the no-op place as a submission (--skip-noops). Before 29 November a Streaming
# worker that registered again at a boundary sent the next fragment at once, a zero Δ over no step that took a
# place and an outer step (stream_lost's digests then differ from the replay), and one whose round in flight
# learnt of the eviction registered on the round's thread, its steps counted while training went on (a
# stream_evicted run that takes that path differed).
. "$(dirname "$0")/lib.sh"
H=10
start_redis
# joins RUN W: W's join events, one "steps held" line each
joins() {
  $RCLI XRANGE "dl:{$1}:events" - + | awk -v who="$2" '/^type$/ {getline; t = $0} /^worker$/ {getline; w = $0}
    /^steps$/ {getline; s = $0} /^held$/ {getline; if (t == "join" && w == who) print s, $0}'
}
# rejoined RUN: w1 registered twice, the second time after trained steps, holding versions of both shards
rejoined() {
  $RCLI XRANGE "dl:{$1}:events" - + > "$TMP/events-$1.txt"
  joins "$1" w1 > "$TMP/joins-$1.txt"
  [ "$(wc -l < "$TMP/joins-$1.txt")" = 2 ] && head -n 1 "$TMP/joins-$1.txt" | grep -q '^0 ' &&
    tail -n 1 "$TMP/joins-$1.txt" | grep -Eq '^[1-9][0-9]* 0:[0-9]+(,[1-9]:[0-9]+)+$' ||
    fail "$1: w1's registrations (steps, held): $(tr '\n' ';' < "$TMP/joins-$1.txt")"
  say "$1: w1 registered again after $(tail -n 1 "$TMP/joins-$1.txt" | cut -d' ' -f1) steps," \
    "holding $(tail -n 1 "$TMP/joins-$1.txt" | cut -d' ' -f2)"
}
init_flags="--async --trainer quadratic --numel 12000 --async-lookahead 0.5 --weight-by tokens --weight-ref-tokens 10
  --workers 2"

# stop_until_evicted: SIGSTOP w1 until the reaper removes it, then SIGCONT
stop_until_evicted() {
  kill -STOP "$WRK_w1"
  wait_until 5 '[ "$($RCLI HEXISTS "dl:{$RUN}:workers" w1)" = 0 ]' "w1 to be evicted"
  kill -CONT "$WRK_w1"
}

# evicted RUN INIT_FLAGS...: w1 stopped past the heartbeat timeout after its 2nd submission, then continued.
# It learns of the eviction from its heartbeat mid-interval, or from its submission, refused, or (Streaming,
# whose rounds run beside training) from its heartbeat before its next round, which then registers once the
# rounds in flight have ended (LATER: the path taken under AddressSanitizer, whose worker is slower)
LATER="we were evicted (heartbeats missed for longer than the timeout); registering again once the rounds in flight have ended"
evicted() {
  RUN=$1; shift
  init_run $RUN $init_flags --heartbeat-timeout 0.8 "$@"
  start_server s0
  start_worker w1 --sync-every $H --steps 80 --heartbeat-interval 0.2 --step-delay-ms 15
  start_worker w2 --sync-every $H --steps 300 --heartbeat-interval 0.2 --step-delay-ms 8
  wait_until 10 '[ "$(submissions $RUN w1)" -ge 2 ]' "w1's 2nd submission"
  stop_until_evicted
  wait_workers w1 w2
  how=$(grep -o "during inner step [0-9]* of [0-9]*\|round [0-9]* of fragment [0-9]* lost: we were evicted\|$LATER" \
    "$TMP/worker-w1.log" | head -n 1)
  [ -n "$how" ] || fail "$RUN: w1 did not say that it was evicted"
  mv "$TMP/worker-w1.log" "$TMP/worker-w1-$RUN.log"
  rejoined $RUN
  say "$RUN: w1 learnt it was evicted $how"
  ref_async_check $RUN $H "(w1 evicted, registered again)" --skip-rejoins
  kill $SRV_s0; wait $SRV_s0
}

# lossy RUN HB_TIMEOUT W2_STEPS W1_FLAGS... -- INIT_FLAGS...: a run whose w1 reaches Redis through
# tests/tools/drop_proxy.py, which loses every reply of its 3rd dl_submit; w2 talks to Redis directly
lossy() {
  RUN=$1; hb=$2; w2_steps=$3; shift 3
  w1_flags=""; while [ "$1" != "--" ]; do w1_flags="$w1_flags $1"; shift; done; shift
  init_run $RUN $init_flags --heartbeat-timeout $hb "$@"
  start_server s0
  drop_proxy w1 "$PORT" --match dl_submit --skip 2 --drops 10 --lose reply
  direct=$URL; URL=redis://127.0.0.1:$PPORT_w1
  start_worker w1 --sync-every $H --steps 60 --step-delay-ms 2 $w1_flags
  URL=$direct
  start_worker w2 --sync-every $H --steps $w2_steps --heartbeat-interval 0.2 --step-delay-ms 5
}

# one_noop WHAT: the lossy run's w1 registered again, and the replay, bit-identical, took that registration and
# the lost reply's no-op place
one_noop() {
  wait_workers w1 w2
  mv "$TMP/worker-w1.log" "$TMP/worker-w1-$RUN.log"
  rejoined $RUN
  ref_async_check $RUN $H "($1)" --skip-noops
  grep -q ", 1 new registrations, 1 no-op places" "$TMP/ref-$RUN.log" ||
    fail "$RUN: the replay did not take one registration and one no-op: $(cat "$TMP/ref-$RUN.log")"
  kill $SRV_s0; wait $SRV_s0
}

# lost RUN INIT_FLAGS...: w1 registers again at once, at the `need` for its lost place
lost() {
  run=$1; shift
  lossy $run 10 60 --heartbeat-interval 1 --max-sync-retries 2 -- "$@"
  one_noop "w1's 3rd dl_submit reply lost, registered again"
  grep -q "registering again now" "$TMP/worker-w1-$RUN.log" || fail "$RUN: w1 did not register again at once"
}

# lost_evicted: the same lost reply, w1 stopped during its tries until it is evicted: it never knew of the place,
# trained on from the window's start (its tries failed) and registered again before its next submission, holding
# that try's base: the no-op's window and the steps after it are dropped, trained on from where it was
lost_evicted() {
  lossy lost_evicted 0.8 300 --heartbeat-interval 0.2 -- --shards 2
  wait_until 10 'grep -q "lost the reply" "$TMP/proxy-$RUN-w1.log"' "the first lost reply"
  stop_until_evicted
  one_noop "w1's 3rd dl_submit reply lost, w1 evicted meanwhile"
}

evicted evicted --shards 2
lost_evicted
lost lost --shards 2
evicted stream_evicted --shards 4 --fragments 2
lost stream_lost --shards 4 --fragments 2
