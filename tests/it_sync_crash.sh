#!/bin/sh
# it_sync_crash.sh: the exactness run while shard-servers die: the harness kill -9s a random one every
# 1 to 1.5 s and starts a new one, and every server also kills itself (fault injection) in 10% of its
# commits right after the round's pseudo-gradients arrived and its log entry was written, before
# dl_commit. The final parameters must be bit-identical to the fault-free reference: a version is a
# pure function of the previous one and the frozen pseudo-gradients, which workers keep and resend.
# test: light (it waits more than it computes: 5 s of CPU in 16 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=crash; NUMEL=200000; SEED=11; ROUNDS=12; H=20
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED --snapshot-every 3
for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --step-delay-ms 25; done

crash_storm w1 w2 w3
[ "$KILLS" -ge 5 ] || fail "only $KILLS kills happened: the test proved too little"
[ "$FAULTS" -ge 1 ] || fail "no server died between receiving pseudo-gradients and committing"
v="$ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS"
[ "$(shard_versions $RUN)" = "$v" ] || fail "versions: $(shard_versions $RUN)"
assert_matches_reference
say "bit-identical to the fault-free reference after $ROUNDS rounds"
