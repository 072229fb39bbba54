#!/bin/sh
# it_user_messages.sh: what a user sees when a run goes wrong in ordinary ways (none of it changes what is
# trained):
#   - a worker that waits at a barrier for workers that have not come (one started of a run made with
#     --workers 2) says so after 10 s, with the way out; once the second one comes both sync;
#   - bin/worker without --steps prints "step N" with N its own step count (it printed N followed by a 0);
#   - the run gone from Redis under running processes (a Redis restarted without its data; here FUNCTION
#     FLUSH and FLUSHALL, which leave it as such a restart does): the worker, the shard-server and
#     `coordinator serve` each say once that the run is gone and what to do, and stay up; SIGTERM then
#     stops the shard-server with "stopped" as its last line, and it and serve (SIGINT) name the signal;
#     serve gets its SIGINT with Redis frozen (SIGSTOP) while its reap waits for a reply, and must exit
#     within 5 s (it waited out the command's 5 s timeout and a reconnect first: about 11 s);
#   - `coordinator --redis URL status` (flags before the command) says that the command comes first;
#   - a GPT worker with a token file too short for its --seq, --shard-index out of range, or a
#     --min-lr-ratio or --weight-decay that would make its lr negative or its weights grow, or an inner lr of 0
#     (--lr, --quad-lr: every pseudo-gradient zero), says the
#     values and what to change (it trained with them before);
#   - a shutdown: the shard-server says once that the run was shut down and serves on; a second shutdown
#     says the run was shut down already (ok, exit 0; no second event); set-momentum -0 stores and shows 0;
#   - a worker started on a run an operator shut down says how to train on; one Ctrl-C'd while it waits
#     to start (no shard-server up) says it stopped, exit 0 (it said "ERROR stopped", exit 1);
#   - `coordinator init --force` over a run whose shard-server is still registered warns first (they carry on
#     in the new run); over an idle run it says nothing more;
#   - a redis:// URL that names a Redis Sentinel: init, status, control, the shard-server and the worker each
#     say that it is a Sentinel and which redis+sentinel:// URL to give (they said the function library was
#     not loaded, or "ERR unknown command 'FUNCTION'");
#   - a GPT worker's --checkpoint FILE says it starts fresh (no FILE yet), then that it resumes from FILE at
#     its step (it resumed silently) and trains on to --steps (counted from there), and says when the
#     checkpoint's step is at or past --steps already
# test: light (it waits more than it computes: 3 s of CPU in 19 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
start_redis
REDIS_PID=$(cat "$TMP/redis.pid")
trap 'kill -CONT $REDIS_PID 2>/dev/null; cleanup' EXIT
RUN=walk
init_run $RUN --trainer quadratic --numel 100 --workers 2 --shards 2
start_server s1
bin/coordinator serve --redis "$URL" --run $RUN --print-every 0 > "$TMP/serve.log" 2>&1 &
SERVE=$!; PIDS="$PIDS $SERVE"
# not start_worker: it passes --quiet, and the progress line is looked at here
bin/worker --redis "$URL" --run $RUN --worker-id w1 --sync-every 5 --step-delay-ms 20 --heartbeat-interval 1 \
  > "$TMP/worker-w1.log" 2>&1 &
W1=$!; PIDS="$PIDS $W1"
wait_until 16 'grep -q "round 0 of fragment 0: waited 10 s at the barrier for the other workers of run .walk. .*coordinator control set-workers N" "$TMP/worker-w1.log"' \
  "w1 to say that it waits at the barrier"
start_worker w2 --sync-every 5 --step-delay-ms 20 --heartbeat-interval 1
wait_until 10 'grep -q "^step [0-9]*  loss .*  v2  " "$TMP/worker-w1.log"' "w1 to sync twice once w2 came"
say "a worker alone at the barrier of a 2-worker run said so after 10 s; with a second one both synced"

kill -INT $W1
wait $W1 || fail "w1 exit status $? on SIGINT"
n=$(sed -n 's/.*stopped after \([0-9]*\) steps (signal).*/\1/p' "$TMP/worker-w1.log")
last=$(sed -n 's/^step \([0-9]*\)  loss.*/\1/p' "$TMP/worker-w1.log" | tail -n 1)
[ -n "$n" ] && [ -n "$last" ] || fail "no 'stopped after' or no progress line: $(tail -n 3 "$TMP/worker-w1.log")"
[ "$last" -ge 10 ] && [ "$last" -le "$n" ] || fail "the last progress line says step $last of $n steps trained"
say "progress line without --steps: step $last, of $n steps trained"

