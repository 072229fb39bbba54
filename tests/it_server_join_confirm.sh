#!/bin/sh
# it_server_join_confirm.sh: a second shard-server joins a sync run while a round's commits are on their way
# (make demo-torch showed it with no fault at all: `duplicates 8`). s1 holds all 8 shards and reaches Redis
# through bin/delay-proxy (400 ms round trip), so each of its commits takes 1.2 s (3 round trips) while its beats
# come every 500 ms (ttl 1500). s2 starts right after round 1's barrier closed; s1's next beat gives shards
# 4-7 back (lua/50_servers.lua: its fair share is 4 now), while both workers already took all 8 shards of
# version 2 tentatively (served before dl_commit). s1 commits shards 0-3; its commits of 4-7 are fenced,
# and s2 loads them at version 1. Before round 2 each worker confirms version 2 in Redis
# (worker/diloco/sync.c, sync_confirm_durable): 0-3 are committed with the digest it holds, 4-7 are not
# and their lease moved, so it sends its kept pseudo-gradient of round 1 to the new owner and gets them.
# Checks: the scenario happened (s1 lost shards 4-7 with a commit under way, a worker's confirm resent);
# no pseudo-gradient went again to a shard already committed at its version (the run's `duplicates` count
# stays 0) and no worker's confirm fetched one again (its sync events' confirm_shards <= 4, the shards
# that moved); shard digests, commits (each round once per shard) and the workers' final digests equal the
# fault-free reference (tests/tools/ref_quadratic). Before the fix each worker resent to all 8 and fetched
# all 8: duplicates 8, confirm_shards 8.
. "$(dirname "$0")/lib.sh"
RUN=joinc; NUMEL=400000; SEED=23; ROUNDS=3; H=10
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED
PPORT=$(free_port)
bin/delay-proxy --rtt-ms 400 --map 127.0.0.1:$PPORT=127.0.0.1:$PORT > "$TMP/proxy.log" 2>&1 &
PIDS="$PIDS $!"
wait_until 10 "grep -q listening '$TMP/proxy.log'" "delay-proxy listening"
URL_DIRECT=$URL; URL=redis://127.0.0.1:$PPORT
start_server s1 --lease-ttl-ms 1500
URL=$URL_DIRECT
for w in w1 w2; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --step-delay-ms 20; done
# s2 starts 0.3 s after round 1's close: s1 (which hears the close 0.2 s after it) has served version 2
# tentatively by then, and its next beat comes within 0.5 s, with its commits still under way (1.2 s)
wait_until 60 '[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -ge 1 ]' "round 0 to close"
while [ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -lt 2 ]; do sleep 0.02; done
sleep 0.3
owners() { for k in 0 1 2 3 4 5 6 7; do $RCLI HGET "dl:{$RUN}:shards" $k:owner; done | tr '\n' ' '; }
[ "$(owners)" = "s1 s1 s1 s1 s1 s1 s1 s1 " ] || fail "s1 does not hold every shard: $(owners)"
start_server s2 --lease-ttl-ms 1500
wait_workers w1 w2
grep -q "shard 4: lease lost (not renewed)" "$TMP/server-s1.log" || fail "s1 did not give shard 4 back"
resent=$(cat "$TMP/w1.jsonl" "$TMP/w2.jsonl" | grep '"event":"sync"' | grep -v '"confirm_shards":0' | head -n 1)
[ -n "$resent" ] || fail "no worker's confirm resent (s1's commits of shards 4-7 were not under way when it gave them back)"
say "a confirm that resent: $resent"
dup=$($RCLI HGET "dl:{$RUN}:state" duplicates)
[ "${dup:-0}" -eq 0 ] || fail "$dup pushes went again to shards already committed at their version: $(grep -h 'duplicate push' "$TMP"/server-*.log | head -n 4)"
most=$(cat "$TMP/w1.jsonl" "$TMP/w2.jsonl" | grep '"event":"sync"' | sed 's/.*"confirm_shards":\([0-9]*\).*/\1/' | sort -n | tail -n 1)
[ "$most" -le 4 ] || fail "a worker's confirm resent to and fetched $most shards; only 4 were not committed as it held them"
[ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS" ] || fail "versions: $(shard_versions $RUN)"
REF_WORKERS=w1,w2
assert_matches_reference
assert_workers_end_at "$REF_DIGEST"
say "bit-identical to the reference; no duplicate push, confirms resent to at most $most shards"
