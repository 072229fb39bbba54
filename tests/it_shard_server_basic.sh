#!/bin/sh
# it_shard_server_basic.sh: leases of the shard-server against a real redis-server.
#
# Starts redis-server on a free port, initialises a run of 2 shards by hand (FUNCTION LOAD + version-0
# snapshot blobs + dl_init, through tests/tools/sstool.c), starts two shard-servers, checks that
# each holds one lease and serves it, kill -9s one and checks the other takes its shard (and loads it)
# after the lease ttl; then SIGTERM gives the leases back and exits 0.
. "$(dirname "$0")/lib.sh"

SSTOOL=build/tests/tools/sstool
[ -x $SSTOOL ] || make $SSTOOL >/dev/null || fail "cannot build $SSTOOL"
[ -x bin/shard-server ] || make bin/shard-server >/dev/null || fail "cannot build bin/shard-server"
[ -f build/libcommon.a ] || make build/libcommon.a >/dev/null || fail "cannot build libcommon"
# (lib.sh's Redis: one that is ours, on a port nobody took between the pick and the bind, shut down at exit)
start_redis
R=$RCLI
RUN=itbasic
$R FUNCTION LOAD REPLACE "$(cat build/diloco.lua)" >/dev/null || fail "FUNCTION LOAD"
$SSTOOL init 127.0.0.1 "$PORT" "$RUN" 2 1000 4 >/dev/null || fail "init"

TTL=1500
start_server() { # id
  bin/shard-server --redis "redis://127.0.0.1:$PORT" --run "$RUN" --id "$1" --lease-ttl-ms $TTL \
    > "$TMP/ss$1.log" 2>&1 &
  PIDS="$PIDS $!"
  eval "PID_$1=$!"
}
owner() { $R HGET "dl:{$RUN}:shards" "$1:owner"; }
addr() { grep -o 'advertised as [0-9.:]*' "$TMP/ss$1.log" | awk '{print $3}'; }

start_server A
start_server B
# both hold one lease each (self-balancing: ceil(2/2) = 1)
ok=0
for i in $(seq 60); do
  o0=$(owner 0); o1=$(owner 1)
  if [ -n "$o0" ] && [ -n "$o1" ] && [ "$o0" != "$o1" ]; then ok=1; break; fi
  sleep 0.1
done
[ $ok = 1 ] || fail "leases not split: shard 0 '$(owner 0)', shard 1 '$(owner 1)'"
echo "leases: shard 0 -> $o0, shard 1 -> $o1"

# each serves its own shard and redirects for the other
eval "A0=\$(addr $o0)"
eval "A1=\$(addr $o1)"
out=$($SSTOOL get "$A0" 0 0 w 1) || fail "get from $o0"
case "$out" in params\ 0\ *) ;; *) fail "get shard 0 from $o0: $out";; esac
d0=$($R HGET "dl:{$RUN}:shards" 0:digest)
case "$out" in *"$d0"*) ;; *) fail "digest of shard 0: $out, expected $d0";; esac
# (the redirect address comes from the owner map refreshed every beat: it may lag one beat)
ok=0
for i in $(seq 30); do
  out=$($SSTOOL get "$A0" 1 0 w 1)
  [ "$out" = "moved -1 - - $A1" ] && { ok=1; break; }
  sleep 0.1
done
[ $ok = 1 ] || fail "shard 1 from $o0 should be moved to $A1: $out"

# kill -9 the owner of shard 1: the owner of shard 0 takes it after the ttl and loads it
eval "victim=\$PID_$o1"
kill -9 "$victim"
ok=0
for i in $(seq 80); do
  [ "$(owner 1)" = "$o0" ] && { ok=1; break; }
  sleep 0.1
done
[ $ok = 1 ] || fail "shard 1 not taken over by $o0 (owner '$(owner 1)')"
echo "shard 1 taken over by $o0"
ok=0
for i in $(seq 50); do
  out=$($SSTOOL get "$A0" 1 0 w 1)
  case "$out" in params\ 0\ *) ok=1; break;; esac
  sleep 0.1
done
[ $ok = 1 ] || fail "shard 1 not served by $o0 after takeover: $out"

# kill -9 the server holding both shards and start it again at once with the same id: it takes its own
# leases back before they expire, but with new epochs (the promises of the old process died with it:
# workers holding parameters it sent but had not committed must see the lease change)
epoch() { $R HGET "dl:{$RUN}:shards" "$1:epoch"; }
e0=$(epoch 0); e1=$(epoch 1)
eval "victim=\$PID_$o0"
kill -9 "$victim"
wait "$victim" 2>/dev/null
start_server "$o0"
ok=0
for i in $(seq 50); do
  out=$($SSTOOL get "$(addr $o0)" 0 0 w 1)
  case "$out" in params\ 0\ *) ok=1; break;; esac
  sleep 0.1
done
[ $ok = 1 ] || fail "$o0 restarted does not serve shard 0: $out"
[ "$(owner 0)" = "$o0" ] && [ "$(owner 1)" = "$o0" ] || fail "restarted $o0 should hold both: '$(owner 0)' '$(owner 1)'"
[ "$(epoch 0)" -gt "$e0" ] && [ "$(epoch 1)" -gt "$e1" ] ||
  fail "restarted with the same id, $o0 kept the old epochs: shard 0 $e0 -> $(epoch 0), shard 1 $e1 -> $(epoch 1)"
echo "restarted $o0 holds its shards again with new epochs (0: $e0 -> $(epoch 0), 1: $e1 -> $(epoch 1))"
# and a running server keeps its epochs (renewals do not bump them)
e0=$(epoch 0); sleep 1; [ "$(epoch 0)" = "$e0" ] || fail "a renewal changed the epoch of shard 0: $e0 -> $(epoch 0)"

# SIGTERM: leases given back, exit 0 within 2 s
eval "survivor=\$PID_$o0"
kill -TERM "$survivor"
for i in $(seq 20); do kill -0 "$survivor" 2>/dev/null || break; sleep 0.1; done
kill -0 "$survivor" 2>/dev/null && fail "shard-server still running 2 s after SIGTERM"
wait "$survivor"; rc=$?
[ $rc = 0 ] || fail "shard-server exited $rc after SIGTERM"
[ -z "$(owner 0)" ] && [ -z "$(owner 1)" ] || fail "leases not given back: '$(owner 0)' '$(owner 1)'"
echo "PASS"
exit 0
