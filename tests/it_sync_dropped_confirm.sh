#!/bin/sh
# it_sync_dropped_confirm.sh: a worker whose confirm finds that its previous round was committed without it
# (it was dropped) registers again at once instead of training one more round as a dead incarnation.
# Three workers, one shard; w3 trains faster than w1 and w2 (1.5 s a round against 2.5 s), so that after
# SIGCONT its confirm comes well before round 1 closes. Round 0 closes with all three; the shard-server serves version 1 to w3 alone,
# tentatively, and dies before committing it (--fault-tentative-to w3). w3 trains round 1 from version 1 and,
# at its sync, its confirm (worker/diloco/sync.c, sync_confirm_durable) waits for version 1's commit, which no
# server can make yet. w3 is SIGSTOPped there; the server is restarted with the same id and needs every
# participant's Δ again; w3 is evicted for its silence and dropped from round 0 (dl_drop), and version 1 is
# committed with w1 and w2 only. After SIGCONT the confirm finds version 1 committed with other
# parameters. Before the fix it reset to the global parameters and trained H more steps as the evicted
# incarnation, registering again only at the next sync, where its push was refused. Now it registers again
# right there and waits as a joiner for the open round to close. (Stopped while training instead, it would
# register again at its next inner step: tests/it_sync_evicted_midstep.sh.)
# Checks: the corner happened as arranged (the server died as arranged, w3 was evicted and dropped from
# round 0, version 1 committed without it); w3 trained 0 inner steps between the sync whose confirm lost the
# round and the first round it took part in again; shard digests, commits and final digests equal
# tests/tools/ref_quadratic with w3 away from round 0 until it rejoined, having trained round 1 from the
# tentative version (--away-tentative).
# test: light (it waits more than it computes: 4 s of CPU in 15 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=dropconf; NUMEL=4000; SEED=7; ROUNDS=4; H=10
start_redis
# min-workers 2: once w1 and w2 have left, w3 alone closes no round (the run stops at ROUNDS)
init_run $RUN --trainer quadratic --numel $NUMEL --shards 1 --workers 3 --min-workers 2 --seed $SEED \
  --heartbeat-timeout 0.8
start_server s0 --lease-ttl-ms 2000 --fault-tentative-to w3
for w in w1 w2; do
  start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 0.2 --step-delay-ms 250
done
start_worker w3 --sync-every $H --steps 0 --heartbeat-interval 0.2 --step-delay-ms 150
w3_step() {
  bin/coordinator status --redis "$URL" --run $RUN --json |
    python3 -c 'import json, sys; print([w["step"] for w in json.load(sys.stdin)["workers"] if w["id"] == "w3"][0])'
}
faulty=$SRV_s0
wait_until 15 '! alive $faulty' "the fault-injected server to die"
grep -q "fault injection: exiting before dl_commit (version 1 of shard 0 went to w3 alone" "$TMP/server-s0.log" ||
  fail "s0 did not die as arranged: $(tail -n 3 "$TMP/server-s0.log")"
mv "$TMP/server-s0.log" "$TMP/server-s0-faulty.log"
wait_until 8 '[ "$(w3_step)" -ge $((2 * H)) ]' "w3 to end round 1's training"
kill -STOP "$WRK_w3"
grep -q '"round":1,' "$TMP/w3.jsonl" && fail "w3 synced round 1 before it was stopped"
[ "$($RCLI HGET "dl:{$RUN}:shards" 0:version)" -eq 0 ] || fail "version 1 was committed before w3 was stopped"
say "s0 served version 1 to w3 tentatively and died; w3 stopped in its sync of round 1, waiting for that commit"
start_server s0 --lease-ttl-ms 2000
wait_until 12 '[ "$($RCLI HGET "dl:{$RUN}:shards" 0:version)" -ge 1 ]' "version 1 to be committed without w3"
[ "$($RCLI HEXISTS "dl:{$RUN}:workers" w3)" = 0 ] || fail "version 1 was committed while w3 was still a member"
$RCLI HGET "dl:{$RUN}:f0:r0" dropped | grep -q w3 || fail "w3 was not dropped from round 0"
kill -CONT "$WRK_w3"
[ "$($RCLI HGET "dl:{$RUN}:shards" 0:version)" -eq 1 ] ||
  fail "round 1 closed before w3 continued (the machine is too slow for this arrangement)"
say "w3 evicted and dropped from round 0; version 1 committed without it; w3 continued"

wait_workers w1 w2
wait_until 10 '[ "$(shard_versions $RUN)" = "$ROUNDS" ]' "the shard at version $ROUNDS"
kill -TERM "$WRK_w3"
wait "$WRK_w3" || fail "w3 exited with status $? after SIGTERM"
[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -eq $ROUNDS ] || fail "the run closed $($RCLI HGET "dl:{$RUN}:state" round:0) rounds"

rejoin_check w3 0
# the sync whose confirm lost round 0 is w3's first stale one
rejoin_dead_steps w3 "$(sync_field w3 '"stale":true' step)"
grep -q "committed with other parameters" "$TMP/worker-w3.log" || fail "w3's confirm did not find round 0 committed without it"
REF_SHARDS=1 assert_rejoin_reference w3 "--away w3=0-$((REJOIN_ROUND - 1)) --away-tentative"
say "digests equal the reference with w3 away from rounds 0..$((REJOIN_ROUND - 1)) (round 1 trained from the tentative version)"
