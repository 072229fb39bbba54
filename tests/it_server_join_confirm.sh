#!/bin/sh
# it_server_join_confirm.sh: a second shard-server joins a sync run while a round's commits are on their way
# (make demo-torch showed it with no fault at all: `duplicates 8`). s1 holds all 8 shards and reaches Redis
# through bin/delay-proxy (400 ms round trip), so each of its commits takes 1.2 s (3 round trips) while its
# beats come every 0.5 s (ttl 1500). s2 starts 0.3 s after round 0's barrier closed, when both workers
# already took all 8 shards of version 1 tentatively (served before dl_commit). s1 now holds more than its
# fair share, but its beats name the shards whose commit is under way busy (shard-server/lease.c), and
# dl_server_beat gives back none of those (lua/50_servers.lua): the shards above its fair share go only once
# committed. Given back earlier, their commits were fenced, s2 recomputed them, and before round 1 each worker's confirm
# (worker/diloco/sync.c) resent its kept pseudo-gradient: to all 8 shards before 49474e8 (duplicates 8,
# confirm_shards 8), to the 4 that moved since (confirm_shards 4). s1 announces the give-back and s2, which
# beats only every second (ttl 3000; below s1's ttl, or s1's beats would find it dead), takes the shards at
# once instead of at its next beat.
# Which 4 shards go depends on which commits are still under way at s1's beat: dl_server_beat gives back the
# highest-numbered shards not busy, usually 4-7, but a beat sent between two commits' replies (5 ms apart on
# a loaded machine: 0-5 done, 6-7 not, seen in CI) gives back 2-5.
# Checks: s1 gave back 4 shards (its share above the fair 4), each after its commit of version 1; s2 took each
# within 0.3 s of the give-back;
# no worker's confirm resent anything (confirm_shards 0) and no pseudo-gradient went to a shard already
# committed at its version (the run's `duplicates` count stays 0); shard digests, commits (each round once
# per shard) and the workers' final digests equal the fault-free reference (tests/tools/ref_quadratic).
. "$(dirname "$0")/lib.sh"
RUN=joinc; NUMEL=400000; SEED=23; ROUNDS=2; H=10
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
# s2 starts 0.3 s after round 0's close: s1 (which hears the close 0.2 s after it) has served version 1
# tentatively by then, and its next beat comes within 0.5 s, with its commits still under way (1.2 s)
wait_until 60 '[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -ge 1 ]' "round 0 to close" 0.02
sleep 0.3
owners() { for k in 0 1 2 3 4 5 6 7; do $RCLI HGET "dl:{$RUN}:shards" $k:owner; done | tr '\n' ' '; }
[ "$(owners)" = "s1 s1 s1 s1 s1 s1 s1 s1 " ] || fail "s1 does not hold every shard: $(owners)"
start_server s2 --lease-ttl-ms 3000
wait_workers w1 w2
dup=$($RCLI HGET "dl:{$RUN}:state" duplicates)
[ "${dup:-0}" -eq 0 ] || fail "$dup pushes went again to shards already committed at their version: $(grep -h 'duplicate push' "$TMP"/server-*.log | head -n 4)"
most=$(cat "$TMP/w1.jsonl" "$TMP/w2.jsonl" | grep '"event":"sync"' | sed 's/.*"confirm_shards":\([0-9]*\).*/\1/' | sort -n | tail -n 1)
[ "$most" = 0 ] || fail "a worker's confirm resent to and fetched $most shards (s1 gave them back with their commits under way)"
# per shard s1 gave back: the ms of s1's commit of version 1, of its release, and of s2's lease (dl:{R}:events)
$RCLI --json XRANGE "dl:{$RUN}:events" - + | python3 -c '
import json, sys
t = {}
for eid, kv in json.load(sys.stdin):
    f = dict(zip(kv[::2], kv[1::2])); ms = int(eid.split("-")[0])
    if f["type"] == "commit" and f["version"] == "1" and f["server"] == "s1": t.setdefault(f["shard"], {})["commit"] = ms
    if f["type"] == "release" and f["server"] == "s1": t.setdefault(f["shard"], {}).setdefault("release", ms)
    if f["type"] == "lease" and f["server"] == "s2": t.setdefault(f["shard"], {}).setdefault("lease", ms)
for k in sorted((k for k in t if "release" in t[k]), key=int):
    e = t[k]
    print(k, e.get("commit", -1), e["release"], e.get("lease", -1))' > "$TMP/handoff.txt"
gave=$(cut -d' ' -f1 "$TMP/handoff.txt" | tr '\n' ' ')
[ "$(wc -l < "$TMP/handoff.txt")" -eq 4 ] || fail "s1 gave back shards '$gave', not 4 of its 8 (fair share 4)"
while read -r k commit release lease; do
  [ "$commit" -ge 0 ] && [ "$commit" -le "$release" ] ||
    fail "s1 gave shard $k back at $release ms, before its commit of version 1 (at $commit; -1: s2 committed it)"
  [ "$lease" -ge "$release" ] && [ $((lease - release)) -le 300 ] ||
    fail "s2 took shard $k $((lease - release)) ms after s1 gave it back (it beats every second; the announcement should make it at once)"
done < "$TMP/handoff.txt"
say "shards ${gave% } given back after their commits, taken over in $(awk '{print $4 - $3}' "$TMP/handoff.txt" | tr '\n' ' ')ms"
[ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS" ] || fail "versions: $(shard_versions $RUN)"
REF_WORKERS=w1,w2
assert_matches_reference
assert_workers_end_at "$REF_DIGEST"
say "bit-identical to the reference; no confirm resent, no duplicate push"
