#!/bin/sh
# it_cli_usage.sh: what a user meets on a wrong command line, for bin/coordinator, bin/shard-server and
# bin/worker, with nothing listening at the Redis URL: a usage error (unknown flag, missing --run or
# Redis URL, a bad URL (rediss://: TLS goes through stunnel, said with where the docs tell how), a bad
# value, an unknown trainer flag; an unknown flag is named first, before a missing --run or URL) is one
# line naming what is wrong, exit 2,
# at once (never a wait for Redis); a Redis that is down, tried once, is one line saying what to check,
# exit 1; --help exits 0 (bin/worker's names each of its flags); SIGTERM ends a wait for a down Redis;
# `serve` started before its run waits, saying so once (in its log, whether Redis has no function library
# yet or the library without this run; no summary of the missing run), then serves it; init warns about
# settings that make a run learn almost nothing (an outer lr above 10, a Delayed Nesterov buffer larger
# than the workers, a staleness limit below workers - 1, a top-k density below one entry a chunk, a sync
# run that never evicts) and not about the defaults; a worker whose heartbeat interval is the run's
# heartbeat timeout or more is refused at open (above half of it, or no heartbeat at all: warned); a worker
# with no shard-server up says so within seconds, and once one is up, that its wait is over; the warning of no
# heartbeat is advice without a test anecdote.
# test: light (it waits more than it computes: 4 s of CPU in 16 s, tests/run.sh)
. "$(dirname "$0")/lib.sh"
DEAD="redis://127.0.0.1:$(free_port)" # nothing listens there

# expect STATUS PATTERN CMD...: CMD ends within $QUICK s with STATUS, printing one line that matches PATTERN.
# QUICK is far below the 60 s a binary waits for an unreachable Redis, and far above bin/worker's start
# (1.5-2.5 s on 2 busy cores: the loader maps cuBLAS, which the CUDA build links).
QUICK=15
expect() {
  want=$1 pattern=$2; shift 2
  timeout $QUICK "$@" > "$TMP/out" 2>&1
  rc=$?
  [ "$rc" = "$want" ] || fail "$*: exit $rc (want $want): $(head -n 3 "$TMP/out")"
  [ "$(wc -l < "$TMP/out")" = 1 ] || fail "$*: not one line: $(head -n 4 "$TMP/out")"
  grep -q -- "$pattern" "$TMP/out" || fail "$*: '$(cat "$TMP/out")' does not say '$pattern'"
}

for cmd in "coordinator init" "coordinator status" "coordinator serve" "shard-server" "worker"; do
  set -- $cmd
  bin=bin/$1; shift
  expect 2 "unknown option --bogus" $bin "$@" --redis "$DEAD" --run r --bogus
  expect 2 "unknown option --bogus" env -u DL_REDIS_URL $bin "$@" --bogus # said before what is missing
  expect 2 "NAME is required" $bin "$@" --redis "$DEAD"
  expect 2 "no Redis URL: give --redis URL" env -u DL_REDIS_URL $bin "$@" --run r
  expect 2 "\-\-redis: unsupported Redis URL 'foo://bar'" $bin "$@" --redis foo://bar --run r
  expect 2 "do not speak TLS themselves; put stunnel in front (docs/deploy.md" $bin "$@" --redis rediss://h:6380 --run r
  expect 2 "DL_REDIS_URL: bad port 'x'" env DL_REDIS_URL=redis://h:x $bin "$@" --run r
  timeout $QUICK $bin "$@" --help > "$TMP/help" 2>&1 || fail "$cmd --help: exit $?"
  grep -q -- "--redis-file FILE" "$TMP/help" || fail "$cmd --help does not show --redis-file"
done
say "unknown flag, missing --run, missing URL, bad URL (flag and environment): exit 2, one line, each binary"

