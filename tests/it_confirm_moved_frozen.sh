#!/bin/sh
# it_confirm_moved_frozen.sh: a worker's confirm whose shards moved from a server whose address now answers
# nothing (a frozen process, a hung or cut-off machine) does not wait on that address. As it_confirm_moved:
# two workers, 8 shards, sa holds 0-3, sb holds 4-7, serves their version 1 tentatively to w1 alone and dies
# before dl_commit (--fault-tentative-to w1); here sb is reached through bin/delay-proxy, which is stopped
# (SIGSTOP) when sb dies: its address completes connects in the kernel and answers no handshake. sb restarts
# under its id at another port and takes 4-7 back under a new epoch. Before, w1's confirm before round 1
# resent its kept pseudo-gradient of 4-7 to the owner its map still named, sb's old address, a 5 s handshake
# timeout each (20 s), and w2's get, sent there just before the move, waited out one more (worker/diloco:
# the confirm's read of Redis now re-reads the owner map when a lease's epoch is not the map's, owners.c
# owners_follow; a connect and handshake look at the lease after 1 s and end once it moved, conn.c
# watch_lease). Checks: sb died as arranged; w1's confirm resent to and fetched the shards that moved (4, or
# fewer when sb died before serving them all) and
# took less than one handshake timeout (5 s; a discrete wait, not a speed target: the fixed confirm takes
# about 1 s here, bench/confirm_moved --old frozen); no duplicate push; shard digests, commits and the
# workers' final digests equal the fault-free reference (tests/tools/ref_quadratic).
# test: alone (it bounds w1's confirm below one 5 s handshake timeout)
. "$(dirname "$0")/lib.sh"
RUN=cfrozen; NUMEL=80000; SEED=31; ROUNDS=3; H=10
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED
owners() { for k in 0 1 2 3 4 5 6 7; do $RCLI HGET "dl:{$RUN}:shards" $k:owner; done | tr '\n' ' '; }
start_server sa --lease-ttl-ms 1500
wait_until 10 '[ "$(owners)" = "sa sa sa sa sa sa sa sa " ]' "sa to hold every shard"
SBPORT=$(free_port); PPORT=$(free_port)
bin/delay-proxy --map 127.0.0.1:$PPORT=127.0.0.1:$SBPORT > "$TMP/proxy.log" 2>&1 &
PROXY=$!
PIDS="$PIDS $PROXY"
wait_until 10 "grep -q listening '$TMP/proxy.log'" "delay-proxy listening"
start_server sb --lease-ttl-ms 1500 --listen 127.0.0.1:$SBPORT --advertise 127.0.0.1:$PPORT --fault-tentative-to w1
wait_until 10 '[ "$(owners)" = "sa sa sa sa sb sb sb sb " ]' "sa to give shards 4-7 to sb"
for w in w1 w2; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --step-delay-ms 20; done
faulty=$SRV_sb
wait_until 15 '! alive $faulty' "sb to die after serving w1 tentatively" 0.02
kill -STOP $PROXY
grep -q "fault injection: exiting before dl_commit (version 1 of shard [4-7] went to w1 alone" "$TMP/server-sb.log" ||
  fail "sb did not die as arranged: $(tail -n 3 "$TMP/server-sb.log")"
mv "$TMP/server-sb.log" "$TMP/server-sb-faulty.log"
start_server sb --lease-ttl-ms 1500
wait_workers w1 w2
kill -CONT $PROXY
dup=$($RCLI HGET "dl:{$RUN}:state" duplicates)
[ "${dup:-0}" -eq 0 ] || fail "$dup pushes went again to shards already committed at their version"
rec=$(grep '"event":"sync"' "$TMP/w1.jsonl" | grep '"round":1,')
c=$(echo "$rec" | sed 's/.*"confirm_shards":\([0-9]*\).*/\1/')
secs=$(echo "$rec" | sed 's/.*"confirm_seconds":\([0-9.]*\).*/\1/')
# the shards of 4-7 whose version 1 sb served w1 tentatively before it died: all 4 as a rule, fewer when the
# other commits had not served theirs by the exit (it_confirm_moved)
held=$(sed -n 's/.*fault injection: version 1 of shard \([4-7]\) served tentatively to w1$/\1/p' \
  "$TMP/server-sb-faulty.log" | sort -u | wc -l)
[ "$held" -ge 1 ] || fail "sb served w1 no version tentatively: $(grep -h 'fault injection' "$TMP/server-sb-faulty.log")"
[ "$c" = "$held" ] ||
  fail "w1's confirm before round 1 resent to and fetched ${c:-no} shards, expected the $held that moved and it held tentatively"
awk -v s="$secs" 'BEGIN {exit !(s < 5)}' ||
  fail "w1's confirm took $secs s: it waited out a handshake with sb's old, frozen address: $rec"
[ "$(shard_versions $RUN)" = "$ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS $ROUNDS" ] || fail "versions: $(shard_versions $RUN)"
REF_WORKERS=w1,w2
assert_matches_reference
assert_workers_end_at "$REF_DIGEST"
say "w1's confirm took $secs s for the $held shard(s) that moved from a frozen address; bit-identical to the reference"
