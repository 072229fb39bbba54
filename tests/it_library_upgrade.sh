#!/bin/sh
# it_library_upgrade.sh: binaries upgraded under a running run find an older build of the function library.
# Only `coordinator init` loaded the library, so a Redis kept the build of the binaries that made the run: new
# binaries worked (the version, the key layout, is the same, and their newer arguments are optional) without
# the newer build's fixes and checks, and nothing said so. Now each build of the library is named (LIB_BUILD,
# the hash of its text: `FCALL dl_build`), every process says once when Redis holds another build, and
# `coordinator load-library` loads this one with no process stopped.
# An older build is made here from this one's text: another LIB_BUILD (and, for a build from before builds
# were named, without dl_build). A worker and a shard-server train on it and say so; load-library loads ours
# while they run; the rounds go on; processes started after it say nothing.
# test: light
. "$(dirname "$0")/lib.sh"
RUN=upgrade
start_redis
init_run $RUN --trainer quadratic --numel 2000 --shards 1 --workers 1
version() { $RCLI HGET "dl:{$RUN}:shards" 0:version; }
own=$(sed -n "s/^local LIB_BUILD = '\([0-9a-f]*\)'.*/\1/p" build/diloco.lua)
[ ${#own} = 16 ] || fail "no LIB_BUILD in build/diloco.lua: '$own'"
[ "$($RCLI FCALL dl_build 1 "dl:{$RUN}:config")" = "$own" ] || fail "init did not load build $own"
sed "s/^local LIB_BUILD = .*/local LIB_BUILD = '0123456789abcdef'/" build/diloco.lua > "$TMP/older.lua"
redis-cli -p "$PORT" -x FUNCTION LOAD REPLACE < "$TMP/older.lua" > /dev/null || fail "cannot load the older build"
start_server s0
start_worker w --sync-every 10 --steps 0 --step-delay-ms 5 --heartbeat-interval 0.5
wait_until 20 '[ "$(version)" -ge 2 ] 2>/dev/null' "two rounds on the older build"
said="Redis holds another build of the ReDiLoCo function library (0123456789abcdef; this binary's is $own), of the same version 3: it works, without this build's fixes, until an operator loads this build's: .coordinator load-library --redis URL --run $RUN."
for log in worker-w server-s0; do
  grep -q "$said" "$TMP/$log.log" || fail "$log did not say Redis holds another build: $(grep WARN "$TMP/$log.log" | head -n 3)"
  [ "$(grep -c "another build of the ReDiLoCo" "$TMP/$log.log")" = 1 ] || fail "$log said it more than once"
done
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status.log" 2>&1 || fail "status: $(cat "$TMP/status.log")"
grep -q "another build of the ReDiLoCo function library (0123456789abcdef" "$TMP/status.log" || fail "status did not say it"
say "an older build: the worker, the shard-server and status each say so once, and the run trains"
bin/coordinator load-library --redis "$URL" --run $RUN > "$TMP/load.log" 2>&1 || fail "load-library: $(cat "$TMP/load.log")"
grep -q "^loaded build $own of function library version 3 (Redis held 0123456789abcdef)" "$TMP/load.log" ||
  fail "load-library said: $(cat "$TMP/load.log")"
grep -q "another build" "$TMP/load.log" && fail "load-library warned about what it mends"
[ "$($RCLI FCALL dl_build 1 "dl:{$RUN}:config")" = "$own" ] || fail "Redis does not hold build $own after load-library"
v=$(version)
wait_until 20 '[ "$(version)" -ge $((v + 3)) ] 2>/dev/null' "the rounds to go on after the load"
alive "$WRK_w" && alive "$SRV_s0" || fail "a process stopped at the load"
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status2.log" 2>&1 || fail "status: $(cat "$TMP/status2.log")"
grep -q "another build" "$TMP/status2.log" && fail "status still warns after the load"
bin/coordinator load-library --redis "$URL" --run $RUN > "$TMP/load2.log" 2>&1 || fail "load-library again: $(cat "$TMP/load2.log")"
grep -q "already (version 3, build $own): nothing to do" "$TMP/load2.log" || fail "load-library again said: $(cat "$TMP/load2.log")"
say "load-library: loaded this build with both processes running, the rounds went on; again: nothing to do"
# a build from before builds were named (no dl_build)
grep -v "reg('dl_build'" "$TMP/older.lua" > "$TMP/unnamed.lua"
redis-cli -p "$PORT" -x FUNCTION LOAD REPLACE < "$TMP/unnamed.lua" > /dev/null || fail "cannot load the unnamed build"
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status3.log" 2>&1 || fail "status on the unnamed build"
grep -q "another build of the ReDiLoCo function library (one from before builds were named; this binary's is $own)" \
  "$TMP/status3.log" || fail "status on a build without dl_build: $(cat "$TMP/status3.log")"
bin/coordinator load-library --redis "$URL" --run $RUN > "$TMP/load3.log" 2>&1 || fail "load-library: $(cat "$TMP/load3.log")"
grep -q "(Redis held a build from before builds were named)" "$TMP/load3.log" || fail "load-library said: $(cat "$TMP/load3.log")"
say "a build from before dl_build: said as such, and replaced"
echo "PASS"