expect 2 "\-\-shards wants an integer in \[1, 4096\], got '0'" bin/coordinator init --redis "$DEAD" --run r --shards 0
expect 2 "unknown option --bogus" bin/worker --redis "$DEAD" --run r --bogus 3
expect 2 "\-\-batch wants an integer, got 'x'" bin/worker --redis "$DEAD" --run r --batch x
expect 2 "unknown option --batch" bin/worker --redis "$DEAD" --run r --trainer quadratic --batch 8
expect 2 "\-\-trainer wants gpt or quadratic, got 'gtp'" bin/worker --redis "$DEAD" --run r --trainer gtp
expect 2 "unknown option --bogus" bin/shard-server --redis "$DEAD" --run r --bogus
expect 2 "\-\-advertise wants HOST:PORT with a port in \[1, 65535\], got '127.0.0.1'" bin/shard-server --redis "$DEAD" --run r --advertise 127.0.0.1
expect 2 "which ACTION? kick, set-lr" bin/coordinator control --redis "$DEAD" --run r
expect 2 "give one FILE" bin/coordinator checkpoint show
expect 2 "\-\-trainer wants gpt or quadratic, got 'gtp'" bin/coordinator init --redis "$DEAD" --run r --trainer gtp
expect 2 "\-\-from-state $TMP/none.safetensors: No such file" bin/coordinator init --redis "$DEAD" --run r --from-state "$TMP/none.safetensors"
expect 2 "\-\-from-checkpoint $TMP/none.safetensors: cannot open it: No such file" bin/coordinator init --redis "$DEAD" --run r --from-checkpoint "$TMP/none.safetensors"
# a time in seconds becomes an int of milliseconds: 0 for a timeout that can never pass, and more than fits,
# are refused (1e10 s once became a negative time); inf is no number at all
expect 2 "\-\-sync-timeout wants seconds in (0, 2000000\], got '0'" bin/worker --redis "$DEAD" --run r --sync-timeout 0
expect 2 "\-\-connect-timeout wants seconds in \[0, 2000000\], got '1e10'" bin/worker --redis "$DEAD" --run r --connect-timeout 1e10
# a flag from each of bin/worker's tables (worker/main.c: session, sync, time), and of two bad ones the first
expect 2 "\-\-device-hooks wants auto, off or host, got 'gpu'" bin/worker --redis "$DEAD" --run r --device-hooks gpu
expect 2 "\-\-fragment-alpha wants a number in \[0, 1), got '1'" bin/worker --redis "$DEAD" --run r --fragment-alpha 1
expect 2 "\-\-slowdown wants a number in \[1, 1000\], got '0.5'" bin/worker --redis "$DEAD" --run r --slowdown 0.5
expect 2 "\-\-sync-every wants a positive integer, got '0'" bin/worker --redis "$DEAD" --run r --sync-every 0 --steps -1
bin/worker --help > "$TMP/help" 2>&1 || fail "worker --help: exit $?"
for f in redis redis-file run worker-id sync-every steps no-bf16 error-feedback heartbeat-interval max-sync-retries \
  sync-timeout connect-timeout dylu num-fragments fragment-alpha fragments-in-flight simulate-latency-ms trainer log \
  quiet eval-only evaluate-every final-sync step-delay-ms slowdown quad-lr device-hooks; do
  grep -q -- "^  --$f " "$TMP/help" || fail "worker --help does not show --$f"
