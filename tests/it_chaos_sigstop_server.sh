#!/bin/sh
# it_chaos_sigstop_server.sh: fencing. Two shard-servers (lease ttl 1 s), three workers. Six times, right
# after a round closes (while the owner is computing or about to compute that round's commit), the
# harness SIGSTOPs the server that holds shard 0 for 3 s, three times its lease ttl: its leases expire
# and move to the other server (new epochs); then SIGCONT: the woken server still believes it owns its
# shards and may try to commit what it had in flight, which dl_commit must fence (stale epoch), and it
# must drop the shards from memory. Proof that no late write changed anything: every (shard, version)
# committed exactly once, by the lease holder of the current epoch, and the final parameters are
# bit-identical to the fault-free reference (tests/tools/ref_quadratic).
# test: light (it waits more than it computes: 8 s of CPU in 25 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
RUN=fence; NUMEL=200000; SHARDS=4; SEED=13; ROUNDS=40; H=20; TTL=1000
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards $SHARDS --workers 3 --seed $SEED --snapshot-every 3 \
  --heartbeat-timeout 20
start_server s1 --lease-ttl-ms $TTL
start_server s2 --lease-ttl-ms $TTL
for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --step-delay-ms 20; done
wait_until 30 '[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -ge 2 ]' "two rounds"
stops=0; moved=0
for i in 1 2 3 4 5 6; do
  owner=$($RCLI HGET "dl:{$RUN}:shards" 0:owner)
  epoch=$($RCLI HGET "dl:{$RUN}:shards" 0:epoch)
  eval "pid=\${SRV_$owner:-}"
  [ -n "$pid" ] || fail "shard 0 owned by unknown server '$owner'"
  # block until the next round closes, then freeze its commit
  $RCLI XREAD BLOCK 5000 STREAMS "dl:{$RUN}:events" '$' > /dev/null
  r=$($RCLI HGET "dl:{$RUN}:state" round:0)
  [ "$r" -ge $((ROUNDS - 2)) ] && break
  kill -STOP "$pid"; stops=$((stops + 1))
  T=$(date +%s.%N)
  say "SIGSTOP $owner (shard 0 at epoch $epoch, round $r)"
  sleep 3
  e2=$($RCLI HGET "dl:{$RUN}:shards" 0:epoch); o2=$($RCLI HGET "dl:{$RUN}:shards" 0:owner)
  if [ "$o2" != "$owner" ] && [ "$e2" -gt "$epoch" ]; then moved=$((moved + 1)); else
    kill -CONT "$pid"; fail "shard 0 did not move from stopped $owner (owner $o2, epoch $epoch -> $e2)"; fi
  kill -CONT "$pid"
  say "SIGCONT $owner: shard 0 now at $o2 epoch $e2"
  sleep 1.5
done
wait_workers w1 w2 w3
[ "$stops" -ge 4 ] || fail "only $stops SIGSTOPs happened"
fenced=$(cat "$TMP"/server-*.log | grep -ci "fenced")
lost=$(cat "$TMP"/server-*.log | grep -c "lease lost")
say "$stops SIGSTOPs, shard 0 moved each time; server logs: $fenced fenced commit attempts, $lost leases dropped on waking"
v=""; for k in $(seq $SHARDS); do v="$v $ROUNDS"; done
[ "$(shard_versions $RUN)" = "$(echo $v)" ] || fail "versions: $(shard_versions $RUN)"
$RCLI XRANGE "dl:{$RUN}:events" - + > "$TMP/events.txt"
python3 - "$TMP/events.txt" $SHARDS $ROUNDS <<'PY' || fail "commit audit"
import sys
lines = open(sys.argv[1]).read().split("\n")
nsh, rounds = int(sys.argv[2]), int(sys.argv[3])
evs, i = [], 0
while i < len(lines):
    if lines[i] == "type":  # XRANGE raw output: id, then field/value lines
        j, e = i, {}
        while j + 1 < len(lines) and lines[j] and not lines[j][0].isdigit() or (j == i):
            e[lines[j]] = lines[j + 1]; j += 2
            if j >= len(lines) or (lines[j] and lines[j][0].isdigit() and "-" in lines[j]): break
        evs.append(e); i = j
    else:
        i += 1
epoch = {}  # shard -> (server, epoch) of the latest lease grant
seen, bad = set(), []
for e in evs:
    if e.get("type") == "lease":
        epoch[e["shard"]] = (e["server"], e["epoch"])
    if e.get("type") == "commit":
        key = (e["shard"], e["version"])
        if key in seen: bad.append("shard %s version %s committed twice" % key)
        seen.add(key)
        if epoch.get(e["shard"]) != (e["server"], e["epoch"]):
            bad.append("shard %s version %s committed by %s epoch %s while the lease was %s" % (e["shard"], e["version"], e["server"], e["epoch"], epoch.get(e["shard"])))
if len(seen) != nsh * rounds: bad.append("%d commits, expected %d" % (len(seen), nsh * rounds))
print("\n".join(bad) or "every commit once, each by the current lease holder and epoch (%d commits)" % len(seen))
sys.exit(1 if bad else 0)
PY
build/tests/tools/ref_quadratic --numel $NUMEL --shards $SHARDS --seed $SEED --workers w1,w2,w3 --rounds $ROUNDS \
  --sync-every $H --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref.txt" || fail "reference"
shard_digests $RUN > "$TMP/got.txt"
grep '^shard' "$TMP/ref.txt" | diff - "$TMP/got.txt" > "$TMP/diff.txt" || fail "shard digests differ: $(cat "$TMP/diff.txt")"
say "bit-identical to the fault-free reference after $ROUNDS rounds and $stops frozen lease holders"
