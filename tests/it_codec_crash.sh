#!/bin/sh
# it_codec_crash.sh: an int3 run (the codec under 1 byte per parameter per round; CODEC=int4 etc. runs
# another) with error feedback and --download update while shard-servers die (as it_sync_crash.sh: the
# harness kill -9s a random one every 1 to 1.5 s, and each kills itself in 10% of its commits between
# the log write and dl_commit). Workers resend the encoded pseudo-gradients they keep (the error
# feedback is updated once per round, when Δ is made), shard loads replay the log of encoded updates, and a
# worker whose update's server died falls back to parameters with momentum: the final parameters are
# bit-identical to the fault-free reference of the same codec, on every worker too.
. "$(dirname "$0")/lib.sh"
RUN=ccrash; NUMEL=200000; SEED=13; ROUNDS=8; H=20; CODEC=${CODEC:-int3}
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED --snapshot-every 3 --compress $CODEC --download update
for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --step-delay-ms 25 --error-feedback; done
crash_storm w1 w2 w3
[ "$KILLS" -ge 3 ] || fail "only $KILLS kills happened: the test proved too little"
v="$ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS"
[ "$(shard_versions $RUN)" = "$v" ] || fail "versions: $(shard_versions $RUN)"
REF_ARGS="--codec $CODEC --error-feedback --download update"
assert_matches_reference
assert_workers_end_at "$REF_DIGEST"
say "bit-identical to the fault-free $CODEC reference after $ROUNDS rounds: $REF_DIGEST"
