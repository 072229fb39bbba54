#!/bin/sh
# it_lost_round_resend.sh: a worker that took its round as lost still sends its Δ of that round to an owner
# that asks for it. A worker that decides its round was lost (a round that came back STALE, a confirm that
# finds the round closed without it) fetches the current version with a get that may not push. If a
# shard's owner still counts it as a participant of that round (its server died before committing, and
# the new owner needs every participant's Δ again), the owner answers `need` with our id: before, the get
# said "the owner still asks for our pseudo-gradient of round N" and waited for the sync timeout, with the
# shard's round, and so every worker, waiting for it (it_cluster_sync_crash once stalled 120 s on that).
# Now a get sends our kept Δ to an owner asking for it when the Δ is the one we passed that round's barrier
# with (fanout.c, holds_counted_delta), whatever the get.
#
# Made exact with one worker (tests/tools/resend_probe) and one shard: s0 serves version 1 tentatively to
# the probe alone and dies before dl_commit (--fault-tentative-to); s0 comes back under a new epoch,
# loads version 0 and needs the probe's Δ of round 0; the probe then fetches the current version as a
# worker that took its round as lost does (fetch_current). Checks: the fetch gets version 1 within a few
# seconds (the sync timeout is 20 s), the new owner committed round 0 with the probe's Δ, and version 1
# has the digest the probe took tentatively (the same Δ, the same step).
. "$(dirname "$0")/lib.sh"
RUN=lost
start_redis
init_run $RUN --trainer quadratic --numel 4000 --shards 1 --workers 1 --seed 5
owner() { $RCLI HGET "dl:{$RUN}:shards" "0:owner"; }
start_server s0 --lease-ttl-ms 1000 --fault-tentative-to probe
wait_until 10 '[ "$(owner)" = s0 ]' "s0 to hold the shard"
first=$SRV_s0
build/tests/tools/resend_probe --redis "$URL" --run $RUN --worker-id probe --go "$TMP/go" \
  --sync-timeout-ms 20000 > "$TMP/probe.out" 2> "$TMP/probe.log" &
probe=$!
PIDS="$PIDS $probe"
wait_until 15 '! alive $first' "the fault-injected server to die"
grep -q "fault injection: exiting before dl_commit (version 1 of shard 0 went to probe alone" "$TMP/server-s0.log" ||
  fail "s0 did not die as arranged: $(tail -n 3 "$TMP/server-s0.log")"
mv "$TMP/server-s0.log" "$TMP/server-s0-faulty.log"
wait_until 10 'grep -q "^synced" "$TMP/probe.out"' "the probe's sync"
synced=$(cat "$TMP/probe.out")
case "$synced" in "synced version 1 tentative 1 digest "*) ;; *) fail "the probe's sync: $synced" ;; esac
tentative=${synced##* }
start_server s0 --lease-ttl-ms 1000 # the same id: it takes the lease back at once, under a new epoch
touch "$TMP/go"
wait "$probe"; rc=$?
out=$(tail -n 1 "$TMP/probe.out")
say "probe: $out"
[ "$rc" -eq 0 ] || fail "the fetch after the lost round failed (rc $rc): $out; probe log: $(grep -i "asks\|need" "$TMP/probe.log" | tail -n 3)"
case "$out" in "fetch ok version 1 digest $tentative in "*) ;; *) fail "the fetch did not get version 1 with the tentative digest $tentative: $out" ;; esac
ms=$(echo "$out" | sed -n 's/.* in \([0-9]*\) ms$/\1/p')
[ "$ms" -lt 8000 ] || fail "the fetch took $ms ms: the owner waited for our Δ (sync timeout 20000 ms)"
[ "$(shard_versions $RUN)" = "1" ] || fail "the shard is at version $(shard_versions $RUN), expected 1 (durable)"
say "the probe's fetch sent its Δ of round 0 to the new owner when asked: version 1 committed in $ms ms, digest $tentative as taken tentatively"
