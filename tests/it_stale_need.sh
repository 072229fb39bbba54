#!/bin/sh
# it_stale_need.sh: a `need` that comes after the commit that took our Δ is no lost round. A commit answers
# the gets it parked with the `need` its membership checks found, and a Δ may come in meanwhile (a worker's
# first send, still on its way); the next commit takes it. The worker, told `need`, sends its Δ again and
# is told STALE: committed already. Before, that STALE ended the worker's whole get as if the round had been
# lost ("round 0 of fragment 0 lost (stale)" in a sync, "the previous round closed without our
# pseudo-gradient" in a confirm): its sync counted as stale, and the fetch that followed may not push, so a
# shard whose new owner still needed the Δ waited for it (it_lost_round_resend). Now the get asks again.
#
# Made exact with shard-server --fault-late-need (fault.c): w1's first get of a committed version is
# answered with a `need` of its Δ of that round. One worker, one server, 3 rounds. Checks: the fault fired
# and the server counted w1's resend as a duplicate; w1 logged no lost or reset round; its 3 syncs are all
# complete (none stale); the shards equal the fault-free reference (tests/tools/ref_quadratic).
. "$(dirname "$0")/lib.sh"
RUN=lateneed; NUMEL=20000; SEED=9; ROUNDS=3; H=10
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 2 --workers 1 --seed $SEED
start_server s0 --fault-late-need w1
start_worker w1 --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --sync-timeout 30
wait_workers w1
grep -q "fault injection: w1's gets of version [0-9]* answered with a late .need." "$TMP/server-s0.log" ||
  fail "the fault did not fire: $(grep -i fault "$TMP/server-s0.log" | tail -n 3)"
grep -q "duplicate push from w1" "$TMP/server-s0.log" ||
  fail "w1 did not send its Δ again on the late need (no duplicate push in the server's log)"
bad="lost \(stale\)|closed without our|continuing from the committed|sync failed"
! grep -Eq "$bad" "$TMP/worker-w1.log" || fail "w1 took the late need for a lost round: $(grep -E "$bad" "$TMP/worker-w1.log" | head -n 3)"
n=$(grep '"event":"sync"' "$TMP/w1.jsonl" | grep -c '"stale":false')
[ "$n" -eq $ROUNDS ] || fail "w1: $n complete syncs, expected $ROUNDS"
[ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS" ] || fail "versions: $(shard_versions $RUN)"
REF_SHARDS=2 REF_WORKERS=w1
assert_matches_reference
say "a late need: w1 sent its Δ again, was told STALE, asked again and took the round; $ROUNDS complete syncs, bit-identical to the reference"
