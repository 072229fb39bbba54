#!/bin/sh
# it_corrupt_repair.sh: corrupt durable state is reported and `coordinator repair` brings the run back.
#
# 2 quadratic workers, 2 shard-servers, 4 shards, snapshots every 100 versions (so each shard is its
# version-0 snapshot plus a log entry per round).
#  1. healthy run: `coordinator repair` changes nothing (dl:{R}:shards and the events identical) and says
#     so; a checkpoint is saved for later;
#  2. while the workers train (w1 waiting at the open round's barrier, w2 stopped before it), both servers
#     are killed, a few payload bytes of shard 1's latest log entry are overwritten (SETRANGE) and two new
#     servers start: exactly one 'corrupt' event with the key and the reason (also after several more
#     seconds: no retry storm), the mark in dl:{R}:shards, `status` (table and --json) and /metrics show it,
#     w2 says "shard 1's durable state is corrupt (key ...); see coordinator repair" and waits, w1 waits at
#     the barrier; `repair --dry-run` changes nothing; `repair` rolls every shard back to the newest common
#     version that verifies, installed as a new version above every round; w1 says its round was lost
#     because its barrier expired, the workers resume and both end on one digest;
#  3. with the workers stopped: shard 0's latest log entry corrupted, nobody has noticed yet: repair finds
#     it itself, and a checkpoint of the result holds exactly the parameters the workers had at the
#     rollback version (their sync log);
#  4. shard 2's snapshot corrupted: reported the same way (a server that takes the marked shard over says
#     so and does not load it); repair without a checkpoint refuses with a message that says to use one;
#     `repair --from-checkpoint` restores the checkpoint of step 1 (shard digests equal), deletes the old
#     blobs, and two workers train from it to one digest;
#  5. a mark that no longer holds (the state verifies) is cleared and its lease revoked; repair waits (--wait)
#     until a server holds the shard again;
#  6. Streaming DiLoCo: the repair moves every fragment's open round to the one new version and workers
#     train on from it to one digest;
#  7. an async run with Delayed Nesterov verifies (its log replayed with the DN buffer: before, every
#     shard was called CORRUPT); a corrupt async run is refused with a message that says what to do instead;
#  8. a valid blob in the wrong place (redis-cli COPY): another shard's log entry under shard 1's key, then
#     another version's entry of shard 3 under its key, then a forged entry of shard 0 (its payload
#     changed, its checksum fixed): the load names that key (not the last one) and says what is wrong
#     (the blob's header, or the digest its commit recorded); repair rolls back to the version before it,
#     verified against the digest its commit recorded: a checkpoint of the result holds the parameters
#     the workers synced then.
. "$(dirname "$0")/lib.sh"
RUN=cr; H=5
start_redis
init_run $RUN --trainer quadratic --numel 20000 --shards 4 --workers 2 --snapshot-every 100 --heartbeat-timeout 30
TTL="--lease-ttl-ms 1000"
start_server s1 $TTL
start_server s2 $TTL
SH="dl:{$RUN}:shards"
n_events() { $RCLI XRANGE "dl:{$RUN}:events" - + | awk -v t="$1" 'p == "type" && $0 == t {n++} {p = $0} END {print n + 0}'; }
repair() { bin/coordinator repair --redis "$URL" --run $RUN "$@"; }
last_ref() { r=$($RCLI HGET "$SH" "$1:$2"); r=${r##*,}; echo "dl:{$RUN:$1}:$2:${r%.*}:${r#*.}"; }
# overwrite 8 payload bytes of a blob (its header is ~100 bytes): the checksum must catch it
corrupt_blob() { [ "$($RCLI EXISTS "$1")" = 1 ] || fail "no blob $1"; $RCLI SETRANGE "$1" 400 XXXXXXXX > /dev/null; }
last_sync() { grep '"event":"sync"' "$TMP/$1.jsonl" | tail -n 1 | sed 's/.*"version":\([0-9]*\),.*"digest":"\([0-9a-f]*\)".*/\1 \2/'; }
run_workers() { # STEPS [flags]: w1 and w2 train, both must exit 0 and end on one version and digest
  steps=$1; shift
  for w in w1 w2; do start_worker $w --sync-every $H --steps "$steps" --heartbeat-interval 1 "$@"; done
}
join_workers() {
  wait_workers w1 w2
  [ "$(last_sync w1)" = "$(last_sync w2)" ] || fail "workers end apart: w1 $(last_sync w1), w2 $(last_sync w2)"
  say "both workers end at version/digest $(last_sync w1)"
}

say "1. a healthy run: repair changes nothing"
run_workers $((3 * H))
join_workers
# the durable state (leases move on their own: the second server takes its share)
shards_now() { $RCLI HGETALL "$SH" | paste - - | grep -E ':(version|snap|log|digest|corrupt)\s' | sort; }
shards_now > "$TMP/shards-before.txt"
repair > "$TMP/repair0.txt" 2>&1 || fail "repair of a healthy run failed: $(cat "$TMP/repair0.txt")"
grep -q "nothing to repair" "$TMP/repair0.txt" || fail "repair of a healthy run says: $(cat "$TMP/repair0.txt")"
shards_now | diff "$TMP/shards-before.txt" - > /dev/null || fail "repair of a healthy run changed dl:{R}:shards"
[ "$(n_events repair)" = 0 ] || fail "repair of a healthy run recorded a repair"
CK="$TMP/ck.safetensors"
bin/coordinator checkpoint save --redis "$URL" --run $RUN --out "$CK" > "$TMP/save.log" 2>&1 || fail "checkpoint save"

say "2. a corrupt log entry while the workers train"
for w in w1 w2; do mv "$TMP/$w.jsonl" "$TMP/$w-1.jsonl"; mv "$TMP/worker-$w.log" "$TMP/worker-$w-1.log"; done
run_workers $((14 * H)) --step-delay-ms 20
wait_until 30 "[ \"\$($RCLI HGET $SH 1:version)\" -ge 6 ]" "version 6"
# w2 stopped, w1 arrives at the open round's barrier and waits there for w2 (its Δ went to the servers
# about to die); the servers die and shard 1's latest log entry, the open round's version, is corrupted; w2
# goes on and meets the mark (its push or its get). Without the stop the two orders raced: under
# AddressSanitizer w1 had arrived first, and waited at the barrier without a word about shard 1.
kill -STOP "$WRK_w2"
wait_until 10 "at_barrier w1" "w1 at the open round's barrier"
R=$(round 0)
kill -9 "$SRV_s1" "$SRV_s2"
kill -CONT "$WRK_w2"
BAD=$(last_ref 1 log)
case "$BAD" in "dl:{$RUN:1}:log:$R:"*) ;; *) fail "shard 1's latest log entry is $BAD, not of round $R's version" ;; esac
corrupt_blob "$BAD"
say "w1 waits at round $R's barrier; corrupted $BAD"
start_server s3 $TTL
start_server s4 $TTL
wait_until 20 "[ \"\$(n_events corrupt)\" -ge 1 ]" "a corrupt event"
wait_until 20 "grep -q \"shard 1's durable state is corrupt (key $BAD: .*); see coordinator repair; waiting for it\" \
  $TMP/worker-w2.log" "w2 says shard 1 is corrupt and waits"