$RCLI function flush > /dev/null && $RCLI flushall > /dev/null || fail "flush"
gone="run 'walk' is gone from this Redis (no .*): Redis restarted without its data .*coordinator init"
wait_until 8 'grep -q "heartbeat failed: $gone" "$TMP/worker-w2.log"' "w2 to say that the run is gone"
wait_until 8 'grep -q "lease renewal failed: $gone" "$TMP/server-s1.log"' "s1 to say that the run is gone"
wait_until 8 'grep -q "reap: $gone" "$TMP/serve.log"' "serve to say that the run is gone"
sleep 3 # several heartbeats, lease renewals and reaps more
for f in worker-w2 server-s1 serve; do
  [ "$(grep -c "is gone from this Redis" "$TMP/$f.log")" = 1 ] || fail "$f said the run is gone more than once"
done
alive $WRK_w2 && alive $SRV_s1 && alive $SERVE || fail "a process exited when the run went"
say "the run gone from Redis: worker, shard-server and serve said so once each, and stayed up"
kill -TERM $SRV_s1
wait $SRV_s1 || fail "s1: exit status $? on SIGTERM"
tail -n 1 "$TMP/server-s1.log" | grep -q "shard-server s1 stopped$" || fail "s1's last line: $(tail -n 2 "$TMP/server-s1.log")"
grep -q "INFO SIGTERM: stopping (giving leases back)" "$TMP/server-s1.log" || fail "s1 did not name the signal"
# serve reaps every second: with Redis frozen for 1.5 s, its reap waits for a reply when the signal comes
kill -STOP "$REDIS_PID"
sleep 1.5
t0=$(date +%s.%N)
kill -INT $SERVE
wait_until 30 "! alive $SERVE" "serve to exit on SIGINT, Redis frozen"
secs=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')
kill -CONT "$REDIS_PID"
wait $SERVE || fail "serve: exit status $? on SIGINT"
grep -q "INFO SIGINT (Ctrl-C): stopping" "$TMP/serve.log" || fail "serve did not name the signal: $(tail -n 2 "$TMP/serve.log")"
tail -n 1 "$TMP/serve.log" | grep -q "INFO stopped$" || fail "serve's last line: $(tail -n 2 "$TMP/serve.log")"
say "serve stopped $secs s after SIGINT, Redis frozen"
awk -v s="$secs" 'BEGIN { exit !(s < 5) }' || fail "serve took $secs s to stop on SIGINT while Redis was frozen, want < 5"
say "SIGTERM, SIGINT: the shard-server and serve name the signal; the server's last line says it stopped"

bin/coordinator --redis "$URL" --run $RUN status > "$TMP/out" 2>&1
rc=$?
[ $rc = 2 ] || fail "coordinator --redis URL --run R status: exit $rc (want 2)"
head -n 1 "$TMP/out" | grep -q "coordinator: the COMMAND comes first, then its flags (e.g. .bin/coordinator status" \
  || fail "flags before the command: $(head -n 1 "$TMP/out")"
say "flags before the command: exit 2, saying that the command comes first"

# a GPT worker's data and part flags that cannot work: one line with the values and the way out
init_run tiny --trainer gpt --layers 1 --heads 2 --dim 32 --ctx 64
printf 'hi\n' > "$TMP/tiny.txt"
bin/worker prepare-data --input "$TMP/tiny.txt" --output "$TMP/tiny.tok" > /dev/null || fail "prepare-data"
bin/worker --redis "$URL" --run tiny --data "$TMP/tiny.tok" > "$TMP/out" 2>&1 && fail "a 3-token file: exit 0"
grep -q "data shard 0/1 has 3 tokens, fewer than seq+2 = 66; use a longer token file" "$TMP/out" \
  || fail "a 3-token file: $(cat "$TMP/out")"
bin/worker --redis "$URL" --run tiny --num-shards 2 --shard-index 2 > "$TMP/out" 2>&1 && fail "--shard-index 2 of 2: exit 0"
grep -q "need 0 <= --shard-index < --num-shards, got --shard-index 2 --num-shards 2" "$TMP/out" \
  || fail "--shard-index 2 of 2: $(cat "$TMP/out")"