done
expect 2 "\-\-connect-timeout wants seconds in \[0, 2000000\], got '3e7'" bin/shard-server --redis "$DEAD" --run r --connect-timeout 3e7
expect 2 "\-\-heartbeat-timeout wants seconds in \[0, 2000000\] (0 = never), got 'inf'" bin/coordinator init --redis "$DEAD" --run r --heartbeat-timeout inf
expect 2 "\-\-outer-lr wants a non-negative number, got 'inf'" bin/coordinator init --redis "$DEAD" --run r --outer-lr inf
# a mode's settings given outside it did nothing, silently, as the others were refused: refused alike
INIT="bin/coordinator init --redis $DEAD --run r --trainer quadratic --numel 10"
expect 2 "\-\-max-staleness is an async setting: add \-\-async" $INIT --max-staleness 3
expect 2 "\-\-dn-buffer-size is an async setting: add \-\-async" $INIT --dn-buffer-size 2
expect 2 "\-\-dn-variant is an async setting: add \-\-async" $INIT --dn-variant forgather
expect 2 "\-\-weight-ref-tokens goes with \-\-weight-by tokens" $INIT --async --weight-ref-tokens 10
expect 2 "\-\-dylu-base-sync-every goes with \-\-dylu" $INIT --dylu-base-sync-every 40
expect 2 "\-\-staleness-ref goes with \-\-staleness-weight" $INIT --async --staleness-ref 1
expect 2 "set-lr wants a number, got 'inf'" bin/coordinator control --redis "$DEAD" --run r set-lr inf
# the optimizer's bounds are usage errors too, as a worker count's (they were the server's refusal, exit 1)
expect 2 "set-lr wants a number > 0, got '0'" bin/coordinator control --redis "$DEAD" --run r set-lr 0
expect 2 "set-momentum wants a number in \[0, 1), got '1'" bin/coordinator control --redis "$DEAD" --run r set-momentum 1
expect 2 "set-momentum wants a number in \[0, 1), got '-0.1'" bin/coordinator control --redis "$DEAD" --run r set-momentum -0.1
expect 2 "set-max-staleness wants an integer >= 0, got '-1'" bin/coordinator control --redis "$DEAD" --run r set-max-staleness -1
# serve's flags that need another or contradict one, and control's argument counts (serve.c, control.c)
expect 2 "\-\-http wants \[HOST:\]PORT, got 'foo'" bin/coordinator serve --redis "$DEAD" --run r --http foo
expect 2 "\-\-host 5.6.7.8 contradicts \-\-http 1.2.3.4:80" bin/coordinator serve --redis "$DEAD" --run r --http 1.2.3.4:80 --host 5.6.7.8
expect 2 "\-\-save-every needs \-\-save-dir DIR" bin/coordinator serve --redis "$DEAD" --run r --save-every 3
expect 2 "\-\-host, \-\-token-file and \-\-no-dashboard need \-\-http" bin/coordinator serve --redis "$DEAD" --run r --no-dashboard
expect 2 "cannot read a token from $TMP/none: No such file or directory" bin/coordinator serve --redis "$DEAD" --run r --http 0 --token-file "$TMP/none"
: > "$TMP/empty"
expect 2 "cannot read a token from $TMP/empty: the file is empty" bin/coordinator serve --redis "$DEAD" --run r --http 0 --token-file "$TMP/empty"
# --keep without the folder it prunes was ignored without a word (serve refused --save-every alike)
expect 2 "\-\-keep needs \-\-save-dir DIR" bin/coordinator serve --redis "$DEAD" --run r --keep 3
expect 2 "\-\-keep needs \-\-dir DIR" bin/coordinator checkpoint save --redis "$DEAD" --run r --out "$TMP/x.safetensors" --keep 2
expect 2 "kick takes one argument" bin/coordinator control --redis "$DEAD" --run r kick a b
expect 2 "shutdown takes no argument" bin/coordinator control --redis "$DEAD" --run r shutdown now
expect 2 "set-nesterov wants 0 or 1" bin/coordinator control --redis "$DEAD" --run r set-nesterov 2
expect 2 "unknown option \-\-zap" bin/coordinator control --redis "$DEAD" --run r kick --zap
say "bad values and trainer flags: exit 2 before any connection"

hint="is redis-server running, and is the URL right?"
expect 1 "$hint" bin/coordinator status --redis "$DEAD" --run r
expect 1 "$hint" bin/coordinator init --redis "$DEAD" --run r --trainer quadratic --numel 10
expect 1 "$hint" bin/coordinator serve --redis "$DEAD" --run r --connect-timeout 0
expect 1 "$hint" bin/shard-server --redis "$DEAD" --run r --connect-timeout 0
expect 1 "$hint" bin/worker --redis "$DEAD" --run r --connect-timeout 0
say "Redis down, one attempt: exit 1, one line with '$hint'"
# waiting for a down Redis: SIGTERM ends it at once. The signal goes once the binary says it is retrying
# (it is then in the wait): a fixed sleep raced the start, which under load was slow before main() for
# bin/worker when it linked cuBLAS (2.3 s on a loaded 2-core machine; it opens CUDA on demand now).
for cmd in "coordinator serve" shard-server worker; do
  # emptied here, not by the redirection below: that runs in the child, so the wait could read the last
  # binary's "retrying" and signal this one before it had its handler (dash, holding the test's TERM trap
  # between fork and exec, then swallowed the signal: the worker waited its 60 s)
  : > "$TMP/wait.log"
  bin/$cmd --redis "$DEAD" --run r > "$TMP/wait.log" 2>&1 &
  p=$!; PIDS="$PIDS $p"
  wait_until 20 'grep -q "retrying for up to" "$TMP/wait.log"' "$cmd to say it waits for Redis"
  kill -TERM $p
  wait_until 3 '! alive $p' "$cmd to stop on SIGTERM while it waits for Redis"
  wait $p; rc=$?
  [ $rc -le 1 ] || fail "$cmd waiting for Redis: SIGTERM gave exit $rc (killed, not stopped)"
  grep -q "ERROR" "$TMP/wait.log" && fail "$cmd waiting for Redis: a stop asked for, logged as an error: $(grep ERROR "$TMP/wait.log")"