[ "$($RCLI HEXISTS "dl:{$RUN}:f0:r$R" a:w1)" = 1 ] && [ "$($RCLI HGET "dl:{$RUN}:f0:r$R" state)" = open ] ||
  fail "w1 is not waiting at round $R's barrier"
grep -h 'waiting for it' "$TMP"/worker-w[12].log | grep -v "shard 1's durable state is corrupt (key $BAD: " &&
  fail "a worker waits for something else"
[ "$($RCLI HGET "$SH" 1:corrupt)" = "$BAD" ] || fail "shard 1 is not marked with its key: $($RCLI HGET "$SH" 1:corrupt)"
$RCLI XRANGE "dl:{$RUN}:events" - + | grep -A 12 '^corrupt$' > "$TMP/corrupt-event.txt"
grep -qx "$BAD" "$TMP/corrupt-event.txt" && grep -q 'checksum' "$TMP/corrupt-event.txt" ||
  fail "the corrupt event lacks the key or the reason: $(cat "$TMP/corrupt-event.txt")"
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status.txt" 2>&1 || fail "status"
grep -q "^CORRUPT: shard 1's durable state (key $BAD" "$TMP/status.txt" || fail "status does not say it: $(head -n 3 "$TMP/status.txt")"
grep -q "^ *1 .*CORRUPT$" "$TMP/status.txt" || fail "the shard table does not say it"
bin/coordinator status --redis "$URL" --run $RUN --json | python3 -c "
import json, sys; d = json.load(sys.stdin); s = d['shards'][1]
assert s['corrupt'] == '$BAD' and 'checksum' in s['corrupt_reason'], s
assert all('corrupt' not in d['shards'][k] for k in (0, 2, 3)), d['shards']" || fail "status --json"
HP=$(free_port)
bin/coordinator serve --redis "$URL" --run $RUN --http "127.0.0.1:$HP" --print-every 1 > "$TMP/coord.log" 2>&1 &
PIDS="$PIDS $!"
wait_until 10 "curl -s -o $TMP/metrics.txt http://127.0.0.1:$HP/metrics" "coordinator serve"
grep -qx "diloco_shard_corrupt{run=\"$RUN\",shard=\"1\"} 1" "$TMP/metrics.txt" &&
  grep -qx "diloco_shards_corrupt{run=\"$RUN\"} 1" "$TMP/metrics.txt" || fail "/metrics does not show it"