bin/worker --redis "$URL" --run tiny --min-lr-ratio -0.5 > "$TMP/out" 2>&1 && fail "--min-lr-ratio -0.5: exit 0"
grep -q "min-lr-ratio is the final lr over the peak lr, in \[0, 1\]; got -0.5" "$TMP/out" || fail "--min-lr-ratio -0.5: $(cat "$TMP/out")"
bin/worker --redis "$URL" --run tiny --weight-decay -1 > "$TMP/out" 2>&1 && fail "--weight-decay -1: exit 0"
grep -q "need --lr > 0 .* and --weight-decay >= 0, got .* --weight-decay -1" "$TMP/out" || fail "--weight-decay -1: $(cat "$TMP/out")"
# an inner lr of 0 trains nothing: every pseudo-gradient would be zero (the quadratic's loss stays at its start)
bin/worker --redis "$URL" --run tiny --lr 0 > "$TMP/out" 2>&1 && fail "--lr 0: exit 0"
grep -q "need --lr > 0 (at 0 nothing is trained and every pseudo-gradient is zero; default 4e-4)" "$TMP/out" || fail "--lr 0: $(cat "$TMP/out")"
bin/worker --redis "$URL" --run tiny --trainer quadratic --quad-lr 0 > "$TMP/out" 2>&1 && fail "--quad-lr 0: exit 0"
grep -q "\-\-quad-lr wants a positive number (at 0 the worker trains nothing and sends only zero pseudo-gradients; default 0.01), got '0'" "$TMP/out" ||
  fail "--quad-lr 0: $(cat "$TMP/out")"
say "a token file too short for --seq, --shard-index out of range, a negative final lr or weight decay, an inner lr of 0: the values and the way out"

# a worker started on a run an operator shut down: refused, with the way to train on
init_run over --trainer quadratic --numel 10 --workers 1
RUN=over; start_server over1 --lease-ttl-ms 1000
bin/coordinator control --redis "$URL" --run over shutdown > "$TMP/out" 2>&1 || fail "control shutdown"
grep -q '"message":"run shut down: workers stop at their next heartbeat"' "$TMP/out" || fail "control shutdown: $(cat "$TMP/out")"
# the shard-server says once that the run was shut down (it said nothing, and serves on)
wait_until 10 'grep -q "INFO run .over. was shut down by an operator: no round closes any more; this server keeps serving" "$TMP/server-over1.log"' \
  "the shard-server to say that the run was shut down"
# a second shutdown: ok (idempotent), saying that it was shut down already (it said "run shut down" again)
bin/coordinator control --redis "$URL" --run over shutdown > "$TMP/out" 2>&1 || fail "a second control shutdown: exit $?"
grep -q '"status":"ok","message":"run already shut down: nothing changed"' "$TMP/out" || fail "a second shutdown: $(cat "$TMP/out")"
[ "$($RCLI XRANGE "dl:{over}:events" - + | grep -c '^shutdown$')" = 1 ] || fail "a second shutdown event"
# set-momentum -0 is 0 (it stored "-0" and printed "momentum":-0.0)
bin/coordinator control --redis "$URL" --run over set-momentum -0 > "$TMP/out" 2>&1 || fail "set-momentum -0: $(cat "$TMP/out")"
grep -q '"momentum":0.0[,}]' "$TMP/out" && [ "$($RCLI HGET "dl:{over}:tunables" outer_momentum)" = 0 ] ||
  fail "set-momentum -0: $(cat "$TMP/out"), stored $($RCLI HGET "dl:{over}:tunables" outer_momentum)"
sleep 1 # beats more
[ "$(grep -c "was shut down by an operator" "$TMP/server-over1.log")" = 1 ] || fail "the shard-server said the shutdown more than once"
alive $SRV_over1 || fail "the shard-server exited at the shutdown"
say "shutdown: the shard-server said so once and serves on; a second one says already (ok); set-momentum -0 is 0"
bin/worker --redis "$URL" --run over --sync-every 5 > "$TMP/out" 2>&1 && fail "a worker joined a shut-down run"
grep -q "SHUTDOWN the run has been shut down by an operator and takes no more workers; to train on, start a new run from it: .coordinator checkpoint save., then .coordinator init --from-checkpoint." "$TMP/out" \
  || fail "a shut-down run: $(cat "$TMP/out")"
say "a worker on a shut-down run: refused, saying how to train on"

# Ctrl-C of a worker that waits to start (no shard-server up for its run): a stop, not an error
init_run nosrv --trainer quadratic --numel 10 --workers 1
bin/worker --redis "$URL" --run nosrv --worker-id early > "$TMP/early.log" 2>&1 &
p=$!; PIDS="$PIDS $p"
wait_until 10 'grep -q "registered as early" "$TMP/early.log"' "the worker to register"
kill -INT $p
wait $p || fail "SIGINT before training: exit $? (want 0): $(tail -n 2 "$TMP/early.log")"
tail -n 1 "$TMP/early.log" | grep -q "INFO stopped by a signal before training started" \
  || fail "SIGINT before training: $(tail -n 2 "$TMP/early.log")"
say "SIGINT of a worker waiting to start: exit 0, 'stopped by a signal before training started'"

