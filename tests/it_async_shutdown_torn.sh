#!/bin/sh
# it_async_shutdown_torn.sh: an async run shut down while a submission was being delivered replays bit for bit.
# A submission's places cover its fragment's shards at once (dl_submit), but its Δ reaches each owner on its
# own (a process group: each rank its part). When a delivery fails for good, the worker leaves and registers
# again, and the owner commits its place as a no-op; after a shutdown it registers no more, so a place whose
# Δ never came stays pending: that shard keeps its version, one below the shards that applied it.
# it_chaos_async_storm met it once (2 December: the harness's shutdown came while a group's rank 1 was
# delivering its part) and its replay, which applied every place recorded, differed on the pending shards.
# tests/tools/ref_async now reads each shard's committed version and leaves a shut-down run's pending places
# unapplied there (read_committed).
# Here: a process group of 2 ranks (tests/tools/group_worker: rank 0 moves shard 0, rank 1 shard 1, each
# pushing and getting its own: worker/diloco/group.c, async_net), s0 owning shard 0 and s1 shard 1 (leases of
# 6 s, so that neither moves while the test runs). After the group's 2nd submission s1 is SIGSTOPped: s0
# commits rank 0's part of the next one, rank 1's push waits on s1. The run is shut down, s1 killed (-9) with
# that Δ unread and s0 stopped, so rank 1's tries (2 s each) find no owner; the group stops without an
# error logged (it used to log "the group could not recover" when dl_register refused it SHUTDOWN). Shard 0
# is then one version ahead of shard 1; the digests equal the replay's and differ from the replay that
# applies the pending place everywhere (--apply-uncommitted). A replay of a run not shut down with a place
# pending is refused. The shut-down run exports as its shards stay (shard_versions) and resumes from there;
# running, it would wait for the fragment's shards to line up.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
H=10
RUN=torn
start_redis
init_run $RUN --async --trainer quadratic --numel 8000 --shards 2 --workers 1
owner() { $RCLI HGET "dl:{$RUN}:shards" "$1:owner"; }
version() { $RCLI HGET "dl:{$RUN}:shards" "$1:version"; }
start_server s0 --lease-ttl-ms 6000
wait_until 10 '[ "$(owner 0)" = s0 ] && [ "$(owner 1)" = s0 ]' "s0 to lease both shards"
start_server s1 --lease-ttl-ms 6000
wait_until 30 '[ "$(owner 1)" = s1 ]' "s1 to take shard 1 from s0 (a fair share each)"
[ "$(owner 0)" = s0 ] || fail "shard 0 left s0: owned by '$(owner 0)'"
build/tests/tools/group_worker --redis "$URL" --run $RUN --worker-id g1 --ranks 2 --steps 0 --sync-every $H \
  --heartbeat-ms 200 --step-delay-ms 5 --sync-timeout-ms 2000 > "$TMP/g1.out" 2> "$TMP/worker-g1.log" &
WRK_g1=$!; PIDS="$PIDS $!"
wait_until 20 '[ "$(version 1)" -ge 2 ]' "g1's 2nd submission on shard 1"
kill -STOP "$SRV_s1"
sleep 0.2 # (a commit s1 had begun is in Redis by now)
v1=$(version 1)
wait_until 20 '[ "$(version 0)" -gt "$v1" ]' "s0 to commit rank 0's part of g1's next submission while s1 is stopped"
bin/coordinator control --redis "$URL" --run $RUN shutdown > "$TMP/shutdown.log" 2>&1 ||
  fail "coordinator control shutdown: $(cat "$TMP/shutdown.log")"
kill -9 "$SRV_s1"
kill "$SRV_s0"; wait "$SRV_s0"
wait_workers g1
v0=$(version 0); v1b=$(version 1)
[ "$v1b" = "$v1" ] && [ "$v0" = $((v1 + 1)) ] ||
  fail "the shutdown did not tear a submission: shard 0 at version $v0, shard 1 at $v1b (was $v1 when s1 stopped)"
grep -q ERROR "$TMP/worker-g1.log" && fail "g1 logged an error at the shutdown: $(grep ERROR "$TMP/worker-g1.log")"
say "torn: shut down with shard 0 at version $v0 and shard 1 at $v1 (g1's last place pending there)"
ref_async_check $RUN $H "(shut down with g1's last submission applied on shard 0 only)" --apply-uncommitted
grep -q ", 1 places the shutdown left uncommitted on some shards" "$TMP/ref-$RUN.log" ||
  fail "the replay did not leave one place uncommitted: $(cat "$TMP/ref-$RUN.log")"
# the run as it stays: `coordinator checkpoint save` (what the SHUTDOWN refusal tells a worker to do) takes
# each shard at its version, and a run resumed from it carries the Delayed Nesterov schedule on per shard
bin/coordinator checkpoint save --redis "$URL" --run $RUN --out "$TMP/torn.safetensors" --timeout 5 > "$TMP/save.log" 2>&1 ||
  fail "checkpoint save of the shut-down run: $(cat "$TMP/save.log")"
bin/coordinator checkpoint show "$TMP/torn.safetensors" > "$TMP/show.txt" 2>&1 &&
  grep -qx "shard_versions  $v0,$v1" "$TMP/show.txt" || fail "checkpoint show: $(cat "$TMP/show.txt")"
init_run torn2 --async --from-checkpoint "$TMP/torn.safetensors" --workers 1
[ "$($RCLI HGET 'dl:{torn2}:config' dn_t0_shards)" = "$v0,$v1" ] ||
  fail "the resumed run's dn_t0_shards: '$($RCLI HGET 'dl:{torn2}:config' dn_t0_shards)' (want $v0,$v1)"
say "torn: saved at shard versions $v0,$v1 and resumed from there ($(tail -n 1 "$TMP/init-torn2.log"))"
# a run not shut down with a place pending is no run at rest: the replay refuses it, and the export waits for
# that fragment's shards to line up
$RCLI HSET "dl:{$RUN}:tunables" status running > /dev/null
bin/coordinator checkpoint save --redis "$URL" --run $RUN --out "$TMP/no.safetensors" --timeout 1 > "$TMP/save2.log" 2>&1 &&
  fail "checkpoint save took a running run whose fragment's shards are at versions $v0 and $v1"
grep -q "shards 0 and 1 of fragment 0 are at versions $v0 and $v1" "$TMP/save2.log" ||
  fail "checkpoint save's refusal: $(cat "$TMP/save2.log")"
build/tests/tools/ref_async --redis "$URL" --run $RUN --sync-every $H > /dev/null 2> "$TMP/refused.log" &&
  fail "the replay took a running run with a place pending"
grep -q "shard 1 committed version $v1 of $v0 places, and run '$RUN' is not shut down" "$TMP/refused.log" ||
  fail "the replay's refusal: $(cat "$TMP/refused.log")"
