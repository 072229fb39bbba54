#!/bin/sh
# it_ha_cluster_async_failover.sh: async DiLoCo (lookahead 0.5, min_replicas 1) on a Redis Cluster of 3 masters
# with a replica each (node timeout 2 s), everyone given the URL of all six nodes. Mid-run the master holding
# the run's control keys is killed -9: its replica takes over, the processes follow, and the killed node
# comes back as a replica (the new master's WAITs need one). No worker or server is restarted. Every worker
# finishes, and the shards are bit-identical to tests/tools/ref_async's replay of the order Redis recorded,
# told which of the workers' tries failed without a trace in Redis (--failed: a dl_submit that never ran
# while the slot had no master; the next submission covers that window): the workers' sync records say
# which (a try's steps with no sync). Not equal to the replay without the lookahead.
# Opt-in (DILOCO_OPT_IN=1): in 42 runs (1 Dec) it passed 41 times; one run under tests/run.sh reported the
# digests different from the replay, and was not caught again with its logs in 39 more. A likely cause, not
# shown: a try that got its places but not its result (ref_async --late) taken for one that failed without a
# trace (--failed): both leave no sync record, and this test tells them apart only by that. Until that
# failure is understood it stays out of `make test`.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
[ "${DILOCO_OPT_IN:-0}" = 1 ] || { echo "SKIP: opt-in (DILOCO_OPT_IN=1): one unexplained replay difference in 42 runs, see the test's header"; exit 77; }
RUN=hcaf; H=10; STEPS=300
start_redis_cluster 1
URL="redis://$(echo $CLUSTER_PORTS | sed 's/\([0-9][0-9]*\)/127.0.0.1:\1/g; s/ /,/g')"
init_run $RUN --async --trainer quadratic --numel 60000 --shards 6 --workers 3 --min-replicas 1 --async-lookahead 0.5
start_server s1 --lease-ttl-ms 3000
start_server s2 --lease-ttl-ms 3000
for w in w1 w2 w3; do
  start_worker $w --sync-every $H --steps $STEPS --heartbeat-interval 1 --step-delay-ms $((10 + ${w#w} * 2))
done
slot=$(redis-cli -p "$PORT" cluster keyslot "{$RUN}")
victim=$(cluster_slot_port "$slot")
rep=""
for p in $CLUSTER_PORTS; do redis-cli -p "$p" info replication | grep -q "^master_port:$victim" && rep=$p; done
[ -n "$rep" ] || fail "no replica follows 127.0.0.1:$victim"
wait_until 30 "redis-cli -p $victim info replication | grep -q 'slave0:.*state=online'" "the replica of $victim online"
syncs() { grep -c '"event":"sync"' "$TMP/$1.jsonl" 2>/dev/null; }
wait_until 30 '[ "$(syncs w2)" -ge 3 ]' "w2 to sync 3 times"
kill -9 "$(cat "$TMP/node-$victim/redis.pid")"
t0=$(date +%s)
say "killed the master of {$RUN} (slot $slot), 127.0.0.1:$victim, after $(syncs w2) syncs of w2"
for p in $CLUSTER_PORTS; do [ "$p" != "$victim" ] && PORT=$p && RCLI="redis-cli -c -p $p" && break; done
wait_until 30 "redis-cli -p $rep role | head -n 1 | grep -q master" "the replica ($rep) to take over slot $slot"
eval redis-server $(cat "$TMP/node-$victim/args") > /dev/null || fail "restarting node $victim"
say "a replica took over after $(($(date +%s) - t0)) s; 127.0.0.1:$victim restarted"
wait_workers w1 w2 w3
for s in s1 s2; do eval "pid=\$SRV_$s"; alive "$pid" || fail "shard-server $s died"; done

# the tries that failed without a trace: try k of a worker ends at step k*H; no sync record there
failed=$(python3 - "$TMP" $H <<'PY'
import json, sys
tmp, h = sys.argv[1], int(sys.argv[2])
out = []
for w in ("w1", "w2", "w3"):
    steps = {json.loads(l)["step"] for l in open("%s/%s.jsonl" % (tmp, w)) if '"event":"sync"' in l}
    out += ["%s:%d" % (w, k) for k in range(1, max(steps) // h + 1) if k * h not in steps]
print(",".join(out))
PY
)
ref() { build/tests/tools/ref_async --redis "$URL" --run $RUN --sync-every $H ${failed:+--failed "$failed"} "$@"; }
ref > "$TMP/ref.txt" 2> "$TMP/ref.log" || fail "reference: $(cat "$TMP/ref.log")"
shard_digests $RUN > "$TMP/got.txt"
diff "$TMP/ref.txt" "$TMP/got.txt" > "$TMP/diff.txt" ||
  fail "digests differ from the replayed order (failed tries: ${failed:-none}; syncs $(syncs w1) $(syncs w2) $(syncs w3); $(cat "$TMP/ref.log")): $(cat "$TMP/diff.txt")"
ref --async-lookahead 0 > "$TMP/off.txt" 2> /dev/null || fail "reference without the lookahead"
cmp -s "$TMP/off.txt" "$TMP/got.txt" && fail "the run equals the replay without the lookahead"
say "bit-identical to the replay of $(sed 's/.*replayed //' "$TMP/ref.log"), failed tries ${failed:-none}; not to the one without the lookahead"
