#!/bin/sh
# it_wall_clock_jump.sh: a worker whose host's wall clock jumps an hour forward mid-run (NTP stepping it, an
# operator's `date -s`) keeps reporting its true speed, so DyLU does not take it for a machine 10^5 times
# slower. The jump is made in the worker alone, by tests/tools/preload/clock_shift.c (LD_PRELOAD: CLOCK_REALTIME
# shifted by the seconds in a file, CLOCK_MONOTONIC left alone). Leases, heartbeats and barriers are timed on
# Redis's clock (lua/, TIME) and every timeout of the processes on CLOCK_MONOTONIC (base/util.h now_ms): the
# speed was the one thing a worker timed on the wall clock (after_step.c, wall_us): the step that spanned the
# jump counted 3600 s of compute, and the reported speed fell from ~40 steps/s to ~0.01 for about 40 beats
# (failed before the fix: the speed after the jump stayed near 0).
# test: light
. "$(dirname "$0")/lib.sh"
RUN=clock
cc -shared -fPIC -O2 -o "$TMP/clock_shift.so" tests/tools/preload/clock_shift.c -ldl 2>"$TMP/cc.txt" ||
  fail "cannot build the clock shifter: $(cat "$TMP/cc.txt")"
echo 0 > "$TMP/shift"
start_redis
init_run $RUN --trainer quadratic --numel 2000 --shards 1 --workers 1
start_server s1
WORKER="env LD_PRELOAD=$TMP/clock_shift.so CLOCK_SHIFT_FILE=$TMP/shift bin/worker" \
  start_worker w1 --sync-every 50 --steps 500 --step-delay-ms 20 --heartbeat-interval 1
# field F of w1's record in dl_status (speed, step)
rec() {
  $RCLI FCALL dl_status 1 "dl:{$RUN}:config" | python3 -c "
import json, sys
print(next((w.get('$1', -1) for w in json.load(sys.stdin)['workers'] if w['id'] == 'w1'), -1))"
}
wait_until 20 "awk -v s=\"\$(rec speed)\" 'BEGIN { exit !(s > 5) }'" "w1 to report its speed"
before=$(rec speed); step0=$(rec step)
echo 3600 > "$TMP/shift"
say "speed $before steps/s at step $step0; the worker's wall clock now jumps an hour forward"
# three beats past the jump (about 150 steps), the speed is still about what it was
wait_until 20 "[ \"\$(rec step)\" -ge $((step0 + 150)) ] && awk -v s=\"\$(rec speed)\" -v b=$before 'BEGIN { exit !(s > b / 3) }'" \
  "w1's speed after the jump to be near its $before steps/s before"
after=$(rec speed)
wait_workers w1
v=$($RCLI HGET "dl:{$RUN}:shards" 0:version)
[ "$v" = 10 ] || fail "shard 0 at version $v after 500 steps at H 50, want 10"
say "OK: speed $before steps/s before the jump, $after after; version $v"
