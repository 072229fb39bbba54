#!/bin/sh
# it_sync_exactness.sh: 3 workers, 2 shard-servers, 8 shards, 5 sync rounds of the quadratic trainer.
# The final global parameters in Redis (every shard's digest) and on every worker are bit-identical
# to the in-process reference (tests/tools/ref_quadratic), and every shard was committed exactly once
# per round (audited from dl:{R}:events).
. "$(dirname "$0")/lib.sh"
RUN=exact; NUMEL=200000; SEED=7; ROUNDS=5; H=20
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED
start_server s1 --lease-ttl-ms 2000
start_server s2 --lease-ttl-ms 2000
for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1; done
wait_workers w1 w2 w3
[ "$(shard_versions $RUN)" = "5 5 5 5 5 5 5 5" ] || fail "shard versions: $(shard_versions $RUN)"
assert_matches_reference
want=$REF_DIGEST
assert_workers_end_at "$want"
say "bit-identical to the reference after $ROUNDS rounds: $want"