done
say "SIGTERM while waiting for a down Redis: each binary stops itself at once, without an ERROR line"

# serve started before its run exists waits for it, saying so once, not every second (nor a summary of the
# missing run every --print-every, which it printed without the log's timestamp): first with no function
# library in Redis, then with the library of another run. Its HTTP API answers 404 for the missing run
# either way, on every endpoint that reads or changes it: JSON on /status and /control, text on /metrics
# (/metrics answered 503, and /control 502 "ERR Function not found" before the library was there).
start_redis
HP=$(free_port)
bin/coordinator serve --redis "$URL" --run later --print-every 1 --http "127.0.0.1:$HP" > "$TMP/serve.log" 2>&1 &
p=$!; PIDS="$PIDS $p"
http_404s() { # WHEN
  c=$(curl -s -o "$TMP/b" -w '%{http_code} %{content_type}' "http://127.0.0.1:$HP/status")
  [ "$c" = "404 application/json" ] || fail "$1: GET /status answered $c: $(cat "$TMP/b")"
  c=$(curl -s -o "$TMP/b" -w '%{http_code} %{content_type}' "http://127.0.0.1:$HP/metrics")
  [ "$c" = "404 text/plain; charset=utf-8" ] || fail "$1: GET /metrics answered $c: $(cat "$TMP/b")"
  c=$(curl -s -o "$TMP/b" -w '%{http_code} %{content_type}' -X POST "http://127.0.0.1:$HP/control/shutdown")
  [ "$c" = "404 application/json" ] || fail "$1: POST /control/shutdown answered $c: $(cat "$TMP/b")"
  grep -q "coordinator init --run later" "$TMP/b" || fail "$1: the 404 of /control/shutdown does not say what to do: $(cat "$TMP/b")"
}
wait_until 10 "curl -s -o /dev/null http://127.0.0.1:$HP/status" "serve's HTTP"
http_404s "no function library"
sleep 2.5
bin/coordinator init --redis "$URL" --run other --trainer quadratic --numel 10 > /dev/null || fail "init other"
http_404s "the library of another run"
sleep 2.5
alive $p || fail "serve without its run exited: $(cat "$TMP/serve.log")"
n=$(grep -c "WARN run 'later' does not exist in this Redis yet (.*): waiting for it to be made (\`coordinator init --run later\`), serving meanwhile" "$TMP/serve.log")
[ "$n" = 1 ] || fail "serve said it waits for the run $n times in 5 s: $(head -n 8 "$TMP/serve.log")"
grep -v '^[0-9-]*T[0-9:.]*Z coordinator\[[0-9]*\] ' "$TMP/serve.log" | grep -vx "http://127.0.0.1:$HP/dashboard" &&
  fail "serve printed lines without its log's prefix (above; the one line of its URL aside)"
bin/coordinator init --redis "$URL" --run later --trainer quadratic --numel 10 > /dev/null || fail "init"
wait_until 10 "grep -q 'INFO run later: status ' '$TMP/serve.log'" "serve's summary of the run once made"
kill -TERM $p; wait $p || fail "serve exit status $?"
say "serve before its run: one line saying coordinator init creates it, then serves it"

