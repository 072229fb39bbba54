#!/bin/sh
# it_reregister_failed_get.sh: a worker whose get failed can register again. A lone worker, 2 shards; its
# only shard-server dies in the first round's commit (--fault-crash-before-commit 1: the pseudo-gradients
# received, nothing durable), so the worker's get of that round fails after its sync timeout (2 s), and with
# --max-sync-retries 0 it registers again at once. A shard whose get failed holds no version (-1,
# worker/diloco/sync.c get_round), and the registration used to send it among the versions it holds:
# dl_register refused it ("BADARG held versions must be shard:version pairs"), the sync "failed for good" and
# the worker gave up. Checks: the worker registered again, nothing failed for good, the sync that registered
# again (the second, at step 20: the first round's get had returned before the crash) is in its telemetry as
# such (stale: the run's versions taken, round 1; before, it repeated the first sync's record), and once a new server has taken the shards the worker's
# rounds commit again and it ends its steps (exit 0).
. "$(dirname "$0")/lib.sh"
RUN=regget
start_redis
init_run $RUN --trainer quadratic --numel 4000 --shards 2 --workers 1
start_server s1 --lease-ttl-ms 1000 --fault-crash-before-commit 1
start_worker w --sync-every 10 --steps 60 --step-delay-ms 20 --heartbeat-interval 0.5 --sync-timeout 2 \
  --max-sync-retries 0
wait_until 20 '! alive $SRV_s1' "the shard-server to die in the first round's commit"
wait_until 20 'grep -q "registering again after 1 failed syncs" "$TMP/worker-w.log"' \
  "the worker to register again after its get failed"
start_server s2 --lease-ttl-ms 1000
wait_until 60 '! alive $WRK_w' "the worker to end its 60 steps"
grep -q "for good" "$TMP/worker-w.log" && fail "the worker gave up: $(grep 'for good' "$TMP/worker-w.log")"
wait_workers w
[ "$(grep -c "registered as w (incarnation" "$TMP/worker-w.log")" -ge 2 ] ||
  fail "the worker registered only once: $(grep 'registered as' "$TMP/worker-w.log")"
second=$(python3 -c 'import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if "\"sync\"" in l]
print("step %d round %d stale %s" % (s[1]["step"], s[1]["round"], s[1]["stale"]) if len(s) > 1 else "none")' "$TMP/w.jsonl")
[ "$second" = "step 20 round 1 stale True" ] ||
  fail "the sync that registered again is not recorded as a stale sync of round 1 at step 20: $second"
v=$($RCLI HGET "dl:{$RUN}:shards" 0:version)
[ "$v" -ge 3 ] || fail "shard 0 is at version $v: the worker's rounds did not commit through s2"
say "the worker's get failed, it registered again ($(grep -c 'registered as w (' "$TMP/worker-w.log") registrations) and its rounds committed through s2 (version $v)"
