#!/bin/sh
# it_sync_shutdown_torn.sh: a sync run shut down between the commits of one round's shards exports the state
# it had before that round, not a mix of two versions.
# A sync round's shards move together, but each owner commits its own. When an owner dies between the close
# and its commit, another owner takes the shard once the lease expires and the workers send their Δ again:
# the round heals. If the run is shut down first, nobody commits it, and the fragment stays torn: one shard at
# version v + 1, the other at v. `coordinator checkpoint save` used to take such a run's shards as they
# stood, and a run resumed from the file started from parameters the run never had (noticed 3 December).
# It now takes each fragment of a shut-down sync run at its lowest version: a shard ahead is rebuilt from its
# snapshot and its log up to that version, which must give the digest its commit recorded then
# (common/redis/run_state.c, RUN_STATE_FRAGMENTS_LOWEST). Where the durable state no longer reaches back, the
# shard is taken as it stands, with a warning.
# Here: s0 owns both shards of a sync run while w1 trains two rounds; s1 (--fault-crash-before-commit 1,
# leases of 6 s) then joins, takes shard 1 and dies after writing its next log entry, before dl_commit. s0
# commits shard 0. The run is shut down and s0 stopped within the 6 s, so shard 1 stays one version behind.
# Checks: the tear; the export is at the lower version on both shards, shard 0's parameters giving the digest
# its commit of that version recorded, and says so; a run initialised from the file starts from those
# digests; with that digest's record removed, the export takes shard 0 as it stands and warns.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
RUN=storn
start_redis
init_run $RUN --trainer quadratic --numel 8000 --shards 2 --workers 1 --snapshot-every 1000
field() { $RCLI HGET "dl:{$RUN}:shards" "$1:$2"; }
start_server s0 --lease-ttl-ms 6000
wait_until 10 '[ "$(field 0 owner)" = s0 ] && [ "$(field 1 owner)" = s0 ]' "s0 to lease both shards"
start_worker w1 --sync-every 10 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 20 --sync-timeout 5
wait_until 30 '[ "$(field 1 version)" -ge 2 ]' "w1's second round on both shards"
start_server s1 --lease-ttl-ms 6000 --fault-crash-before-commit 1
wait_until 30 '[ "$(field 1 owner)" = s1 ]' "s1 to take shard 1 from s0 (a fair share each)"
wait_until 30 '! alive $SRV_s1' "s1 to die before its first commit" 0.05
wait_until 5 '[ "$(field 0 version)" -gt "$(field 1 version)" ]' "s0 to commit shard 0 of the round s1 did not"
bin/coordinator control --redis "$URL" --run $RUN shutdown > "$TMP/shutdown.log" 2>&1 ||
  fail "coordinator control shutdown: $(cat "$TMP/shutdown.log")"
kill "$SRV_s0"
wait "$SRV_s0"
wait_workers w1
v0=$(field 0 version)
v1=$(field 1 version)
[ "$v0" = $((v1 + 1)) ] || fail "the shutdown did not tear the round: shard 0 at version $v0, shard 1 at $v1"
grep -q "fault injection" "$TMP/server-s1.log" || fail "s1 did not die as arranged: $(tail -n 3 "$TMP/server-s1.log")"
say "torn: shut down with shard 0 at version $v0 and shard 1 at $v1"
# what the commits recorded: shard 0's digest of version $v1 (before its last commit) and shard 1's now
d0=$(field 0 digests | tr ',' '\n' | sed -n "s/^$v1://p")
d1=$(field 1 digest)
[ -n "$d0" ] || fail "shard 0 recorded no digest of version $v1: '$(field 0 digests)'"
save() { # FILE: checkpoint save of the shut-down run, its output in FILE.log
  bin/coordinator checkpoint save --redis "$URL" --run $RUN --out "$1" --timeout 5 > "$1.log" 2>&1 ||
    fail "checkpoint save of the shut-down run: $(cat "$1.log")"
  bin/coordinator checkpoint show "$1" > "$1.show" 2>&1 || fail "checkpoint show $1: $(cat "$1.show")"
}
save "$TMP/torn.safetensors"
grep -qx "version         $v1" "$TMP/torn.safetensors.show" &&
  grep -qx "shard 0 $d0" "$TMP/torn.safetensors.show" && grep -qx "shard 1 $d1" "$TMP/torn.safetensors.show" ||
  fail "the export is not the state before the torn round (version $v1, shards $d0 $d1): $(cat "$TMP/torn.safetensors.show")"
grep -q "shard_versions" "$TMP/torn.safetensors.show" &&
  fail "the export's shards are at different versions: $(cat "$TMP/torn.safetensors.show")"
grep -q "shard 0 of fragment 0: taken at version $v1, the fragment's lowest, not at its $v0" "$TMP/torn.safetensors.log" ||
  fail "the export did not say that it took shard 0 below its version: $(cat "$TMP/torn.safetensors.log")"
init_run storn2 --from-checkpoint "$TMP/torn.safetensors" --workers 1
[ "$($RCLI HGET 'dl:{storn2}:shards' 0:digest) $($RCLI HGET 'dl:{storn2}:shards' 1:digest)" = "$d0 $d1" ] ||
  fail "the resumed run starts from other parameters: $($RCLI HGETALL 'dl:{storn2}:shards' | tr '\n' ' ')"
say "torn: exported at version $v1 on both shards (shard 0 rebuilt at its digest $d0) and resumed from there"
# a shard whose durable state cannot prove the lower version is taken as it stands, and the export says so
$RCLI HSET "dl:{$RUN}:shards" 0:digests "$(field 0 digests | tr ',' '\n' | grep -v "^$v1:" | paste -sd,)" > /dev/null
save "$TMP/mixed.safetensors"
grep -qx "shard_versions  $v0,$v1" "$TMP/mixed.safetensors.show" ||
  fail "without the record of version $v1, shard 0 was not taken as it stands: $(cat "$TMP/mixed.safetensors.show")"
grep -q "shard 0 of fragment 0: taken at its version $v0, not at the fragment's lowest $v1 (no digest of version $v1 is recorded" \
  "$TMP/mixed.safetensors.log" || fail "the mixed export did not warn: $(cat "$TMP/mixed.safetensors.log")"
say "torn, without the record of version $v1: exported as the shards stand ($v0,$v1), with a warning"