# settings a run accepts that make it learn almost nothing: init warns (and still creates the run)
bin/coordinator init --redis "$URL" --run lr --trainer quadratic --numel 10 --outer-lr 1e6 > "$TMP/lr.log" 2>&1 || fail "init --outer-lr 1e6"
grep -q "warning: --outer-lr 1e+06 is far above DiLoCo's 0.7 .*use 0.7 to 2" "$TMP/lr.log" || fail "--outer-lr 1e6: no warning: $(cat "$TMP/lr.log")"
bin/coordinator init --redis "$URL" --run dn --trainer quadratic --numel 10 --async --workers 4 --dn-buffer-size 100 > "$TMP/dn.log" 2>&1 ||
  fail "init --dn-buffer-size 100"
grep -q "warning: --dn-buffer-size 100 with --workers 4: .* moves them 4/100 of a sync round's step .*use --dn-buffer-size 4" "$TMP/dn.log" ||
  fail "--dn-buffer-size 100 with 4 workers: no warning: $(cat "$TMP/dn.log")"
bin/coordinator init --redis "$URL" --run dn0 --trainer quadratic --numel 10 --async --workers 6 --dn-buffer-size 0 > "$TMP/dn0.log" 2>&1 ||
  fail "init --dn-buffer-size 0"
grep -q "warning: --dn-buffer-size 0 with --workers 6: .*about 6 times a sync round's step .*use --outer-lr 0.117" "$TMP/dn0.log" ||
  fail "--dn-buffer-size 0 with 6 workers: no warning: $(cat "$TMP/dn0.log")"
bin/coordinator init --redis "$URL" --run dn0lr --trainer quadratic --numel 10 --async --workers 6 --dn-buffer-size 0 \
  --outer-lr 0.117 > "$TMP/dn0lr.log" 2>&1 || fail "init --dn-buffer-size 0 --outer-lr 0.117"
grep -q "warning" "$TMP/dn0lr.log" && fail "--dn-buffer-size 0 with an outer lr given warned: $(cat "$TMP/dn0lr.log")"
bin/coordinator init --redis "$URL" --run ms --trainer quadratic --numel 10 --async --workers 6 --max-staleness 1 > "$TMP/ms.log" 2>&1 ||
  fail "init --max-staleness 1"
grep -q "warning: --max-staleness 1 with --workers 6: .*about 5 versions stale.*use --max-staleness 5 or more (0: no limit)" "$TMP/ms.log" ||
  fail "--max-staleness 1 with 6 workers: no warning: $(cat "$TMP/ms.log")"
bin/coordinator init --redis "$URL" --run tk --trainer quadratic --numel 10 --compress topk --topk-density 0.0001 > "$TMP/tk.log" 2>&1 ||
  fail "init --topk-density 0.0001"
grep -q "warning: --topk-density 0.0001 keeps 0.4096 of each chunk of 4096 entries, which rounds to none: .*use --topk-density 0.000244 or more" "$TMP/tk.log" ||
  fail "--topk-density 0.0001: no warning: $(cat "$TMP/tk.log")"
# the summary states what is sent (1 entry of each chunk), not the density asked for
grep -q "each worker sends 1 of every 4096 entries (density 0.000244)" "$TMP/tk.log" ||
  fail "--topk-density 0.0001: the summary does not say the effective density: $(grep 'top-k' "$TMP/tk.log")"
bin/coordinator init --redis "$URL" --run hb0 --trainer quadratic --numel 10 --heartbeat-timeout 0 > "$TMP/hb0.log" 2>&1 || fail "init --heartbeat-timeout 0"
grep -q "warning: --heartbeat-timeout 0 never evicts a worker: .*every sync round waits for it for ever" "$TMP/hb0.log" ||
  fail "--heartbeat-timeout 0: no warning: $(cat "$TMP/hb0.log")"
# an async run too: a dead submitter's places hold up its shards until it is evicted, never with no timeout
bin/coordinator init --redis "$URL" --run hb0a --trainer quadratic --numel 10 --async --heartbeat-timeout 0 > "$TMP/hb0a.log" 2>&1 ||
  fail "init --async --heartbeat-timeout 0"
