#!/bin/sh
# it_topk_restart.sh: a worker of a --compress topk --download update run killed with SIGKILL and started
# again under the same id. It loses its accumulator e (it lives only in the worker's process: the
# restarted worker starts from e = 0, docs/compression.md "The sparse codec"), fetches the parameters
# with the momentum once, and takes part in every round after: the rounds after its return close with
# both workers, every update each worker applies gives the committed digest (no "digest mismatch"), and
# both workers report the same digest for every version they both synced.
. "$(dirname "$0")/lib.sh"
RUN=tkrestart
round() { $RCLI HGET "dl:{$RUN}:state" round:0; }
participants() { $RCLI HGET "dl:{$RUN}:f0:r$1" participants | awk -F, '{n = NF} END {print n + 0}'; }
WFLAGS="--sync-every 10 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 5"
start_redis
init_run $RUN --trainer quadratic --numel 30011 --shards 4 --workers 2 --compress topk --download update
start_server a --lease-ttl-ms 2000
start_server b --lease-ttl-ms 2000
start_worker w1 $WFLAGS
start_worker w2 $WFLAGS
wait_until 20 '[ "$(round)" -ge 3 ]' "3 rounds"
kill -9 "$WRK_w2"
wait "$WRK_w2" 2>/dev/null
cp "$TMP/w2.jsonl" "$TMP/w2-before.jsonl"
start_worker w2 $WFLAGS
wait_until 20 'grep -q "joined run" "$TMP/worker-w2.log"' "the restarted w2 to join"
r0=$(round)
wait_until 20 '[ "$(round)" -ge $((r0 + 4)) ]' "4 rounds after w2's return"
r1=$(round)
kill -TERM "$WRK_w1" "$WRK_w2"
wait "$WRK_w1"; wait "$WRK_w2"
# (the log is appended to) its first round after the restart (a joiner takes part from the round after the one open when it
# registered), then every round after it
first=$(tail -n +$(($(wc -l < "$TMP/w2-before.jsonl") + 1)) "$TMP/w2.jsonl" | grep '"event":"sync"' | head -n 1 | sed 's/.*"round":\([0-9]*\),.*/\1/')
[ -n "$first" ] && [ "$first" -le $((r0 + 1)) ] || fail "the restarted w2 synced first at round ${first:-none} (back at $r0)"
r=$first
while [ "$r" -lt "$r1" ]; do
  [ "$(participants $r)" -eq 2 ] || fail "round $r closed with $(participants $r) participant(s) after w2's return"
  r=$((r + 1))
done
! grep -q "digest mismatch\|committed ones" "$TMP"/worker-w*.log || fail "an update gave another digest than the committed one: $(grep -h "committed ones" "$TMP"/worker-w*.log | head -n 2)"
# version -> digest of each worker's syncs; every version both synced has one digest
for w in w1 w2; do
  cat "$TMP/$w.jsonl" | grep '"event":"sync"' \
    | sed 's/.*"version":\([0-9]*\),.*"digest":"\([0-9a-f]*\)".*/\1 \2/' | sort -u > "$TMP/$w.versions"
done
common=$(join "$TMP/w1.versions" "$TMP/w2.versions" | wc -l)
[ "$common" -ge 6 ] || fail "only $common versions synced by both workers"
join "$TMP/w1.versions" "$TMP/w2.versions" | awk '$2 != $3 {print; bad = 1} END {exit bad}' \
  || fail "the workers hold different parameters at the same version"
say "w2 killed after round 3 and restarted (its accumulator from zero), back at round $r0: rounds $first..$((r1 - 1)) closed with both, $common versions with one digest each, no digest mismatch"
