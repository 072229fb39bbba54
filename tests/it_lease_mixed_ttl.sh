#!/bin/sh
# it_lease_mixed_ttl.sh: shard-servers with different --lease-ttl-ms (lua/50_servers.lua live_servers).
# Each server is judged gone by its own ttl, which its beat records, not by the beating server's: s1
# (ttl 500 ms) beats every 0.1 s while s2 (ttl 2000 ms) is silent for 1 s, as a server with that ttl is
# between two beats (every ttl/3, 0.67 s, and later on a loaded box): s2 must stay a member (its address in
# dl:{R}:servers, which workers read, no server_gone event) and keep its shards. Judged by s1's ttl, it was
# declared gone at every such gap, its address deleted until its next beat (two real servers with ttls 1500
# and 6000 flapped so forever). Once s2 is silent past its own ttl, s1 takes its shards as before.
# Then an outage with the two ttls (forgive_outage: below). Driven with redis-cli FCALLs, the way
# bin/shard-server calls them.
. "$(dirname "$0")/lib.sh"
start_redis
RUN=mt
init_run $RUN --trainer quadratic --numel 1000 --shards 4 --workers 1
beat() { $RCLI FCALL dl_server_beat 1 "dl:{$RUN}:config" "$1" "127.0.0.1:$2" "$3" 1 "$4" | paste -sd' '; }
beat s1 1 500 "" > /dev/null; beat s2 2 2000 "" > /dev/null; beat s1 1 500 "0,1,2,3" > /dev/null
s2=$(beat s2 2 2000 "")
s1=$(beat s1 1 500 "0,1")
[ "$(echo "$s1" | awk '{print $1, $3}')" = "0 1" ] && [ "$(echo "$s2" | awk '{print $1, $3}')" = "2 3" ] \
  || fail "the two servers did not split the shards: s1 '$s1', s2 '$s2'"
t0=$(date +%s%N)
while [ $(( ($(date +%s%N) - t0) / 1000000 )) -lt 1000 ]; do
  held=$(beat s1 1 500 "0,1")
  [ "$held" = "$s1" ] || fail "s1 holds '$held' while s2 (ttl 2000 ms) was silent for less than its ttl"
  sleep 0.1
done
$RCLI XRANGE "dl:{$RUN}:events" - + | grep -qx server_gone && fail "s2 was declared gone within its own ttl: $($RCLI XRANGE "dl:{$RUN}:events" - + | tr '\n' ' ')"
[ "$($RCLI HEXISTS "dl:{$RUN}:servers" s2)" = 1 ] || fail "s2's address was deleted within its own ttl"
[ "$(beat s2 2 2000 "2,3")" = "$s2" ] || fail "s2 lost its shards or epochs within its own ttl"
say "s2 (ttl 2000 ms) silent for 1 s while s1 (ttl 500 ms) beat: still a member, its shards and epochs kept"
wait_until 5 '[ "$(beat s1 1 500 "0,1" | awk "{print \$1, \$3, \$5, \$7}")" = "0 1 2 3" ]' "s1 to take the silent s2's shards past its own ttl"
$RCLI XRANGE "dl:{$RUN}:events" - + | grep -qx server_gone || fail "no server_gone event for s2"
[ "$($RCLI HEXISTS "dl:{$RUN}:servers" s2)" = 0 ] || fail "s2's address stayed after it was gone"
say "s2 silent past its own ttl: gone, and s1 took its shards"

# An outage (nobody beat for longer than a lease: lua/50_servers.lua forgive_outage) with the two ttls. It is
# judged by the shortest ttl among the servers alive at the last beat, and each lease is renewed by its
# owner's ttl. Judged and renewed by the caller's ttl instead: s1 (500) back first renewed s2's leases for
# 500 ms, so s2 (2000, beating every 0.67 s) lost them before its next beat and took them anew under new
# epochs; s2 back first saw no outage after 1 s (< 2000) while s1's leases had expired.
expiry_left_ms() { # shard -> ms its lease has left
  $RCLI EVAL "local t = redis.call('TIME'); return tonumber(redis.call('HGET', KEYS[1], ARGV[1] .. ':expiry')) - (t[1] * 1000 + math.floor(t[2] / 1000))" 1 "dl:{$RUN}:shards" "$1"
}
outages() { $RCLI XRANGE "dl:{$RUN}:events" - + | grep -cx outage; }
split_two() { # -> sets s1, s2 to the leases each holds once they split 4 shards
  beat s1 1 500 "" > /dev/null; beat s2 2 2000 "" > /dev/null; beat s1 1 500 "0,1,2,3" > /dev/null
  s2=$(beat s2 2 2000 ""); s1=$(beat s1 1 500 "0,1")
  [ "$(echo "$s1" | awk '{print $1, $3}')" = "0 1" ] && [ "$(echo "$s2" | awk '{print $1, $3}')" = "2 3" ] \
    || fail "run $RUN: the two servers did not split the shards: s1 '$s1', s2 '$s2'"
}
RUN=mt1
init_run $RUN --trainer quadratic --numel 1000 --shards 4 --workers 1
split_two
sleep 1
[ "$(beat s1 1 500 "0,1")" = "$s1" ] || fail "s1 back first after the outage did not keep its shards and epochs"
[ "$(outages)" = 1 ] || fail "s1 back first after 1 s of silence: $(outages) outage events, not 1"
left=$(expiry_left_ms 2)
[ "$left" -gt 1500 ] || fail "s1 back first renewed s2's lease for $left ms, not for s2's own ttl (2000 ms)"
[ "$(beat s2 2 2000 "2,3")" = "$s2" ] || fail "s2 lost its shards or epochs after the outage"
say "outage, s1 (ttl 500) back first: s2's leases renewed for its own ttl ($left ms left), both kept their epochs"
RUN=mt2
init_run $RUN --trainer quadratic --numel 1000 --shards 4 --workers 1
split_two
sleep 1
[ "$(beat s2 2 2000 "2,3")" = "$s2" ] || fail "s2 back first after the outage did not keep its shards and epochs"
[ "$(outages)" = 1 ] || fail "s2 (ttl 2000) back first after 1 s of silence saw no outage, though s1's leases (ttl 500) had run out"
[ "$(beat s1 1 500 "0,1")" = "$s1" ] || fail "s1 lost its shards or epochs after the outage s2 came back from first"
say "outage, s2 (ttl 2000) back first: an outage for s1's ttl, s1 kept its shards and epochs"
# A new server with a short ttl joining in the usual gap between a long-ttl server's beats is no outage.
RUN=mt3
init_run $RUN --trainer quadratic --numel 1000 --shards 4 --workers 1
beat s2 2 2000 "" > /dev/null; beat s2 2 2000 "0,1,2,3" > /dev/null
sleep 0.7
beat s1 1 500 "" > /dev/null
[ "$(outages)" = 0 ] || fail "s1 (ttl 500) joining 0.7 s after the beat of s2 (ttl 2000) recorded an outage"
say "s1 (ttl 500) joining between two beats of s2 (ttl 2000): no outage"
