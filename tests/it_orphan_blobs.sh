#!/bin/sh
# it_orphan_blobs.sh: `coordinator serve` deletes the blobs no shard names, so shard-servers killed over weeks
# do not fill Redis. A shard-server writes a blob (log entry, snapshot) before dl_commit / dl_snapshot records
# it; one killed in between (or fenced out by a new lease) left the blob for ever, a whole shard's parameters
# (13 of them after 25 kill -9's of a 2-shard run's server). Serve now deletes, at start and every 10 minutes,
# each blob whose epoch is below its shard's and that k:snap, k:log and k:obsolete do not name
# (coordinator/orphans.c); never one of epoch 0 (init's, repair's) or of the current epoch.
# The shard-server is killed 8 times while 2 workers train; then one orphan is seeded besides whatever the kills
# left, and two blobs that must stay (epoch 0, and an epoch above the shard's); serve starts. Then: the seeded
# orphan and every other blob no record names and no lease can name are gone, the two others stay, and the run
# trains on, through a new shard-server that loads every shard from what is left.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
RUN=orph
start_redis
init_run $RUN --trainer quadratic --numel 200000 --shards 2 --workers 2 --heartbeat-timeout 20
for w in w1 w2; do start_worker $w --sync-every 2 --steps 0 --step-delay-ms 5 --heartbeat-interval 1; done
version() { $RCLI HGET "dl:{$RUN}:shards" 0:version; }
i=0
while [ $i -lt 8 ]; do
  start_server k$i --lease-ttl-ms 600
  v=$(version)
  wait_until 20 '[ "$(version)" -gt "$v" ] 2>/dev/null' "a commit by shard-server k$i"
  sleep 0.$((i % 5))
  eval "kill -9 \$SRV_k$i"
  i=$((i + 1))
done
start_server last --lease-ttl-ms 600
v=$(version)
wait_until 20 '[ "$(version)" -gt "$v" ] 2>/dev/null' "a commit by the last shard-server"
# orphans RUN: the blobs of epoch 1 .. below their shard's that no field names ("key" lines)
orphans() {
  $RCLI --scan --pattern "dl:{$RUN:*" > "$TMP/blobs"
  $RCLI HGETALL "dl:{$RUN}:shards" > "$TMP/shards"
  python3 - "$TMP/blobs" "$TMP/shards" <<'PY'
import re, sys
f = open(sys.argv[2]).read().split("\n")
h = dict(zip(f[0::2], f[1::2]))
for key in open(sys.argv[1]).read().split():
    m = re.match(r"dl:\{[^:]+:(\d+)\}:(snap|log):(\d+):(\d+)$", key)
    k, v, e = m.group(1), m.group(3), int(m.group(4))
    named = any(v + "." + str(e) in (h.get(k + ":" + x) or "").split(",") for x in ("snap", "log", "obsolete"))
    if 1 <= e < int(h[k + ":epoch"]) and not named:
        print(key)
PY
}
say "$(orphans | wc -l) blob(s) left by the kills"
$RCLI SET "dl:{$RUN:0}:log:999999:1" seeded-orphan > /dev/null
$RCLI SET "dl:{$RUN:0}:log:999999:999999" epoch-above > /dev/null
$RCLI SET "dl:{$RUN:1}:snap:999999:0" epoch-0 > /dev/null
HP=$(free_port)
bin/coordinator serve --redis "$URL" --run $RUN --print-every 0 > "$TMP/serve.log" 2>&1 &
PIDS="$PIDS $!"
wait_until 20 '[ "$($RCLI EXISTS "dl:{$RUN:0}:log:999999:1")" = 0 ]' "serve to delete the seeded orphan"
left=$(orphans)
[ -z "$left" ] || fail "blobs no record names were left: $left"
[ "$($RCLI EXISTS "dl:{$RUN:0}:log:999999:999999" "dl:{$RUN:1}:snap:999999:0")" = 2 ] ||
  fail "serve deleted a blob of epoch 0 or of an epoch not below its shard's"
grep -q "deleted [0-9]* blob(s) that no shard names" "$TMP/serve.log" || fail "serve did not say what it deleted"
say "$(grep -o 'deleted [0-9]* blob(s)' "$TMP/serve.log")"
# what is named is whole: a new shard-server loads every shard from it (digests checked) and the run goes on
kill -9 "$SRV_last"
start_server fresh --lease-ttl-ms 600
v=$(version)
wait_until 30 '[ "$(version)" -ge $((v + 3)) ] 2>/dev/null' "three commits after the collection, by a new shard-server"
grep -qi 'corrupt' "$TMP/server-fresh.log" && fail "the new shard-server found corrupt state: $(grep -i corrupt "$TMP/server-fresh.log" | head -n 2)"
say "the run trained on"
