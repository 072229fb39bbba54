#!/bin/sh
# it_snapshot_lost_reply.sh: a dl_snapshot that ran but whose reply was lost (Redis restarted, or the
# connection broke, while it was in flight) leaves no blob behind. The shard-server talks to Redis
# through a proxy (tests/tools/drop_proxy.py) that relays its first dl_snapshot and drops the connection
# when the reply comes: the snapshot is recorded, the server never learns which blobs it made obsolete.
# The next dl_snapshot of that shard names them again (with its own), so once the run is over every
# snapshot and log blob in Redis is one the shards hash names, and the run is bit-identical to a
# fault-free one (tests/tools/ref_quadratic).
. "$(dirname "$0")/lib.sh"
NUMEL=20000; SHARDS=2; SEED=7; H=5; ROUNDS=8
start_redis
RUN=lostsnap
init_run $RUN --trainer quadratic --numel $NUMEL --shards $SHARDS --workers 1 --seed $SEED --snapshot-every 2
python3 tests/tools/drop_proxy.py --redis-port "$PORT" --match dl_snapshot --drops 1 --lose reply \
  --port-file "$TMP/proxy.port" --log "$TMP/proxy.log" > /dev/null 2>&1 &
PIDS="$PIDS $!"
wait_until 10 '[ -s "$TMP/proxy.port" ]' "the proxy"
REDIS_URL=$URL; URL="redis://127.0.0.1:$(cat "$TMP/proxy.port")"
start_server s1
URL=$REDIS_URL
start_worker w1 --sync-every $H --steps $((ROUNDS * H))
wait_until 30 '! alive $WRK_w1' "w1 to finish $ROUNDS rounds"
wait "$WRK_w1" || fail "worker w1 exited with status $?"
[ "$(grep -c "lost the reply" "$TMP/proxy.log")" = 1 ] || fail "the proxy did not lose a dl_snapshot reply: $(cat "$TMP/proxy.log")"
# named BLOB-KEYS...: the refs v.e the shards hash names now, and the blobs in Redis
named() {
  k=0
  while [ "$k" -lt $SHARDS ]; do
    echo "dl:{$RUN:$k}:snap:$($RCLI HGET "dl:{$RUN}:shards" $k:snap | tr . :)"
    for e in $($RCLI HGET "dl:{$RUN}:shards" $k:log | tr , ' '); do echo "dl:{$RUN:$k}:log:$(echo $e | tr . :)"; done
    k=$((k + 1))
  done | sort
}
blobs() { $RCLI KEYS "dl:{$RUN:*}:*" | sort; }
# the server deletes after the reply of the last snapshot: give it a moment
wait_until 10 '[ "$(named)" = "$(blobs)" ]' "only the blobs the shards hash names (extra: $(blobs | grep -vxF "$(named)" | tr '\n' ' '))"
[ "$($RCLI HGET "dl:{$RUN}:shards" 0:version)" = $ROUNDS ] || fail "shard 0 is not at version $ROUNDS"
build/tests/tools/ref_quadratic --numel $NUMEL --shards $SHARDS --seed $SEED --workers w1 --rounds $ROUNDS \
  --sync-every $H --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" > "$TMP/ref.txt" || fail "reference"
shard_digests $RUN > "$TMP/got.txt"
grep '^shard' "$TMP/ref.txt" | diff - "$TMP/got.txt" > "$TMP/diff.txt" || fail "digests differ from the reference: $(cat "$TMP/diff.txt")"
say "a dl_snapshot reply lost: $(blobs | wc -l) blobs left, all named by the shards hash; bit-identical to the reference"