curl -s "http://127.0.0.1:$HP/status" | python3 -c "
import json, sys; d = json.load(sys.stdin); assert d['corrupt_shards'] == 1 and d['shards'][1]['corrupt'] == '$BAD', d" ||
  fail "/status does not show it"
if [ -x /usr/bin/chromium ]; then # the dashboard as a browser renders it (no playwright needed)
  timeout 60 /usr/bin/chromium --headless --no-sandbox --disable-gpu --virtual-time-budget=3000 --dump-dom \
    "http://127.0.0.1:$HP/dashboard" > "$TMP/dom.html" 2> "$TMP/chromium.log" || fail "chromium --dump-dom"
  grep -q 'class="shard corrupt" data-shard="1"' "$TMP/dom.html" && grep -q "<b>CORRUPT: shard 1</b>'s durable state" "$TMP/dom.html" ||
    fail "the dashboard does not show shard 1 corrupt"
else
  say "no /usr/bin/chromium: dashboard not checked"
fi
sleep 4 # servers beat every 0.33 s, workers look every 2 s: nothing may be reported again
[ "$(n_events corrupt)" = 1 ] || fail "$(n_events corrupt) corrupt events for one corrupt entry"
grep -q "ERROR shard 1's durable state is corrupt (key $BAD: " "$TMP/coord.log" || fail "coordinator serve does not say it"
[ "$(cat "$TMP"/server-s[34].log | grep -c 'load of version')" = 1 ] || fail "the load was retried"
alive "$WRK_w1" && alive "$WRK_w2" || fail "a worker gave up"
repair --dry-run > "$TMP/dry.txt" 2>&1 || fail "repair --dry-run: $(cat "$TMP/dry.txt")"
grep -q "plan: roll every shard back" "$TMP/dry.txt" || fail "dry run: $(cat "$TMP/dry.txt")"
[ "$($RCLI HGET "$SH" 1:corrupt)" = "$BAD" ] || fail "the dry run changed something"
V0=$(shard_versions $RUN)
repair > "$TMP/repair1.txt" 2>&1 || fail "repair: $(cat "$TMP/repair1.txt")"
cat "$TMP/repair1.txt"
set -- $V0; max=$1; for v; do [ "$v" -gt "$max" ] && max=$v; done
# the version repair restored every shard to (from its event: the workers resume at once, so the shards
# may already be past it, each at its own pace, when we look)
V=$($RCLI XRANGE "dl:{$RUN}:events" - + | grep -A 12 '^repair$' | grep -A 1 -x version | sed -n 2p)
[ -n "$V" ] && [ "$V" -gt "$max" ] || fail "repair restored version '$V', not above the newest of $V0"
for v in $(shard_versions $RUN); do [ "$v" -ge "$V" ] || fail "versions $V0 -> $(shard_versions $RUN), restored $V"; done
[ -z "$($RCLI HGET "$SH" 1:corrupt)" ] || fail "still marked"
[ "$($RCLI EXISTS "$BAD")" = 0 ] || fail "the corrupt blob was not deleted"
$RCLI XRANGE "dl:{$RUN}:events" - + | grep -A 12 '^repair$' | grep -qx rollback || fail "no repair event"
join_workers
# the repair deleted the barrier w1 waited at: it says why its round was lost (before, an error string left
# from an earlier call: "lost (stale):  N;")
grep -q "round $R of fragment 0 lost (stale): its barrier is expired (the fragment's open round is now $V: " \
  "$TMP/worker-w1.log" || fail "w1 does not say why round $R was lost: $(grep -h 'lost' "$TMP/worker-w1.log")"
