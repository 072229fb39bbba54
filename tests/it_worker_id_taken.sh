#!/bin/sh
# it_worker_id_taken.sh: two processes with one --worker-id do not fight over it, and a kicked worker is told
# it was kicked.
# A registration of a live id replaces its incarnation (a restarted worker takes its id back at once). When
# the old process is still alive, it used to read its next refusal as an eviction and register again,
# replacing the other, which did the same: about ten registrations a second between them, thousands of
# rejections, and "we were evicted (heartbeats missed ...)" in both logs, never the reason (the default id
# <hostname>-<pid> can collide in containers: pid 1, one hostname). The refusal of a replaced incarnation now
# says so ("was replaced: incarnation N registered since from host H", lua/20_membership.lua
# not_member_why), and a worker told that of its current incarnation leaves the id to the other: its session
# ends as at a shutdown with DILOCO_STOP_REPLACED, it does not register again, and bin/worker exits 1
# saying to give each worker its own id (worker/diloco/control.c dl_reply_end).
# A kicked or evicted incarnation is told which (gone:<w> in dl:{R}:state until it registers again); a
# kicked worker used to log "we were evicted (heartbeats missed for longer than the timeout)".
# Part 1: a, then b, as worker `dup`: a exits 1 with that message; b trains on and its rounds commit; the
# id was registered twice in all. Part 2: w is kicked and says so, registers again and ends its steps.
# test: light (it waits more than it computes)
. "$(dirname "$0")/lib.sh"
RUN=dupid
start_redis
init_run $RUN --trainer quadratic --numel 4000 --shards 2 --workers 1
start_server s0
version() { $RCLI HGET "dl:{$RUN}:shards" 0:version; }
joins() { $RCLI HGET "dl:{$RUN}:state" joins; } # (registrations in the run)
start_worker a --worker-id dup --sync-every 10 --steps 0 --step-delay-ms 5 --heartbeat-interval 0.5
wait_until 20 '[ "$(version)" -ge 2 ] 2>/dev/null' "a's first two rounds"
${WORKER:-bin/worker} --redis "$URL" --run $RUN --worker-id dup --quiet --sync-every 10 --steps 0 --step-delay-ms 5 \
  --heartbeat-interval 0.5 > "$TMP/worker-b.log" 2>&1 &
WRK_b=$!; PIDS="$PIDS $WRK_b"
worker_exits_1 a "ERROR stopped after [0-9]* steps: another process registered as worker 'dup' in run '$RUN'; give each worker its own --worker-id" \
  "b registered under its id"
grep -q "was replaced: incarnation [0-9]* registered since from host" "$TMP/worker-a.log" ||
  fail "a was not told it was replaced: $(grep -E 'WARN|ERROR' "$TMP/worker-a.log" | tail -n 4)"
v=$(version)
wait_until 20 '[ "$(version)" -ge $((v + 3)) ] 2>/dev/null' "b's rounds to commit after a stopped"
alive "$WRK_b" || fail "b stopped: $(tail -n 3 "$TMP/worker-b.log")"
grep -q "evicted\|registering again" "$TMP/worker-b.log" && fail "b was pushed out: $(grep -E 'evicted|registering again' "$TMP/worker-b.log" | head -n 3)"
[ "$(joins)" = 2 ] || fail "worker id dup registered $(joins) times (a and b once each expected)"
kill "$WRK_b"; wait "$WRK_b"
say "part 1: a stopped (exit 1) once b took the id; b trained on; 2 registrations in all"
start_worker w --sync-every 10 --steps 400 --step-delay-ms 5 --heartbeat-interval 0.5
wait_until 20 'grep -q "registered as w" "$TMP/worker-w.log"' "w to register"
sleep 0.5
bin/coordinator control --redis "$URL" --run $RUN kick w > "$TMP/kick.log" 2>&1 || fail "kick: $(cat "$TMP/kick.log")"
wait_workers w
# (told by its heartbeat, by a Function, or by a shard-server's refusal of its push: whichever comes first)
grep -q "worker w (incarnation [0-9]*) was kicked by the operator" "$TMP/worker-w.log" ||
  fail "w was not told it was kicked: $(grep -E 'WARN|ERROR' "$TMP/worker-w.log" | head -n 4)"
grep -E "heartbeats missed|not a live member" "$TMP/worker-w.log" &&
  fail "w was told something else than its kick"
[ "$(grep -c "registered as w (incarnation" "$TMP/worker-w.log")" = 2 ] ||
  fail "w did not register once again after the kick: $(grep 'registered as' "$TMP/worker-w.log")"
say "part 2: the kicked worker said so, registered again and ended its 400 steps"
