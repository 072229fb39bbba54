#!/bin/sh
# it_barrier_waits_for.sh: a worker long at a barrier says whom it waits for.
# A member that died (kill -9) is waited for until the reaper evicts it, one heartbeat timeout after its last
# beat; a worker restarted under a new id (the default <host>-<pid>) waits for its own old incarnation all
# that time. The waiting workers said only "it waits for its participants" (a PyTorch user's restart waited
# 2 minutes, 3 December). Now the note after 10 s names the members not arrived with the age of their last
# heartbeat (lua/40_barriers.lua dl_waiting, worker/diloco/barrier.c waiting_for), and when one has been
# silent long, that it is evicted after the run's timeout and that a worker started under its id replaces it.
# a and b train; b is killed; c joins under a new id. a (a participant) and c (a joiner) each name b; once
# b is evicted the rounds close with a and c.
# test: light
. "$(dirname "$0")/lib.sh"
RUN=waitsfor
start_redis
init_run $RUN --trainer quadratic --numel 2000 --shards 1 --workers 2 --heartbeat-timeout 24
start_server s0
version() { $RCLI HGET "dl:{$RUN}:shards" 0:version; }
start_worker a --sync-every 10 --steps 0 --step-delay-ms 5 --heartbeat-interval 0.5
start_worker b --sync-every 10 --steps 0 --step-delay-ms 5 --heartbeat-interval 0.5
wait_until 20 '[ "$(version)" -ge 2 ] 2>/dev/null' "two rounds with a and b"
kill -9 "$WRK_b"
start_worker c --sync-every 10 --steps 0 --step-delay-ms 5 --heartbeat-interval 0.5
note="it waits for 1 member(s): b (last heartbeat [0-9.]* s ago)"
# (the first note after 10 s: "waited 11 s" on a loaded machine)
wait_until 20 "grep -q 'waited 1[0-9] s at the barrier for the other workers of run .$RUN.; $note' $TMP/worker-a.log" \
  "a to name b after 10 s at the barrier"
wait_until 20 "grep -q 'waited 1[0-9] s for it to close before joining; $note' $TMP/worker-c.log" \
  "c to name b after 10 s of waiting to join"
grep -q "$note; a member silent for 24 s (the run's heartbeat timeout) is evicted and no longer waited for, and a worker started again under its worker id takes its place at once" \
  "$TMP/worker-c.log" || fail "c did not say how b stops being waited for: $(grep 'waited' "$TMP/worker-c.log")"
v=$(version)
wait_until 40 '[ "$(version)" -ge $((v + 2)) ] 2>/dev/null' "the rounds to go on once b is evicted"
say "a and c named b, silent, and how it stops being waited for; the rounds went on after its eviction"
echo "PASS"
