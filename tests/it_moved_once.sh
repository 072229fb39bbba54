#!/bin/sh
# it_moved_once.sh: a shard-server that joins a sync run between rounds takes half the shards from the first
# one (lua/50_servers.lua rebalances at its next beat) while the workers train. Their map still names s1 for
# shards 4-7. A worker learns of the move before its next push when the confirm of its last round reads the
# leases' epochs in Redis (worker/diloco/owners.c, owners_follow), else from s1's `moved` answers to its
# pipelined pushes, after which it reads the owners at once (conn.c, follow_moved): each moved shard's Δ goes
# to s1 once at most (the batch, sent before any reply could tell), then to s2. Before, the first retry went
# to s1 again, was told `moved` again, and only the pause after it read the owners: one more Δ for nothing
# (6.5 MB up in the round after the move where the Δ is 4.0 and the moved shards' 2.0). Checks: s2 took
# shards 4-7; no worker's sync sent more than its Δ plus the moved shards' once more; shard digests, commits
# and the workers' final digests equal the fault-free reference (tests/tools/ref_quadratic).
. "$(dirname "$0")/lib.sh"
RUN=movedonce; NUMEL=2000000; SEED=5; ROUNDS=5; H=20
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED
owners() { for k in 0 1 2 3 4 5 6 7; do $RCLI HGET "dl:{$RUN}:shards" $k:owner; done | tr '\n' ' '; }
start_server s1 --lease-ttl-ms 3000
wait_until 30 '[ "$(owners)" = "s1 s1 s1 s1 s1 s1 s1 s1 " ]' "s1 to hold every shard"
# a second of training a round: the move (at s1's next beat, every second) comes while they train
start_worker w1 --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --step-delay-ms 50
start_worker w2 --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --step-delay-ms 60
wait_until 120 '[ "$($RCLI HGET "dl:{$RUN}:shards" 7:version)" -ge 1 ] 2>/dev/null' "round 0 committed"
start_server s2 --lease-ttl-ms 3000
wait_workers w1 w2
[ "$(owners)" = "s1 s1 s1 s1 s2 s2 s2 s2 " ] || fail "s2 did not take shards 4-7: $(owners)"
delta=$((NUMEL * 2)); bound=$((NUMEL * 2 + NUMEL))
for w in w1 w2; do
  most=$(grep '"event":"sync"' "$TMP/$w.jsonl" | sed 's/.*"bytes_up":\([0-9]*\).*/\1/' | sort -n | tail -n 1)
  [ "$most" -le $bound ] ||
    fail "$w sent $most bytes in one sync: more than its Δ ($delta) and the moved shards' once more ($((bound - delta)))"
  say "$w: at most $most bytes up in a sync (Δ $delta)"
done
[ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS" ] || fail "versions: $(shard_versions $RUN)"
REF_WORKERS=w1,w2
assert_matches_reference
assert_workers_end_at "$REF_DIGEST"
say "each moved shard's Δ went to the old owner once at most; bit-identical to the reference"
