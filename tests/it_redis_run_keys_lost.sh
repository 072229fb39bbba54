#!/bin/sh
# it_redis_run_keys_lost.sh: a key every run has vanishes under running processes: evicted by a Redis whose
# maxmemory-policy evicts (here allkeys-random, which drops keys at random once it is full; the DEL stands for
# the eviction, so that the test knows which key went) or deleted by an operator. A sync run, one shard-server,
# two workers. `coordinator status` warns about the evicting policy before anything is lost. Once
# dl:{R}:shards is gone, every function refuses the run (LOST, lua/10_helpers.lua) and nothing is made anew in
# its place; every process stays up and says which key is missing, why (the eviction policy) and what to do;
# `coordinator status` says the same. Then the remedy it names: `init --force --from-checkpoint` of the
# checkpoint saved before, and the run trains on from it. Before, the shard-server's next lease renewal made
# dl:{R}:shards anew with every shard at version 0 and lease epoch 1 (a fencing token reused), and status
# showed those shards "ok"; the loss of dl:{R}:state made the functions fail with Lua errors ("attempt to
# concatenate local 'cur' (a nil value)") and the workers exit.
# test: light (it waits for processes more than it computes)
. "$(dirname "$0")/lib.sh"
start_redis
RUN=lost
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 2 --seed 2
start_server s1 --lease-ttl-ms 1000
for w in w1 w2; do start_worker $w --sync-every 5 --step-delay-ms 5 --heartbeat-interval 1; done
wait_until 30 "[ \"\$($RCLI HGET 'dl:{$RUN}:shards' 1:version)\" -ge 3 ] 2>/dev/null" "three rounds committed"
bin/coordinator checkpoint save --redis "$URL" --run $RUN --out "$TMP/ckpt.safetensors" > "$TMP/ckpt.log" 2>&1 ||
  fail "checkpoint save: $(cat "$TMP/ckpt.log")"
$RCLI CONFIG SET maxmemory-policy allkeys-random > /dev/null || fail "CONFIG SET maxmemory-policy"
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status-policy.txt" 2>&1 || fail "status: $(cat "$TMP/status-policy.txt")"
grep -q "WARNING: maxmemory-policy allkeys-random lets Redis evict the run's keys" "$TMP/status-policy.txt" ||
  fail "status did not warn about the evicting policy: $(tail -n 3 "$TMP/status-policy.txt")"

$RCLI DEL "dl:{$RUN}:shards" > /dev/null
say "dl:{$RUN}:shards deleted (as an eviction would) under a running run"
# (the server's renewal, every ttl/3, either says the key is missing or, before the fix, makes it anew)
wait_until 20 "grep -q 'dl:{$RUN}:shards missing' $TMP/server-s1.log || [ \"\$($RCLI EXISTS 'dl:{$RUN}:shards')\" = 1 ]" \
  "the shard-server to find dl:{$RUN}:shards missing"
[ "$($RCLI EXISTS "dl:{$RUN}:shards")" = 0 ] ||
  fail "dl:{$RUN}:shards was made anew: $($RCLI HGETALL "dl:{$RUN}:shards" | paste -sd' ' | cut -c1-200)"
grep 'dl:{lost}:shards missing' "$TMP/server-s1.log" | grep -q "maxmemory-policy is allkeys-random" ||
  fail "the shard-server did not name the eviction policy: $(grep missing "$TMP/server-s1.log" | head -n 1)"
for w in w1 w2; do
  wait_until 20 "grep -q 'dl:{$RUN}:shards missing' $TMP/worker-$w.log" "$w to say dl:{$RUN}:shards is missing"
done
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status-lost.txt" 2>&1 && fail "status of a run that lost its shards exited 0"
grep -q "LOST dl:{$RUN}:shards missing (evicted.*--from-checkpoint" "$TMP/status-lost.txt" ||
  fail "status did not say what was lost and what to do: $(cat "$TMP/status-lost.txt")"
sleep 2 # (the processes go on renewing and beating: still nothing made anew)
[ "$($RCLI EXISTS "dl:{$RUN}:shards")" = 0 ] || fail "dl:{$RUN}:shards was made anew"
for p in $SRV_s1 $WRK_w1 $WRK_w2; do alive "$p" || fail "process $p exited after the loss"; done
say "every process up, saying what is missing and why; nothing made anew"

# the config evicted too: the run is not there, and the refusal says the likely cause
$RCLI DEL "dl:{$RUN}:config" > /dev/null
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status-norun.txt" 2>&1 && fail "status of a run without config exited 0"
grep -q "NORUN.*may have been evicted: this Redis's maxmemory-policy is allkeys-random" "$TMP/status-norun.txt" ||
  fail "status did not name the evicting policy: $(cat "$TMP/status-norun.txt")"
$RCLI CONFIG SET maxmemory-policy noeviction > /dev/null
bin/coordinator init --redis "$URL" --run $RUN --force --from-checkpoint "$TMP/ckpt.safetensors" > "$TMP/reinit.log" 2>&1 ||
  fail "init --force --from-checkpoint: $(cat "$TMP/reinit.log")"
start_worker w3 --sync-every 5 --step-delay-ms 5 --heartbeat-interval 1 --steps 30
start_worker w4 --sync-every 5 --step-delay-ms 5 --heartbeat-interval 1 --steps 30
wait_workers w3 w4
v0=$($RCLI HGET "dl:{$RUN}:shards" 0:version); v1=$($RCLI HGET "dl:{$RUN}:shards" 1:version)
# (version 0 of the new run is the checkpoint; w3 and w4 make 6 rounds from it)
[ "$v0" = "$v1" ] && [ "$v0" -ge 6 ] || fail "after the restore the shards are at versions $v0 and $v1, want 6 or more"
say "OK: restored from the checkpoint, trained on to version $v0 of the new run"
