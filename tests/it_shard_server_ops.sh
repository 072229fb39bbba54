#!/bin/sh
# it_shard_server_ops.sh: the shard-server's data plane and commits against a real redis-server.
#
#  1. bad input (NaN, wrong size, bad checksum, unknown worker, stale round, oversize frame): each is
#     answered `err` with its code, recorded in dl:{R}:events, and changes nothing;
#  2. five sync rounds (f32 and bf16 pushes, dl_arrive by hand, get -> commit -> params), snapshots
#     every 2 versions with the obsolete blobs deleted; a get sent before the barrier closes is held by
#     the server (no answer) and answered at the close, which the server hears on dl:{R}:closes;
#  3. a participant that dies after the barrier closed is dropped and the round commits without it;
#  4. a second server takes over (SIGTERM of the first) and rebuilds the shards from snapshot + log:
#     the digests it serves are those committed;
#  5. SIGSTOP of the owner beyond the lease ttl: another server takes the shards; the stopped one,
#     resumed, treats its leases as lost and redirects instead of serving stale data.
# The data-plane client is tests/tools/sstool.c.
. "$(dirname "$0")/lib.sh"
check() { # what expected-prefix actual
  case "$3" in "$2"*) echo "ok: $1";; *) fail "$1: expected '$2...', got '$3'";; esac
}

[ -x bin/shard-server ] || make bin/shard-server >/dev/null || fail "cannot build bin/shard-server"
[ -f build/libcommon.a ] || make build/libcommon.a >/dev/null || fail "cannot build libcommon"
T=build/tests/tools/sstool
[ -x $T ] || make $T >/dev/null || fail "cannot build $T"
# (lib.sh's Redis: one that is ours, on a port nobody took between the pick and the bind, shut down at exit)
start_redis
R=$RCLI
RUN=itops
C="dl:{$RUN}:config"
$R FUNCTION LOAD REPLACE "$(cat build/diloco.lua)" >/dev/null || fail "FUNCTION LOAD"
"$T" init 127.0.0.1 "$PORT" "$RUN" 2 1000 2 >/dev/null || fail "init"
$R FCALL dl_register 1 "$C" w1 h 10 >/dev/null
$R FCALL dl_register 1 "$C" w2 h 10 >/dev/null
$R FCALL dl_register 1 "$C" w3 h 10 >/dev/null   # target 2: w3 joins at round 1

TTL=1500
start_server() { # id
  bin/shard-server --redis "redis://127.0.0.1:$PORT" --run "$RUN" --id "$1" --lease-ttl-ms $TTL \
    > "$TMP/ss$1.log" 2>&1 &
  PIDS="$PIDS $!"
  eval "PID_$1=$!"
  for i in $(seq 50); do grep -q 'advertised as' "$TMP/ss$1.log" && break; sleep 0.1; done
  eval "ADDR_$1=$(grep -o 'advertised as [0-9.:]*' "$TMP/ss$1.log" | awk '{print $3}')"
}
field() { $R HGET "dl:{$RUN}:shards" "$1"; }
wait_owner() { # shard id
  for i in $(seq 80); do [ "$(field "$1:owner")" = "$2" ] && return 0; sleep 0.1; done
  fail "shard $1 not owned by $2 (owner '$(field "$1:owner")')"
}
wait_params() { # addr shard version -> echoes the params line
  for i in $(seq 100); do
    out=$("$T" get "$1" "$2" "$3" w1 1)
    case "$out" in params*) echo "$out"; return 0;; esac
    sleep 0.05
  done
  echo "$out"
}
inc() { $R FCALL dl_member 1 "$C" "$1"; }

start_server A
wait_owner 0 A; wait_owner 1 A
for i in $(seq 50); do grep -q 'subscribed to' "$TMP/ssA.log" && break; sleep 0.1; done
A=$ADDR_A
v0=$(wait_params "$A" 0 0)
check "shard 0 served at version 0" "params 0 $(field 0:digest)" "$v0"

# 1. bad input
I1=$(inc w1); I2=$(inc w2)
check "NaN"        "err -1 - NAN"            "$("$T" push "$A" 0 0 w1 "$I1" 500 f32 0.1 nan)"
check "wrong size" "err -1 - BADSIZE"        "$("$T" push "$A" 0 0 w1 "$I1" 500 f32 0.1 short)"
check "checksum"   "err -1 - CHECKSUM"       "$("$T" push "$A" 0 0 w1 "$I1" 500 f32 0.1 badsum)"
check "unknown"    "err -1 - UNKNOWN_WORKER" "$("$T" push "$A" 0 0 nobody 1 500 f32 0.1)"
check "old inc"    "err -1 - UNKNOWN_WORKER" "$("$T" push "$A" 0 0 w1 999 500 f32 0.1)"
check "stale"      "err -1 - STALE"          "$("$T" push "$A" 0 3 w1 "$I1" 500 f32 0.1)"
out=$("$T" push "$A" 0 0 w1 "$I1" 500 f32 0.1 oversize)
check "oversize"   "err -1 - BADSIZE"        "$out"
case "$out" in *"closed yes"*) echo "ok: oversize closes the connection";; *) fail "oversize: not closed: $out";; esac
n=$($R XRANGE "dl:{$RUN}:events" - + | grep -c '^reject$')
[ "$n" -ge 7 ] || fail "only $n rejections recorded in dl:{$RUN}:events"
echo "ok: $n rejections recorded"
[ "$(field 0:version)" = 0 ] || fail "bad input changed the version"
kill -0 "$PID_A" || fail "the server died on bad input"