grep -q "warning: --heartbeat-timeout 0 never evicts a worker: .*holds up the order of its shards for ever" "$TMP/hb0a.log" ||
  fail "--async --heartbeat-timeout 0: no warning: $(cat "$TMP/hb0a.log")"
bin/coordinator init --redis "$URL" --run dnok --trainer quadratic --numel 10 --async --workers 4 --outer-lr 2 > "$TMP/dnok.log" 2>&1 || fail "init"
grep -q "warning" "$TMP/dnok.log" && fail "the defaults warned: $(cat "$TMP/dnok.log")"
say "init warns about --outer-lr 1e6, a Delayed Nesterov buffer of 100 for 4 workers and a staleness limit of 1 for 6, a top-k density of less than one entry a chunk, a sync run that never evicts, not about the defaults"

# a heartbeat no more often than the run's timeout: evicted between beats, every round lost: refused at open,
# nothing registered; above half the timeout: a warning
init_run hb --trainer quadratic --numel 10 --workers 1 --heartbeat-timeout 1
bin/worker --redis "$URL" --run hb --heartbeat-interval 3 --steps 2 --sync-every 2 > "$TMP/hb.log" 2>&1 && fail "--heartbeat-interval 3 joined a run of timeout 1 s"
grep -q "heartbeat-interval 3 s (diloco_options.heartbeat_interval_ms 3000): run 'hb' evicts a worker silent for 1 s .*use a --heartbeat-interval of 0.25 s or less" "$TMP/hb.log" ||
  fail "--heartbeat-interval 3, timeout 1: no clear error: $(cat "$TMP/hb.log")"
[ "$($RCLI HLEN 'dl:{hb}:workers')" = 0 ] || fail "the refused worker registered"
bin/worker --redis "$URL" --run hb --heartbeat-interval 0.7 --steps 0 --sync-every 2 > "$TMP/hbw.log" 2>&1 &
p=$!; PIDS="$PIDS $p"
wait_until 10 "grep -q 'heartbeat-interval 0.7 s (diloco_options.heartbeat_interval_ms) is more than half of run .hb..s heartbeat timeout of 1 s' \"\$TMP/hbw.log\"" \
  "the warning of a heartbeat above half the timeout"
kill -TERM $p; wait $p
bin/worker --redis "$URL" --run hb --heartbeat-interval 0 --steps 0 --sync-every 2 > "$TMP/hb0w.log" 2>&1 &
p=$!; PIDS="$PIDS $p"
wait_until 10 "grep -q 'heartbeat-interval 0 (diloco_options.heartbeat_interval_ms): this worker sends no heartbeats, and run .hb. evicts a worker silent for 1 s' \"\$TMP/hb0w.log\"" \
  "the warning of no heartbeats in a run that evicts"
# the warning is advice, no test anecdote (it ended with "(the quadratic, syncs 1.2 s apart, ...)")
grep "this worker sends no heartbeats" "$TMP/hb0w.log" | grep -q "its round lost; beat every 0.25 s or less$" ||
  fail "the warning of no heartbeats: $(grep 'sends no heartbeats' "$TMP/hb0w.log")"
kill -TERM $p; wait $p
say "a heartbeat interval of 3 s in a run of timeout 1 s: refused, nothing registered; 0.7 s and 0 (none): warned"

# a worker whose run has no shard-server up says so within seconds (not only at --sync-timeout), then
# trains once one starts
RUN=solo
init_run $RUN --trainer quadratic --numel 10 --workers 1 --shards 2
start_worker w1 --steps 4 --sync-every 2
wait_until 10 'grep -q "still trying after 5 s (shard [01] has no live owner yet: is a shard-server of this run up?)" "$TMP/worker-w1.log"' \
  "the worker to say that no shard-server is up"
start_server s1
wait_workers w1
# and says once that the wait is over (its last WARN stayed the last word about it while rounds went on)
[ "$(grep -c "of shard [01]: went through after [0-9]* s (the wait logged above is over)" "$TMP/worker-w1.log")" = 1 ] ||
  fail "the worker did not say once that its wait was over: $(grep -E 'still trying|went through' "$TMP/worker-w1.log")"
say "no shard-server: the worker said so after 5 s, and trained once one started, saying its wait was over"
