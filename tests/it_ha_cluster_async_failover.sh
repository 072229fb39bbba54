#!/bin/sh
# it_ha_cluster_async_failover.sh: async DiLoCo (lookahead 0.5, min_replicas 1) on a Redis Cluster of 3 masters
# with a replica each (node timeout 2 s), everyone given the URL of all six nodes. Mid-run the master holding
# the run's control keys is killed -9: its replica takes over, the processes follow, and the killed node
# comes back as a replica (the new master's WAITs need one). No worker or server is restarted. Every worker
# finishes, and the shards are bit-identical to tests/tools/ref_async's replay of the order Redis recorded,
# told which of the workers' tries failed without a trace in Redis (--failed: a dl_submit that never ran
# while the slot had no master; the next submission covers that window) and which got their places but not
# their result (--late): the workers' sync records and join events say which, up to a few readings, each
# replayed (below). Not equal to the replay without the lookahead.
# Opt-in (DILOCO_OPT_IN=1): the corners a kill reaches keep showing rare readings of the sync records. Loops
# of 45 runs (1 Dec): the first failed once, a late try whose completion failed too (fixed: ref_async
# completes it at the next boundary; it_window_once late_retry); the second once, a worker that registered
# again and whose telemetry repeated its previous sync record (fixed: round.c on_failure records the
# registration; it_reregister_failed_get), now told apart by the join events. Since: 13 of 13, then 40 of 40
# (2 Dec, alone on a 2-core machine; one with a late try, none with a registration). Each corner was a
# test's misreading or a record's, never shards that lost a Δ, but a default test that fails one run in 40
# would make CI red for nothing, and the registration corner has not been seen again since its fix: it
# stays out of `make test` until loops under tests/run.sh's load (two tests at once) have met it too.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
[ "${DILOCO_OPT_IN:-0}" = 1 ] || { echo "SKIP: opt-in (DILOCO_OPT_IN=1): rare readings of the sync records still appear, see the test's header"; exit 77; }
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

# The tries that left no sync record: try k of a worker ends at step k*H. A try that got its places but not
# its result (late: ref_async --late) is completed at a later boundary, whose sync record says stale (the
# versions taken, nothing sent: round_prepare_delta); a try that failed without a trace in Redis (--failed)
# leaves nothing, and neither does a completion that failed (also --failed). So a run of boundaries
# without a sync record that ends in a stale one holds one late try, anywhere in it, the others failed; a
# run that ends in a plain sync holds failed tries only. A stale record can also be a new registration
# (a place of ours no Δ will fill, or too many failures: round.c, on_failure; a join event in Redis at
# that step): the run before it holds failed tries only (ref_async finds the places it never knew of by
# their no-op commits), and the tries after it count from there. Each reading the records allow (a few) is
# replayed; the run must equal one of them. Each late try is a submission Redis recorded with no sync of
# its own, so a worker that did not register again must have recorded its plain syncs plus its late tries
# as submissions: checked first.
join_steps $RUN > "$TMP/joins.txt"
for w in w1 w2 w3; do # (a reading that finds no registrations would take every re-registration for a completion)
  grep -q "^$w 0\$" "$TMP/joins.txt" || fail "no first registration of $w among the join events: $(cat "$TMP/joins.txt")"
done
python3 - "$TMP" $H > "$TMP/readings.txt" <<'PY' || fail "reading the workers' sync records"
import itertools, json, sys
tmp, h = sys.argv[1], int(sys.argv[2])
joins = {}  # worker -> the steps of its registrations after its first
for line in open("%s/joins.txt" % tmp):
    w, steps = line.split()
    if int(steps) > 0:
        joins.setdefault(w, set()).add(int(steps))
choices, plain = [], []  # per run of missing boundaries: its possible (failed, late) lists
for w in ("w1", "w2", "w3"):
    syncs = {}
    for l in open("%s/%s.jsonl" % (tmp, w)):
        if '"event":"sync"' in l:
            e = json.loads(l)
            syncs[e["step"]] = e["stale"]
    end, origin, miss = max(syncs), 0, []
    for s in range(h, end + 1, h):  # (the registrations here are at boundaries: a failed sync's)
        if s not in syncs:
            miss.append("%s:%d" % (w, (s - origin) // h))
            continue
        if miss and syncs[s] is True and s not in joins.get(w, ()):  # a completion: one of them was late
            choices.append([(miss[:i] + miss[i + 1:], [miss[i]]) for i in range(len(miss))])
        elif miss:
            choices.append([(miss, [])])
        miss = []
        if s in joins.get(w, ()):
            origin = s
    if miss:
        choices.append([(miss, [])])
    if w not in joins:
        plain.append("%s=%d" % (w, sum(1 for s in syncs.values() if s is False)))
print(" ".join(plain) or "-")
for pick in itertools.islice(itertools.product(*choices), 64):
    failed = sum((f for f, _ in pick), [])
    late = sum((l for _, l in pick), [])
    print(",".join(failed) or "-", ",".join(late) or "-")
PY
for wp in $(head -n 1 "$TMP/readings.txt" | sed 's/^-$//'); do
  w=${wp%=*}; n=$(submissions $RUN "$w")
  nl=$(sed -n '2p' "$TMP/readings.txt" | awk '{print $2}' | tr ',' '\n' | grep -c "^$w:")
  [ "$n" = $((${wp#*=} + nl)) ] || fail "$w: $n submissions recorded, but ${wp#*=} plain syncs and $nl late tries ($(sed -n '2p' "$TMP/readings.txt"))"
done
ref() { build/tests/tools/ref_async --redis "$URL" --run $RUN --sync-every $H ${failed:+--failed "$failed"} ${late:+--late "$late"} "$@"; }
shard_digests $RUN > "$TMP/got.txt"
match=""; tried=0
while read -r f l; do
  failed=${f#-}; late=${l#-}; tried=$((tried + 1))
  ref > "$TMP/ref.txt" 2> "$TMP/ref.log" || fail "reference (failed ${failed:-none}, late ${late:-none}): $(cat "$TMP/ref.log")"
  cmp -s "$TMP/ref.txt" "$TMP/got.txt" && match=1 && break
done <<EOF2
$(sed -n '2,$p' "$TMP/readings.txt")
EOF2
[ -n "$match" ] ||
  fail "digests differ from the replayed order under each of the $tried readings of the sync records ($(sed -n '2,$p' "$TMP/readings.txt" | tr '\n' ';'); syncs $(syncs w1) $(syncs w2) $(syncs w3); $(cat "$TMP/ref.log")): $(diff "$TMP/ref.txt" "$TMP/got.txt")"
ref --async-lookahead 0 > "$TMP/off.txt" 2> /dev/null || fail "reference without the lookahead"
cmp -s "$TMP/off.txt" "$TMP/got.txt" && fail "the run equals the replay without the lookahead"
say "bit-identical to the replay of $(sed 's/.*replayed //' "$TMP/ref.log"), failed tries ${failed:-none}, late ${late:-none} (reading $tried of $(($(wc -l < "$TMP/readings.txt") - 1))); not to the one without the lookahead"