# 2. five rounds (versions 1..5; snapshots at 2 and 4); w1 sends f32, w2 bf16; w3 joins as a participant from round 1
for r in 0 1 2 3 4; do
  for k in 0 1; do
    check "push w1 k$k r$r" "ack" "$("$T" push "$A" $k $r w1 "$I1" 500 f32 0.0$((r+1)))"
    check "push w2 k$k r$r" "ack" "$("$T" push "$A" $k $r w2 "$I2" 500 bf16 -0.0$((r+2)))"
  done
  "$T" get "$A" 0 $((r+1)) w1 "$I1" > "$TMP/held.out" 2>&1 & # sent before the barrier closes: held
  held=$!
  sleep 0.3
  kill -0 $held 2>/dev/null || fail "a get before the barrier closes was answered at once: $(cat "$TMP/held.out")"
  $R FCALL dl_arrive 1 "$C" w1 "$I1" 0 $r >/dev/null
  $R FCALL dl_arrive 1 "$C" w2 "$I2" 0 $r >/dev/null
  if [ $r -eq 0 ]; then
    wait $held
    check "the held get, answered at the close" "params 1 $(field 0:digest)" "$(cat "$TMP/held.out")"
  fi
  if [ $r -ge 1 ]; then   # w3 arrives without having pushed: the server asks for it
    I3=$(inc w3)
    $R FCALL dl_arrive 1 "$C" w3 "$I3" 0 $r >/dev/null
    wait $held
    check "the held get, answered at the close: need lists w3" "need -1 - - w3" "$(cat "$TMP/held.out")"
    check "need lists w3" "need -1 - - w3" "$("$T" get "$A" 0 $((r+1)) w1 "$I1")"
    for k in 0 1; do "$T" push "$A" $k $r w3 "$I3" 500 f32 0.02 >/dev/null; done
  fi
  for k in 0 1; do
    out=$(wait_params "$A" $k $((r+1)))
    check "round $r shard $k committed" "params $((r+1)) $(field $k:digest)" "$out"
  done
done
check "snapshot recorded" "4." "$(field 0:snap)"
[ "$(field 0:log)" = "5.1" ] || fail "log not trimmed after the snapshot of version 4: '$(field 0:log)'"
left=$($R --scan --pattern "dl:{$RUN:0}:*" | sort | tr '\n' ' ')
case "$left" in *"snap:4:"*) ;; *) fail "snapshot blob missing: $left";; esac
case "$left" in *log:[1-4]:*|*snap:0:*|*snap:2:*) fail "obsolete blobs not deleted: $left";; esac
echo "ok: snapshots every 2 versions, obsolete blobs deleted ($left)"

# 3. a participant dies after the barrier closed: dropped, the round commits without it
for k in 0 1; do "$T" push "$A" $k 5 w1 "$I1" 500 f32 0.01 >/dev/null; "$T" push "$A" $k 5 w3 "$I3" 500 f32 0.01 >/dev/null; done
for w in w1 w2 w3; do $R FCALL dl_arrive 1 "$C" $w "$(inc $w)" 0 5 >/dev/null; done
$R FCALL dl_kick 1 "$C" w2 >/dev/null
for k in 0 1; do out=$(wait_params "$A" $k 6); check "round 5 shard $k without w2" "params 6 $(field $k:digest)" "$out"; done
$R XRANGE "dl:{$RUN}:events" - + | grep -q '^drop$' || fail "no drop event"
echo "ok: dead participant dropped"

# 4. takeover: B rebuilds from snapshot 4 + log 5,6 and serves the committed digests
start_server B
kill -TERM "$PID_A"
wait_owner 0 B; wait_owner 1 B
for k in 0 1; do out=$(wait_params "$ADDR_B" $k 6); check "B serves shard $k" "params 6 $(field $k:digest)" "$out"; done
grep -q "loaded version 6" "$TMP/ssB.log" || fail "B did not load version 6"

# 5. SIGSTOP beyond the ttl: C takes over, B resumes and must not serve
kill -STOP "$PID_B"
start_server C
wait_owner 0 C; wait_owner 1 C
kill -CONT "$PID_B"
out=$("$T" get "$ADDR_B" 0 6 w1 "$I1")
check "B after SIGCONT redirects" "moved" "$out"
grep -Eq "lease lost|late lease renewal" "$TMP/ssB.log" || fail "B did not drop its leases"
out=$(wait_params "$ADDR_C" 0 6)
check "C serves shard 0" "params 6 $(field 0:digest)" "$out"
echo "PASS"