[ "$(n_events corrupt)" = 1 ] || fail "corrupt events after the repair"

say "3. a corrupt log entry nobody has read yet: repair finds it"
W=$($RCLI HGET "$SH" 0:version)
BAD=$(last_ref 0 log)
corrupt_blob "$BAD"
repair > "$TMP/repair2.txt" 2>&1 || fail "repair: $(cat "$TMP/repair2.txt")"
grep -q "shard 0: CORRUPT at version $W: .*$BAD.*verifies up to version $((W - 1))" "$TMP/repair2.txt" ||
  fail "repair did not find it: $(cat "$TMP/repair2.txt")"
bin/coordinator checkpoint save --redis "$URL" --run $RUN --out "$TMP/after.safetensors" > /dev/null 2>&1 || fail "save"
got=$(bin/coordinator checkpoint show "$TMP/after.safetensors" | awk '/^params_xxh3/ {print $2}')
want=$(grep '"event":"sync"' "$TMP/w1.jsonl" | grep "\"version\":$((W - 1))," | tail -n 1 | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/')
[ -n "$want" ] && [ "$got" = "$want" ] || fail "rolled back to $got, the workers had $want at version $((W - 1))"
say "rolled back to the parameters the workers had at version $((W - 1)) ($got)"

say "4. a corrupt snapshot: only a checkpoint can help"
kill -9 "$SRV_s3" "$SRV_s4"
BAD=$(last_ref 2 snap)
corrupt_blob "$BAD"
start_server s5 $TTL
wait_until 20 "[ \"\$($RCLI HGET $SH 2:corrupt)\" = '$BAD' ]" "shard 2 marked corrupt"
[ "$(n_events corrupt)" = 2 ] || fail "$(n_events corrupt) corrupt events"
# a server that takes the marked shard over does not load it: it says so, stays up, records nothing again
kill -9 "$SRV_s5"
start_server s6 $TTL
wait_until 20 "grep -q 'shard 2: marked corrupt in Redis (key $BAD: corrupt snapshot blob: .*); not loading it' '$TMP/server-s6.log'" \
  "s6 on the marked shard 2"
sleep 0.5
alive "$SRV_s6" || fail "s6 died on the marked shard"
[ "$(n_events corrupt)" = 2 ] || fail "the mark was recorded again"
repair > "$TMP/repair3.txt" 2>&1 && fail "repair without a checkpoint succeeded: $(cat "$TMP/repair3.txt")"
grep -q "shard 2 has no version that verifies.*--from-checkpoint FILE" "$TMP/repair3.txt" ||
  fail "repair does not say what to do: $(cat "$TMP/repair3.txt")"
# a blob no record names, as a shard-server killed between recording a snapshot and deleting the log
# entries it made obsolete leaves behind (that race made this step fail now and then): repair deletes it
$RCLI SET "dl:{$RUN:1}:log:1:77" "left by a crashed server" > /dev/null
OLD=$($RCLI --scan --pattern "dl:{$RUN:*" | sort)
repair --from-checkpoint "$CK" > "$TMP/repair4.txt" 2>&1 || fail "repair --from-checkpoint: $(cat "$TMP/repair4.txt")"
grep -q "deleted [1-9][0-9]* blob(s) left behind by crashed shard-servers" "$TMP/repair4.txt" ||
  fail "repair did not delete the blob no record names: $(cat "$TMP/repair4.txt")"
bin/coordinator checkpoint show "$CK" | grep '^shard [0-9]' > "$TMP/ck-digests.txt"
shard_digests $RUN | diff "$TMP/ck-digests.txt" - > "$TMP/diff.txt" || fail "not the checkpoint: $(cat "$TMP/diff.txt")"
for k in $OLD; do [ "$($RCLI EXISTS "$k")" = 0 ] || fail "old blob $k was not deleted"; done
[ -z "$($RCLI HGET "$SH" 2:corrupt)" ] || fail "still marked"
for w in w1 w2; do mv "$TMP/$w.jsonl" "$TMP/$w-2.jsonl"; mv "$TMP/worker-$w.log" "$TMP/worker-$w-2.log"; done
run_workers $((2 * H))
join_workers

say "5. a mark that no longer holds (the blob was restored by hand): repair clears it"
e0=$($RCLI HGET "$SH" 0:epoch)
$RCLI HSET "$SH" 0:corrupt "dl:{$RUN:0}:log:1:1" 0:corrupt_reason "restored by hand" > /dev/null
repair > "$TMP/repair5.txt" 2>&1 || fail "repair: $(cat "$TMP/repair5.txt")"
grep -q "cleared 1 corrupt mark" "$TMP/repair5.txt" || fail "repair says: $(cat "$TMP/repair5.txt")"
# --wait (default 30 s) holds for the revoked lease as after a rollback: the shard is taken again first
grep -q "every shard is leased again; workers continue$" "$TMP/repair5.txt" && [ -n "$($RCLI HGET "$SH" 0:owner)" ] ||
  fail "repair returned before shard 0 was leased again: $(cat "$TMP/repair5.txt"), owner '$($RCLI HGET "$SH" 0:owner)'"
[ -z "$($RCLI HGET "$SH" 0:corrupt)" ] && [ "$($RCLI HGET "$SH" 0:epoch)" -gt "$e0" ] || fail "mark kept or lease not revoked"
$RCLI XRANGE "dl:{$RUN}:events" - + | grep -A 4 '^repair$' | grep -qx verified || fail "no repair event"

say "6. Streaming DiLoCo (2 fragments): every fragment goes to the new version"
RUN=crs; SH="dl:{$RUN}:shards"
init_run $RUN --trainer quadratic --numel 20000 --shards 4 --fragments 2 --workers 2 --snapshot-every 100
start_server t1 $TTL
for w in w1 w2; do mv "$TMP/$w.jsonl" "$TMP/$w-3.jsonl"; mv "$TMP/worker-$w.log" "$TMP/worker-$w-3.log"; done
run_workers $((4 * H))
join_workers
BAD=$(last_ref 3 log)
corrupt_blob "$BAD"
repair > "$TMP/repair6.txt" 2>&1 || fail "repair: $(cat "$TMP/repair6.txt")"
V=$($RCLI HGET "$SH" 0:version)
[ "$(shard_versions $RUN)" = "$V $V $V $V" ] && [ "$($RCLI HGET "dl:{$RUN}:state" round:0)" = "$V" ] &&
  [ "$($RCLI HGET "dl:{$RUN}:state" round:1)" = "$V" ] || fail "Streaming run not at one version $V"
for w in w1 w2; do mv "$TMP/$w.jsonl" "$TMP/$w-4.jsonl"; mv "$TMP/worker-$w.log" "$TMP/worker-$w-4.log"; done
run_workers $((2 * H))
join_workers

say "7. an async run: its Delayed Nesterov steps verify; a corrupt one is refused with what to do instead"
RUN=cra
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --async --workers 1 --dn-buffer-size 2
start_server s7 $TTL
start_worker w7 --sync-every 5 --steps 20   # 4 submissions: two Delayed Nesterov windows in the log
wait_workers w7
repair > "$TMP/repair7a.txt" 2>&1 || fail "repair of a healthy async run: $(cat "$TMP/repair7a.txt")"
[ "$(grep -c 'verifies at version 4$' "$TMP/repair7a.txt")" = 2 ] && grep -q "nothing to repair" "$TMP/repair7a.txt" ||
  fail "repair of a healthy async run (Delayed Nesterov) says: $(cat "$TMP/repair7a.txt")"
corrupt_blob "dl:{$RUN:0}:snap:0:0"
repair > "$TMP/repair7.txt" 2>&1 && fail "repair of an async run succeeded"
grep -q "is async.*coordinator init --run NEW --from-checkpoint FILE" "$TMP/repair7.txt" ||
  fail "repair of an async run says: $(cat "$TMP/repair7.txt")"

say "8. a valid blob in the wrong place"
RUN=crw; SH="dl:{$RUN}:shards"
init_run $RUN --trainer quadratic --numel 20000 --shards 4 --workers 2 --snapshot-every 100
log_key() { # SHARD VERSION -> the key of that log entry
  r=$($RCLI HGET "$SH" "$1:log" | tr , '\n' | grep "^$2\\.")
  [ -n "$r" ] || fail "shard $1 has no log entry of version $2"; echo "dl:{$RUN:$1}:log:${r%.*}:${r#*.}"
}
synced_digest() { # VERSION -> the digest the workers' sync log recorded at it
  grep -h '"event":"sync"' "$TMP/w1.jsonl" | grep "\"version\":$1," | tail -n 1 | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/'
}
forge() { # KEY: doubles a log entry's fp32 payload and fixes its checksum: a valid blob, but not the one committed
  $RCLI --raw GET "$1" | head -c -1 > "$TMP/blob"
  python3 - "$TMP/blob" <<'EOF'
import array, ctypes, struct, sys
xxh = ctypes.CDLL("libxxhash.so.0").XXH3_64bits
xxh.restype, xxh.argtypes = ctypes.c_uint64, [ctypes.c_char_p, ctypes.c_size_t]
b = open(sys.argv[1], "rb").read()
at = b.index(b"\xa1x\xcf") + 3  # the header's checksum "x": a uint64
g = array.array("f", b[-20000:])  # 5000 fp32 (a shard of 20000 parameters in 4)
g = array.array("f", (2 * v for v in g)).tobytes()
x = xxh(g, len(g))
assert x >= 1 << 32  # still 8 bytes
open(sys.argv[1] + ".forged", "wb").write(b[:at] + struct.pack(">Q", x) + b[at + 8:-20000] + g)
EOF
  $RCLI -x SET "$1" < "$TMP/blob.forged" > /dev/null
}
repaired() { # NAME KEY GOOD REASON: with no server running, KEY was made wrong; the load and repair's answer
  name=$1 dst=$2 good=$3 reason=$4
  V=$($RCLI HGET "$SH" 1:version)
  start_server "$name" $TTL
  k=${dst#*"{$RUN:"}; k=${k%%\}*}
  wait_until 20 "[ -n \"\$($RCLI HGET $SH $k:corrupt)\" ]" "shard $k marked corrupt"
  [ "$($RCLI HGET "$SH" "$k:corrupt")" = "$dst" ] ||
    fail "the load blames $($RCLI HGET "$SH" "$k:corrupt") ($($RCLI HGET "$SH" "$k:corrupt_reason")), not $dst"
  $RCLI HGET "$SH" "$k:corrupt_reason" | grep -q "$reason" ||
    fail "the reason does not say what is wrong: $($RCLI HGET "$SH" "$k:corrupt_reason")"
  repair > "$TMP/repair-$name.txt" 2>&1 || fail "repair: $(cat "$TMP/repair-$name.txt")"
  grep -q "shard $k: CORRUPT at version $V: $dst.*$reason.*; verifies up to version $good\$" "$TMP/repair-$name.txt" ||
    fail "repair says: $(cat "$TMP/repair-$name.txt")"
  grep -q "plan: roll every shard back to its parameters of version $good," "$TMP/repair-$name.txt" ||
    fail "repair's plan: $(cat "$TMP/repair-$name.txt")"
  bin/coordinator checkpoint save --redis "$URL" --run $RUN --out "$TMP/$name.safetensors" > /dev/null 2>&1 || fail "save"
  got=$(bin/coordinator checkpoint show "$TMP/$name.safetensors" | awk '/^params_xxh3/ {print $2}')
  want=$(synced_digest "$good")
  [ -n "$want" ] && [ "$got" = "$want" ] || fail "repair installed $got; the workers synced $want at version $good"
  say "repair restored the parameters the workers synced at version $good ($got)"
}
more_rounds() { # N: the workers train N more rounds, then the server is killed
  run_workers $(($1 * H))
  join_workers
  kill -9 "$SRV_u"
}
start_server u $TTL
for w in w1 w2; do mv "$TMP/$w.jsonl" "$TMP/$w-5.jsonl"; mv "$TMP/worker-$w.log" "$TMP/worker-$w-5.log"; done
more_rounds 4
KEY=$(log_key 1 3)
$RCLI COPY "$(log_key 2 3)" "$KEY" REPLACE > /dev/null # shard 2's entry of the same version
repaired u "$KEY" 2 "holds the log entry of shard 2, version 3, epoch 1 (run $RUN), not the one its key names"
more_rounds 3
V=$($RCLI HGET "$SH" 3:version); KEY=$(log_key 3 $((V - 1)))
$RCLI COPY "$(log_key 3 "$V")" "$KEY" REPLACE > /dev/null # the same shard's next version
repaired u "$KEY" $((V - 2)) "holds the log entry of shard 3, version $V, epoch [0-9]* (run $RUN), not the one its key names"
more_rounds 3
V=$($RCLI HGET "$SH" 0:version); KEY=$(log_key 0 $((V - 1)))
forge "$KEY" # its header is right: only the digest its commit recorded tells
repaired u "$KEY" $((V - 2)) "version $((V - 1)) replays to digest [0-9a-f]*, but its commit recorded [0-9a-f]*"
run_workers $((2 * H))
join_workers
say "OK"