# init --force over a run that still has a shard-server: said before it is replaced; over an idle run: nothing
init_run live --trainer quadratic --numel 10 --workers 1
RUN=live; start_server live1
wait_until 10 '[ "$($RCLI HLEN "dl:{live}:servers")" -ge 1 ]' "the shard-server to register"
bin/coordinator init --redis "$URL" --run live --trainer quadratic --numel 10 --workers 1 --force > "$TMP/force.log" 2>&1 \
  || fail "init --force: $(cat "$TMP/force.log")"
grep -q "warning: run 'live' still has 0 registered worker(s) and 1 shard-server(s)" "$TMP/force.log" \
  || fail "init --force under a live shard-server: $(cat "$TMP/force.log")"
bin/coordinator init --redis "$URL" --run nosrv --trainer quadratic --numel 10 --workers 1 --force > "$TMP/force2.log" 2>&1 \
  || fail "init --force: $(cat "$TMP/force2.log")"
grep -q "warning" "$TMP/force2.log" && fail "init --force of an idle run warned: $(cat "$TMP/force2.log")"
say "init --force over a run with a live shard-server warns first; over an idle run it does not"

# a redis:// URL that names a Sentinel (of our Redis, master name m): every process kind says so, and the URL to use
pick_ports SP
start_sentinel "$SP"
SURL="redis://127.0.0.1:$SP"
want="127.0.0.1:$SP is a Redis Sentinel, not a Redis server: use redis+sentinel://127.0.0.1:$SP/m "
for cmd in "coordinator init --run sx --trainer quadratic --numel 10" "coordinator status --run sx" \
  "coordinator control --run sx shutdown" "shard-server --run sx" "worker --run sx --steps 1"; do
  timeout 20 bin/$cmd --redis "$SURL" > "$TMP/sentinel.txt" 2>&1 && fail "bin/$cmd on a Sentinel: exit 0"
  grep -q "$want" "$TMP/sentinel.txt" || fail "bin/$cmd on a Sentinel: $(cat "$TMP/sentinel.txt")"
done
say "a redis:// URL of a Sentinel: init, status, control, shard-server and worker say so, with the redis+sentinel:// URL"

# a GPT worker's --checkpoint: says that it starts fresh (no file yet), then that it resumes, from which step.
# --steps counts from the checkpoint's step (trainer.resumed_step): the same command started again finishes the
# steps (it trained --steps more, the cosine over --steps at its floor lr throughout: a warning said so); a
# checkpoint at --steps already has nothing left to train, and says so.
init_run tiny --trainer gpt --layers 1 --heads 2 --dim 32 --ctx 64 --workers 1 --force
RUN=tiny; start_server tiny1
gflags="--redis $URL --run tiny --worker-id g1 --sync-every 2 --seq 16 --batch 1 --warmup 0 --checkpoint $TMP/g.ck"
timeout 60 bin/worker $gflags --steps 2 > "$TMP/g1.log" 2>&1 || fail "GPT worker with --checkpoint: $(tail -n 3 "$TMP/g1.log")"
grep -q "^gpt: checkpoint $TMP/g.ck does not exist: starting fresh" "$TMP/g1.log" || fail "no 'starting fresh': $(head -n 3 "$TMP/g1.log")"
timeout 60 bin/worker $gflags --steps 4 > "$TMP/g2.log" 2>&1 || fail "GPT worker resumed: $(tail -n 3 "$TMP/g2.log")"
grep -q "^gpt: resuming from $TMP/g.ck: step 2, 32 tokens trained, lr 0.000[0-9]* at this step" "$TMP/g2.log" ||
  fail "no 'resuming from': $(head -n 3 "$TMP/g2.log")"
grep -q "warning: the cosine schedule ends" "$TMP/g2.log" && fail "a resume before --steps was warned about: $(head -n 3 "$TMP/g2.log")"
grep -q "stopped after 4 steps" "$TMP/g2.log" || fail "the resumed worker did not end at step 4: $(tail -n 2 "$TMP/g2.log")"
grep -q "starting fresh" "$TMP/g2.log" && fail "the resumed worker also said it starts fresh"
timeout 60 bin/worker $gflags --steps 4 > "$TMP/g3.log" 2>&1 || fail "GPT worker at its --steps: $(tail -n 3 "$TMP/g3.log")"
grep -q "the trainer's checkpoint is at step 4 already, --steps 4: nothing left to train (raise --steps to train on)" \
  "$TMP/g3.log" || fail "a checkpoint at --steps did not say so: $(grep -E 'WARN|gpt:' "$TMP/g3.log")"
grep -q "^gpt: warning: the cosine schedule ends at step 4 (--steps), at or before the checkpoint's step 4" "$TMP/g3.log" ||
  fail "no warning of a schedule already over: $(head -n 3 "$TMP/g3.log")"
say "GPT --checkpoint: 'starting fresh', then 'resuming from FILE: step 2' and on to --steps 4, then 'nothing left to train'"
