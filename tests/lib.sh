# tests/lib.sh: shared harness of the integration tests (tests/it_*.sh), sourced, POSIX sh.
#
# Starts a real redis-server on a free loopback port, shard-servers and workers as background
# processes with their logs in one temporary folder, and cleans everything up on exit (even on
# failure or interrupt). Helpers:
#   start_redis                          sets PORT, URL, RCLI ("$REDIS_CLI -p PORT")
#   start_redis_cluster [REPLICAS]       a 3-master Redis Cluster instead (REPLICAS per master, default 0;
#                                        with replicas, node timeout 2 s): CLUSTER_PORTS (every node), PORT
#                                        (the first), URL (its node), RCLI ("redis-cli -c -p PORT")
#   init_run RUN [coordinator init flags]
#   start_sentinel SPORT [LINE...]       a Redis Sentinel on SPORT watching $PORT as master m (quorum 1)
#   start_server NAME [flags]            bin/shard-server; its pid in SRV_<NAME>
#   start_worker NAME [flags]            $WORKER (bin/worker) --worker-id NAME; pid in WRK_<NAME>, log NAME.jsonl
#   wait_until SECONDS 'shell condition' [message [POLL]]
#   pick_ports VAR...                    distinct free loopback ports into VARs (free_port: one)
#   fail MESSAGE                         prints the tails of every log, exits 1
#   shard_digests RUN                    "shard k digest" lines from dl:{RUN}:shards
#   drop_proxy NAME UPSTREAM_PORT ARGS   tests/tools/drop_proxy.py in front of Redis or a shard-server
#   need_torch, need_cuda_backend,       exit 77 (skipped) with the reason when what the test needs is missing
#   need_browser
# The Python tests run $PYTHON: Debian's /usr/bin/python3 (with python3-torch) unless the environment says
# otherwise, e.g. PYTHON=$(command -v python3) on a GPU machine whose own python3 has a CUDA torch
# (tools/gpu_check.sh).
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
TMP=$(mktemp -d /tmp/dltest.XXXXXX)
PIDS=""
# REDIS_CLI: redis-cli's output and exit status for one command at a third of its start-up cost (the tests
# make some 5,400 calls a suite; tests/tools/rcli.c, checked against redis-cli by it_rcli.sh). Anything else
# it hands to redis-cli. $RCLI of a Cluster stays redis-cli -c (rcli would hand each call on).
REDIS_CLI=$ROOT/build/tests/tools/rcli
PORT=""
CLUSTER_PORTS=""

# need_torch: exits 77 (skipped) with the reason when $PYTHON cannot import torch and numpy
need_torch() {
  $PYTHON -c 'import torch, numpy' 2>/dev/null && return 0
  echo "SKIP: $PYTHON cannot import torch and numpy (Debian: apt-get install python3-torch python3-numpy; or set PYTHON to a python3 that has them)"
  exit 77
}

# need_browser: exits 77 (skipped) with the reason unless node, Debian's chromium ($CHROMIUM, /usr/bin/chromium)
# and playwright-core (tests/browser/node_modules, installed here by `npm ci` from its package-lock.json when
# npm can) are there; sets CHROMIUM. For the tests that drive the dashboard in a real browser.
need_browser() {
  command -v node >/dev/null 2>&1 || { echo "SKIP: node is not installed (Debian: nodejs npm)"; exit 77; }
  CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
  [ -x "$CHROMIUM" ] || { echo "SKIP: $CHROMIUM is not installed (Debian: chromium)"; exit 77; }
  [ -f tests/browser/node_modules/playwright-core/package.json ] && return 0
  command -v npm >/dev/null 2>&1 || { echo "SKIP: npm is not installed (Debian: npm)"; exit 77; }
  echo "installing playwright-core (npm ci in tests/browser)"
  (cd tests/browser && timeout 180 npm ci --no-audit --no-fund --loglevel=error) >/dev/null 2>&1 ||
    { echo "SKIP: cannot install playwright-core with npm (offline?)"; exit 77; }
  [ -f tests/browser/node_modules/playwright-core/package.json ] ||
    { echo "SKIP: playwright-core did not install"; exit 77; }
}

# A test that failed (any exit but 0 and 77, a timeout's TERM included) leaves its processes' logs in
# build/test-logs/NAME.logs/ (the last failure's), beside the test's own log: fail() shows only their tails,
# and a rare failure (a stall in a crash storm) is understood from the whole logs or not at all.
keep_failed_logs() {
  _keep="$ROOT/build/test-logs/$(basename "$0" .sh).logs"
  rm -rf "$_keep" && mkdir -p "$_keep" || return
  find "$TMP" -maxdepth 2 -type f \( -name '*.log' -o -name '*.jsonl' -o -name '*.out' -o -name '*.err' -o -name '*.rdb' \) \
    -size -20M -exec cp {} "$_keep/" \; 2>/dev/null
  echo "the processes' logs are kept in $_keep"
}

cleanup() {
  _rc=$?
  for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
  for p in ${CLUSTER_PORTS:-$PORT}; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1; done
  [ "$_rc" -ne 0 ] && [ "$_rc" -ne 77 ] && keep_failed_logs
  if [ -n "${KEEP_TMP:-}" ]; then echo "logs kept in $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { echo "[$(date +%H:%M:%S)] $*"; }

fail() {
  echo "FAIL: $*"
  for f in "$TMP"/*.log; do [ -f "$f" ] || continue; echo "--- $f"; tail -n 25 "$f"; done
  exit 1
}

# free_ports N: N distinct free loopback ports, each socket held until all are picked (ports picked one by
# one, each closed before the next, repeat: 15 of 20000 sets of 5 had a port twice here)
free_ports() {
  python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}
free_port() { free_ports 1; }
# pick_ports VAR...: sets each VAR to one of distinct free ports (the ports of one setup: none is bound
# before all are picked)
pick_ports() {
  _ports=$(free_ports $#)
  for _var; do eval "$_var=\${_ports%% *}"; _ports=${_ports#* }; done
}

# start_redis: the Redis that answers must be ours (its pid in our pid file). A port taken by someone else
# between free_port and the bind (another test's Redis, say) makes our daemonized redis-server exit ("Address
# already in use": no pid file) while the port's owner answers PING; we would run in it, and our cleanup
# would shut it down. Then another port.
start_redis() {
  for _try in 1 2 3 4 5; do
    PORT=$(free_port)
    URL="redis://127.0.0.1:$PORT"
    RCLI="$REDIS_CLI -p $PORT"
    rm -f "$TMP/redis.pid"
    redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir "$TMP" \
      --logfile "$TMP/redis.log" --pidfile "$TMP/redis.pid" "$@" >/dev/null || fail "redis-server did not start"
    for _ in $(seq 50); do
      [ -s "$TMP/redis.pid" ] &&
        [ "$($RCLI info server 2>/dev/null | sed -n 's/^process_id:\([0-9]*\).*/\1/p')" = "$(cat "$TMP/redis.pid")" ] && return 0
      grep -q 'Address already in use' "$TMP/redis.log" 2>/dev/null && break
      sleep 0.1
    done
    grep -q 'Address already in use' "$TMP/redis.log" 2>/dev/null || fail "redis-server did not answer PING"
    mv "$TMP/redis.log" "$TMP/redis-port-$PORT-taken.log"
    say "port $PORT was taken before redis-server could bind it; another port"
  done
  fail "redis-server found its port taken 5 times"
}

start_redis_cluster() {
  replicas=${1:-0}; nodes=$((3 * (1 + replicas)))
  ports=$(free_ports $((2 * nodes)))
  set -- $ports
  CLUSTER_PORTS=""; i=0
  while [ $i -lt $nodes ]; do CLUSTER_PORTS="$CLUSTER_PORTS $1"; shift; i=$((i + 1)); done
  CLUSTER_PORTS=${CLUSTER_PORTS# }; PORT=${CLUSTER_PORTS%% *}
  URL="redis://127.0.0.1:$PORT"
  RCLI="redis-cli -c -p $PORT"
  timeout_ms=15000; [ "$replicas" -gt 0 ] && timeout_ms=2000
  addrs=""
  for p in $CLUSTER_PORTS; do
    bus=$1; shift
    mkdir -p "$TMP/node-$p"
    echo "--port $p --cluster-port $bus --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --cluster-enabled yes --cluster-config-file $TMP/node-$p/nodes.conf --cluster-node-timeout $timeout_ms --dir $TMP/node-$p --logfile $TMP/redis-$p.log --pidfile $TMP/node-$p/redis.pid" > "$TMP/node-$p/args"
    eval redis-server $(cat "$TMP/node-$p/args") >/dev/null || fail "redis-server $p did not start"
    addrs="$addrs 127.0.0.1:$p"
  done
  for p in $CLUSTER_PORTS; do
    for _ in $(seq 50); do $REDIS_CLI -p "$p" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
  done
  redis-cli --cluster create $addrs --cluster-replicas "$replicas" --cluster-yes > "$TMP/cluster-create.txt" 2>&1 \
    || fail "redis-cli --cluster create: $(tail -n 5 "$TMP/cluster-create.txt")"
  for p in $CLUSTER_PORTS; do
    wait_until 30 "$REDIS_CLI -p $p cluster info | grep -q '^cluster_state:ok'" "cluster_state:ok on node $p"
  done
}

# cluster_nodes_with PATTERN: how many masters hold a key matching PATTERN
cluster_nodes_with() {
  n=0
  for p in $CLUSTER_PORTS; do [ -n "$(redis-cli -p "$p" --scan --pattern "$1" | head -n 1)" ] && n=$((n + 1)); done
  echo $n
}

# Slot migration by hand (what redis-cli --cluster reshard does), to test MOVED and ASK:
#   cluster_migrate_start KEY   the slot of KEY from its master to the next one: sets MIG_SLOT MIG_SRC MIG_DST;
#                               from now on the source answers ASK for keys it does not have
#   cluster_migrate_keys [N]    move N (default all) of the slot's keys to the destination
#   cluster_migrate_finish      move the rest, assign the slot to the destination (MOVED from then on)
cluster_slot_port() { # SLOT -> port of the master that serves it
  for p in $CLUSTER_PORTS; do
    $REDIS_CLI -p "$p" cluster nodes | awk -v s="$1" '/myself/ {for (i = 9; i <= NF; i++) if ($i !~ /^\[/) {
      if (split($i, r, "-") == 1) r[2] = r[1]; if (s + 0 >= r[1] + 0 && s + 0 <= r[2] + 0) f = 1 }} END {exit !f}' \
      && { echo "$p"; return 0; }
  done
  fail "no master serves slot $1"
}
cluster_migrate_start() {
  MIG_SLOT=$($REDIS_CLI -p "$PORT" cluster keyslot "$1")
  MIG_SRC=$(cluster_slot_port "$MIG_SLOT") || fail "no master serves slot $MIG_SLOT"
  set -- $CLUSTER_PORTS $CLUSTER_PORTS
  while [ "$1" != "$MIG_SRC" ]; do shift; done
  MIG_DST=$2
  $REDIS_CLI -p "$MIG_DST" cluster setslot "$MIG_SLOT" importing "$($REDIS_CLI -p "$MIG_SRC" cluster myid)" | grep -q OK \
    || fail "setslot importing"
  $REDIS_CLI -p "$MIG_SRC" cluster setslot "$MIG_SLOT" migrating "$($REDIS_CLI -p "$MIG_DST" cluster myid)" | grep -q OK \
    || fail "setslot migrating"
}
cluster_migrate_keys() {
  for k in $($REDIS_CLI -p "$MIG_SRC" cluster getkeysinslot "$MIG_SLOT" "${1:-100000}"); do
    $REDIS_CLI -p "$MIG_SRC" migrate 127.0.0.1 "$MIG_DST" "$k" 0 10000 | grep -q 'OK\|NOKEY' || fail "migrate $k"
  done
}
cluster_migrate_finish() {
  cluster_migrate_keys
  id=$($REDIS_CLI -p "$MIG_DST" cluster myid)
  for p in $MIG_DST $MIG_SRC $CLUSTER_PORTS; do $REDIS_CLI -p "$p" cluster setslot "$MIG_SLOT" node "$id" > /dev/null; done
}

# start_sentinel SPORT [CONFIG LINE...]: a Redis Sentinel on loopback port SPORT watching this test's Redis
# ($PORT) as master `m` with quorum 1, plus the config lines given; its log sentinel.log, killed on exit.
start_sentinel() {
  _sp=$1; shift
  { printf 'port %s\nbind 127.0.0.1\ndaemonize yes\nlogfile %s\npidfile %s\ndir %s\n' "$_sp" "$TMP/sentinel.log" \
      "$TMP/sentinel.pid" "$TMP"
    echo "sentinel monitor m 127.0.0.1 $PORT 1"
    for _l in "$@"; do echo "$_l"; done; } > "$TMP/sentinel.conf"
  redis-server "$TMP/sentinel.conf" --sentinel > /dev/null || fail "redis-sentinel did not start"
  wait_until 10 "[ -s '$TMP/sentinel.pid' ]" "the Sentinel to write its pid file"
  PIDS="$PIDS $(cat "$TMP/sentinel.pid")"
}

init_run() {
  run=$1; shift
  bin/coordinator init --redis "$URL" --run "$run" "$@" > "$TMP/init-$run.log" 2>&1 || fail "coordinator init $*"
}

start_server() {
  name=$1; shift
  bin/shard-server --redis "$URL" --run "$RUN" --id "$name" "$@" > "$TMP/server-$name.log" 2>&1 &
  pid=$!
  PIDS="$PIDS $pid"
  eval "SRV_$name=$pid"
}

start_worker() {
  name=$1; shift
  ${WORKER:-bin/worker} --redis "$URL" --run "$RUN" --worker-id "$name" --quiet --log "$TMP/$name.jsonl" "$@" \
    > "$TMP/worker-$name.log" 2>&1 &
  pid=$!
  PIDS="$PIDS $pid"
  eval "WRK_$name=$pid"
}

# wait_workers NAME...: wait for the workers start_worker started; fail if one exited with an error.
wait_workers() {
  for _w in "$@"; do
    eval "_pid=\$WRK_$_w"
    wait "$_pid" || fail "worker $_w of run $RUN exited with status $?"
  done
}

# worker_exits_1 NAME PATTERN WHY: wait (30 s) for worker NAME (start_worker) to exit on its own; fail unless it
# exited non-zero (a supervisor's restart must see the end as an error) with PATTERN (grep) in its log. WHY says
# why it should stop.
worker_exits_1() {
  eval "_pid=\$WRK_$1"
  wait_until 30 "! alive $_pid" "$1 to stop: $3"
  wait "$_pid" && fail "$1 exited 0 ($3): it should exit 1"
  grep -q "$2" "$TMP/worker-$1.log" || fail "$1 did not say why it stopped: $(grep -E 'WARN|ERROR' "$TMP/worker-$1.log" | tail -n 4)"
}

# now_cs: NOW_CS = the time since boot in hundredths of a second, read by the shell itself (/proc/uptime:
# "12345.67 ..."; `date` would cost a process at each of wait_until's polls, some 2,000 a suite). The "1"
# before the hundredths keeps "09" from reading as octal.
now_cs() {
  read -r _up _ < /proc/uptime
  NOW_CS=$(( ${_up%.*} * 100 + 1${_up#*.} - 100 ))
}

# (the deadline in hundredths: in whole seconds, a wait of N s started late in a second ended after N - 1 s
# and a bit)
# POLL (default 0.2 s): for a test that must act within a fraction of a second of the condition
wait_until() {
  limit=$1; cond=$2; what=${3:-$2}; poll=${4:-0.2}
  now_cs; end=$(( NOW_CS + limit * 100 ))
  while ! eval "$cond"; do
    now_cs; [ "$NOW_CS" -ge "$end" ] && fail "timed out after ${limit}s waiting for: $what"
    sleep "$poll"
  done
}

# dylu_h WORKER: the H the DyLU of run $RUN assigned WORKER (dl_status; 0 when none yet)
dylu_h() {
  $RCLI FCALL dl_status 1 "dl:{$RUN}:config" | python3 -c "
import json, sys
d = json.load(sys.stdin)
print({w['id']: w.get('h', 0) for w in d['workers']}.get('$1', 0))"
}

# near X WANT: whether X is within 20% of WANT
near() { awk -v x="$1" -v want="$2" 'BEGIN { exit !(x >= want * 0.8 && x <= want * 1.2) }'; }

# Is the process alive (and not a zombie)? (its State line read by the shell: the storms and waits ask this
# some 800 times a suite, and a grep is a process)
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  { while IFS= read -r _st; do
      case $_st in State:*Z*) return 1 ;; State:*) return 0 ;; esac
    done < "/proc/$1/status"; } 2>/dev/null
  return 0
}

# term_and_time PID WHAT: SIGTERM to PID, then wait (up to 90 s) until it exited; TERM_SECS = the seconds
# that took, two decimals (a variable, not output: a failed wait must end the test, not a subshell)
term_and_time() {
  _t0=$(date +%s.%N)
  kill -TERM "$1"
  wait_until 90 "! alive $1" "$2"
  TERM_SECS=$(awk -v a="$(date +%s.%N)" -v b="$_t0" 'BEGIN { printf "%.2f", a - b }')
}

# prepare_bible: the King James Bible as byte tokens in build/kjv.tok (exits 77 without the bible command)
prepare_bible() {
  [ -s build/kjv.tok ] && return 0 # (made here, or carried to a machine without the bible: tools/gpu_pack.sh)
  command -v bible >/dev/null 2>&1 || { echo "SKIP: the bible command is missing (apt-get install bible-kjv bible-kjv-text)"; exit 77; }
  # (a temporary file of our own: two tests that prepare at once must not write into one file)
  bible 'Gen1:1-Rev22:21' > build/kjv.txt.$$ && mv -f build/kjv.txt.$$ build/kjv.txt || fail "bible dump"
  bin/worker prepare-data --input build/kjv.txt --output build/kjv.tok > /dev/null || fail "prepare-data"
}

# assert_matches_reference: the run's shard digests equal those of tests/tools/ref_quadratic for workers
# REF_WORKERS (default w1,w2,w3; RUN, NUMEL, SEED, ROUNDS, H; REF_SHARDS shards, default 8), and
# dl:{R}:events shows every shard committed exactly once per round. Sets REF_DIGEST, the reference's digest
# of the whole parameter vector. REF_ARGS: more reference flags (e.g. --codec int8).
assert_matches_reference() {
  _ref_shards=${REF_SHARDS:-8}
  build/tests/tools/ref_quadratic --numel $NUMEL --shards $_ref_shards --seed $SEED --workers ${REF_WORKERS:-w1,w2,w3} \
    --rounds $ROUNDS --sync-every $H ${REF_ARGS:-} --bounds "$($RCLI HGET "dl:{$RUN}:config" shard_bounds)" \
    > "$TMP/ref.txt" || fail "reference"
  shard_digests $RUN > "$TMP/got.txt"
  grep '^shard' "$TMP/ref.txt" | diff - "$TMP/got.txt" > "$TMP/diff.txt" || fail "shard digests differ: $(cat "$TMP/diff.txt")"
  REF_DIGEST=$(awk '/^all/ {print $2}' "$TMP/ref.txt")
  commits=$($RCLI XRANGE "dl:{$RUN}:events" - + | grep -c '^commit$')
  [ "$commits" -eq $((_ref_shards * ROUNDS)) ] ||
    fail "expected $((_ref_shards * ROUNDS)) commits (each round once per shard), saw $commits"
}

# assert_dump_matches_reference OUT: the shard digests in a chaos harness dump (OUT/redis_dump.json)
# equal those of tests/tools/ref_quadratic for workers w1,w2,w3 (NUMEL, SHARDS, SEED, ROUNDS, H; a Streaming
# run's reference is its fragment schedule over ROUNDS * H steps, alpha 0).
assert_dump_matches_reference() {
  python3 - "$1" > "$TMP/got.txt" <<'PY' || fail "reading $1/redis_dump.json"
import json, sys
d = json.load(open(sys.argv[1] + "/redis_dump.json"))
for k in range(int(d["config"]["shards"])):
    print("shard %d %s" % (k, d["shards"]["%d:digest" % k]))
PY
  _conf() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"].get(sys.argv[2], ""))' "$1/redis_dump.json" "$2"; }
  bounds=$(_conf "$1" shard_bounds)
  schedule="--rounds $ROUNDS"
  [ "$(_conf "$1" fragments)" -gt 1 ] 2>/dev/null &&
    schedule="--steps $((ROUNDS * H)) --alpha 0 --frag-bounds $(_conf "$1" frag_bounds)"
  build/tests/tools/ref_quadratic --numel $NUMEL --shards $SHARDS --seed $SEED --workers w1,w2,w3 $schedule \
    --sync-every $H --bounds "$bounds" > "$TMP/ref.txt" || fail "reference"
  grep '^shard' "$TMP/ref.txt" | diff - "$TMP/got.txt" > "$TMP/diff.txt" ||
    fail "shard digests differ from the fault-free reference: $(cat "$TMP/diff.txt")"
}

# assert_workers_end_at DIGEST: the last sync of each of REF_WORKERS (default w1,w2,w3) reported that digest
# of the whole vector.
assert_workers_end_at() {
  for w in $(echo "${REF_WORKERS:-w1,w2,w3}" | tr , ' '); do
    got=$(grep '"event":"sync"' "$TMP/$w.jsonl" | tail -n 1 | sed 's/.*"digest":"\([0-9a-f]*\)".*/\1/')
    [ "$got" = "$1" ] || fail "worker $w ends with digest $got, reference $1"
  done
}

# stream_reference RUN D OUT [ref_quadratic args...]: the in-process reference of Streaming run RUN (NUMEL,
# SEED, H, STEPS, workers REF_WORKERS or w1,w2,w3, the run's shard and fragment bounds) with D fragments in
# flight, its lines into OUT.
stream_reference() {
  _run=$1; _d=$2; _out=$3; shift 3
  build/tests/tools/ref_quadratic --numel $NUMEL --shards "$($RCLI HGET "dl:{$_run}:config" shards)" --seed $SEED \
    --workers ${REF_WORKERS:-w1,w2,w3} --sync-every $H --steps $STEPS --in-flight $_d "$@" \
    --bounds "$($RCLI HGET "dl:{$_run}:config" shard_bounds)" \
    --frag-bounds "$($RCLI HGET "dl:{$_run}:config" frag_bounds)" > "$_out" || fail "reference"
}
# stream_evict_run RUN: the Streaming run of the eviction tests (2 fragments of one shard each, 3 workers
# of which 2 close a round, heartbeat timeout 0.8 s) and its shard-server; round F: its open round of F.
stream_evict_run() {
  init_run $1 --trainer quadratic --numel 4000 --shards 2 --fragments 2 --workers 3 --min-workers 2 --seed 3 \
    --heartbeat-timeout 0.8
  start_server s1 --lease-ttl-ms 2000
}
round() { $RCLI HGET "dl:{$RUN}:state" round:$1; }
# at_barrier W: W's arrival is in the open barrier of $RUN's fragment 0 (it waits there for the others)
at_barrier() { [ "$($RCLI HEXISTS "dl:{$RUN}:f0:r$(round 0)" "a:$1")" = 1 ]; }
# assert_back_in_both RUN W: W's latest incarnation took part in a round of fragment 0 and of fragment 1.
assert_back_in_both() {
  _inc=$($RCLI XRANGE "dl:{$1}:events" - + | awk -v who="$2" '/^join$/ {j = 1; next} j && /^worker$/ {getline; w = $0; next}
    j && /^inc$/ {getline; if (w == who) last = $0; j = 0} END {print last}')
  for _f in 0 1; do
    _in=$(rounds_with $1 $_f "$2:$_inc")
    [ "$_in" -ge 1 ] || fail "$2's incarnation $_inc took part in no round of fragment $_f"
    say "fragment $_f: $2's incarnation $_inc took part in $_in of its $($RCLI HGET "dl:{$1}:state" round:$_f) rounds"
  done
}
shard_digests() {
  n=$($RCLI HGET "dl:{$1}:config" shards)
  k=0
  while [ "$k" -lt "$n" ]; do
    echo "shard $k $($RCLI HGET "dl:{$1}:shards" "$k:digest")"
    k=$((k + 1))
  done
}
# quad_ref RUN WORKERS [ref_quadratic flags]: RUN's shard digests equal those of tests/tools/ref_quadratic for
# single workers WORKERS (NUMEL, SEED, H, 8 shards, the run's shard bounds; the flags say the rounds or steps
# and the mode); REF takes the reference's digest of the whole vector.
quad_ref() {
  _run=$1; _workers=$2; shift 2
  build/tests/tools/ref_quadratic --numel $NUMEL --shards 8 --seed $SEED --workers $_workers --sync-every $H "$@" \
    --bounds "$($RCLI HGET "dl:{$_run}:config" shard_bounds)" > "$TMP/ref-$_run.txt" || fail "reference of $_run"
  shard_digests $_run > "$TMP/got-$_run.txt"
  grep '^shard' "$TMP/ref-$_run.txt" | diff - "$TMP/got-$_run.txt" > "$TMP/diff.txt" \
    || fail "$_run: shard digests differ from the reference of single workers $_workers: $(cat "$TMP/diff.txt")"
  REF=$(awk '/^all/ {print $2}' "$TMP/ref-$_run.txt")
}

# sharded_pairs MODE...: for each MODE (bf16, fp32, int3: --compress int3 --download update, stream: 2
# fragments), the runs A<MODE> and B<MODE> of tests/python/group_sharded.py's model, a server each: A for a
# sharded group g1 beside a single worker g2, B for the single workers g1 and g2. sharded_flag MODE: the
# member flag of that mode for group_sharded.py run. sharded_same MODE WHAT [VERSIONS]: every member of the
# pair exited 0, A ends on B's shard digests, and A's g1 ranks, A's g2 and B's g1 reported the same (version,
# shards digest) pairs as B's g2, at least VERSIONS of them (default 1); WHAT names the group in messages.
sharded_pairs() {
  for _mode in "$@"; do
    _extra=""
    case $_mode in int3) _extra="--flag compress=int3 --flag download=update" ;; stream) _extra="--flag fragments=2" ;; esac
    for _side in A B; do
      $PYTHON tests/python/group_sharded.py init "$URL" $_side$_mode $_extra > "$TMP/init-$_side$_mode.log" 2>&1 ||
        fail "init $_side$_mode: $(cat "$TMP/init-$_side$_mode.log")"
      RUN=$_side$_mode start_server s$_side$_mode --lease-ttl-ms 2000
    done
  done
}
sharded_flag() { case $1 in fp32) echo :fp32 ;; int3) echo :ef ;; stream) echo :stream ;; esac; }
sharded_same() {
  for _m in A$1-g1 A$1-g2 B$1-g1 B$1-g2; do
    [ "$(cat "$TMP/$_m.exit" 2>/dev/null)" = 0 ] || fail "$_m failed: $(cat "$TMP/$_m".rank* | tail -n 5; tail -n 20 "$TMP/launcher.log")"
  done
  shard_digests A$1 > "$TMP/got-$1.txt"
  shard_digests B$1 > "$TMP/ref-$1.txt"
  diff "$TMP/ref-$1.txt" "$TMP/got-$1.txt" > "$TMP/diff.txt" ||
    fail "$1: the run with $2 ends on other parameters than the single workers': $(cat "$TMP/diff.txt")"
  awk '/^sync/ {print $2, $4}' "$TMP/B$1-g2.rank0" | sort -u > "$TMP/want-$1.txt"
  [ "$(wc -l < "$TMP/want-$1.txt")" -ge "${3:-1}" ] || fail "$1: the reference synced $(cat "$TMP/want-$1.txt")"
  for _f in A$1-g1.rank0 A$1-g1.rank1 A$1-g2.rank0 B$1-g1.rank0; do
    awk '/^sync/ {print $2, $4}' "$TMP/$_f" | sort -u | diff "$TMP/want-$1.txt" - > "$TMP/diff.txt" ||
      fail "$1: $_f's shards digests: $(cat "$TMP/diff.txt")"
  done
}

# ref_async_check RUN H WHAT ARGS...: RUN's shard digests equal the in-process replay of its submission
# order (tests/tools/ref_async) and differ from the replay with ARGS (the setting under test turned off);
# says so with WHAT and the staleness the submissions saw. REF_ASYNC: another build of the replay (a mutant).
ref_async_check() {
  run=$1; h=$2; what=$3; shift 3
  ${REF_ASYNC:-build/tests/tools/ref_async} --redis "$URL" --run "$run" --sync-every "$h" > "$TMP/ref-$run.txt" 2> "$TMP/ref-$run.log" ||
    fail "reference of $run: $(cat "$TMP/ref-$run.log")"
  shard_digests "$run" > "$TMP/got-$run.txt"
  if ! diff "$TMP/ref-$run.txt" "$TMP/got-$run.txt" > "$TMP/diff.txt"; then
    # the run's data as Redis holds it, kept by keep_failed_logs, to replay by hand: a redis-server on that
    # file, then ref_async (seen once in it_chaos_async_storm, with nothing left to replay)
    $RCLI --rdb "$TMP/redis-$run.rdb" > /dev/null 2>&1
    fail "$run: digests differ from the replayed order: $(cat "$TMP/diff.txt")"
  fi
  ${REF_ASYNC:-build/tests/tools/ref_async} --redis "$URL" --run "$run" --sync-every "$h" "$@" > "$TMP/off-$run.txt" 2>/dev/null ||
    fail "reference of $run with $*"
  cmp -s "$TMP/off-$run.txt" "$TMP/got-$run.txt" && fail "$run: the run equals the replay with $*"
  hist=$($RCLI XRANGE "dl:{$run}:events" - + | awk '/^staleness$/ {getline; n[$0]++} END {for (s in n) printf "%s:%d ", s, n[s]}')
  say "$run: bit-identical to the replay of $(sed 's/.*replayed //' "$TMP/ref-$run.log") $what, not to the one with $*; staleness $hist"
}

# drop_proxy NAME UPSTREAM_PORT ARGS...: tests/tools/drop_proxy.py in front of UPSTREAM_PORT (Redis, or a
# shard-server with --dataplane) with ARGS; its port in PPORT_NAME, its pid in PROXY_NAME (killed on exit),
# its log $TMP/proxy-$RUN-NAME.log
drop_proxy() {
  _pname=$1; _up=$2; shift 2
  _pfile="$TMP/proxy-$RUN-$_pname.port"
  python3 tests/tools/drop_proxy.py --redis-port "$_up" "$@" --port-file "$_pfile" --log "$TMP/proxy-$RUN-$_pname.log" \
    > /dev/null 2>&1 &
  PIDS="$PIDS $!"; eval "PROXY_$_pname=$!"
  wait_until 10 '[ -s "$_pfile" ]' "the proxy $_pname"
  eval "PPORT_$_pname=$(cat "$_pfile")"
}
# join_steps RUN: a line "W STEPS" per registration recorded (the steps W had trained when it registered)
join_steps() {
  $RCLI XRANGE "dl:{$1}:events" - + | awk '/^join$/ {j = 1; next} j && /^worker$/ {getline; w = $0; next}
    j && /^steps$/ {getline; print w, $0; j = 0}'
}
# submissions RUN W: W's async submissions recorded (its submit events of shard 0)
submissions() {
  $RCLI XRANGE "dl:{$1}:events" - + | awk -v who="$2" '/^worker$/ {getline; w = $0} /^type$/ {getline; t = $0}
    /^shard$/ {getline; if (t == "submit" && w == who && $0 == "0") n++} END {print n + 0}'
}

# device_hooks_used WORKER: its log says how often it called the device hooks (--device-hooks host); the
# delta and the load copy were called.
device_hooks_used() {
  line=$(grep -o 'device hooks: [0-9]* delta, [0-9]* load snapshot, [0-9]* load copy' "$TMP/worker-$1.log")
  echo "$line" | grep -q 'hooks: [1-9][0-9]* delta,.* [1-9][0-9]* load copy' || fail "$1 did not use its device hooks: '$line'"
  say "$1 ran through its device hooks ($line)"
}

# group_signal RUN SIG RANK R0_PID R1_PID LAUNCHER_PID OUT: signal SIG to rank RANK (0 or 1) of the 2-rank group
# g1 of RUN (tests/python/group_quad.py --out OUT): every process of the group (both ranks, the launcher) is gone
# within 20 s, g1 is no member, and the stop was the group's: both ranks stopped after the same inner step
# ("stopped N" in OUT.rank0 and OUT.rank1: the stop agreed at a collective) and the launcher exited 0.
group_signal() {
  _run=$1; _sig=$2; _r0=$4; _r1=$5; _lp=$6; _out=$7
  if [ "$3" = 0 ]; then kill "-$_sig" "$_r0"; else kill "-$_sig" "$_r1"; fi
  _t0=$(date +%s)
  wait_until 20 '! alive "$_r0" && ! alive "$_r1" && ! alive "$_lp"' "every process of the group to stop after SIG$_sig to rank $3"
  wait "$_lp" || fail "the group's launcher exited $? after SIG$_sig to rank $3: $(cat "$_out".rank0 "$_out".rank1 | grep -v '^sync' | tail -n 6)"
  _s0=$(sed -n 's/^stopped //p' "$_out.rank0"); _s1=$(sed -n 's/^stopped //p' "$_out.rank1")
  [ -n "$_s0" ] && [ "$_s0" = "$_s1" ] || fail "after SIG$_sig to rank $3 the ranks stopped after steps '$_s0' and '$_s1'"
  wait_until 5 '[ "$($RCLI HEXISTS "dl:{$_run}:workers" g1)" = 0 ]' "the group to leave the run"
  say "SIG$_sig to rank $3: both ranks stopped after inner step $_s0, the group's processes were gone after $(( $(date +%s) - _t0 )) s, it left the run"
}

# hook_groups KIND RUN STEPS [group_worker flags]: in the background, group g1 of RUN (2 ranks of
# tests/tools/group_worker, --device-hooks KIND: host or cuda) and group g2 (2 ranks, no hooks), both syncing
# every $H steps with the flags; their pids in G1 and G2, stdout in $TMP/gN-RUN.out. wait_hook_groups RUN: both
# ended well, or fail.
hook_groups() {
  _kind=$1; _run=$2; _steps=$3; shift 3
  build/tests/tools/group_worker --redis "$URL" --run "$_run" --worker-id g1 --ranks 2 --steps "$_steps" \
    --sync-every $H --heartbeat-ms 1000 --device-hooks "$_kind" "$@" > "$TMP/g1-$_run.out" 2> "$TMP/group-g1-$_run.log" &
  G1=$!; PIDS="$PIDS $G1"
  build/tests/tools/group_worker --redis "$URL" --run "$_run" --worker-id g2 --ranks 2 --steps "$_steps" \
    --sync-every $H --heartbeat-ms 1000 "$@" > "$TMP/g2-$_run.out" 2> "$TMP/group-g2-$_run.log" &
  G2=$!; PIDS="$PIDS $G2"
}
wait_hook_groups() {
  wait "$G1" || fail "$1: group g1 (device hooks) exited with status $?: $(cat "$TMP/g1-$1.out" "$TMP/group-g1-$1.log" | tail -n 5)"
  wait "$G2" || fail "$1: group g2 exited with status $?: $(tail -n 5 "$TMP/g2-$1.out")"
}

# need_cuda_backend: exits 77 (skipped) with the reason unless a CUDA backend can run here: the one
# DILOCO_CUDA_BACKEND names (tests/it_cuda_emu.sh names the CPU emulator's), or bin/libdiloco_gpt_cuda.so
# (built with nvcc) with a GPU that nvidia-smi lists
need_cuda_backend() {
  if [ -n "${DILOCO_CUDA_BACKEND:-}" ]; then
    [ -f "$DILOCO_CUDA_BACKEND" ] && return 0
    echo "DILOCO_CUDA_BACKEND=$DILOCO_CUDA_BACKEND: no such file: skipped"; exit 77
  fi
  [ -f bin/libdiloco_gpt_cuda.so ] || { echo "bin/worker has no CUDA backend (nvcc missing at build time): skipped"; exit 77; }
  nvidia-smi -L 2>/dev/null | grep -q '^GPU' || { echo "no CUDA device: skipped"; exit 77; }
}

# group_same_syncs OUT WHAT: the 2 ranks of a tests/tools/group_worker whose stdout is OUT synced at the same
# steps, each time from the same parameters (the digest of its own before the sync: DDP replicas hold the
# same); "step digest ..." of rank 0 goes to $s0
group_same_syncs() {
  s0=$(grep '^sync rank 0 ' "$1" | awk '{print $NF, $(NF-4)}' | tr '\n' ' ')
  _s1=$(grep '^sync rank 1 ' "$1" | awk '{print $NF, $(NF-4)}' | tr '\n' ' ')
  [ -n "$s0" ] && [ "$s0" = "$_s1" ] ||
    fail "$2: the ranks synced at different steps or from different parameters: rank 0 '$s0', rank 1 '$_s1'"
}

# group_stopped_together OUT WHAT: the 2 ranks of a tests/tools/group_worker whose stdout is OUT both printed
# "stopped rank <r> step <n>" with the same n (their stop agreed at one collective), which goes to $s0
group_stopped_together() {
  s0=$(sed -n 's/^stopped rank 0 step //p' "$1"); s1=$(sed -n 's/^stopped rank 1 step //p' "$1")
  [ -n "$s0" ] && [ "$s0" = "$s1" ] || fail "$2: the ranks stopped after steps '$s0' and '$s1': $(grep -v '^sync' "$1" | tail -n 6)"
}

# group_crash RUN LAUNCHER_PID RANK_PID OTHER_PID RESTART: the crash of a 2-rank group g1 of RUN (its launcher
# LAUNCHER_PID): kill -9 of RANK_PID; g1 leaves the run within 15 s and its launcher fails; the run goes on
# (2 more rounds, with the member OTHER_PID); RESTART (a command) starts the group again, which registers and
# takes part in a round; OTHER_PID is alive; and no closed round lists half of g1 (no_half_group).
group_crash() {
  _run=$1; _grp=$2; _rank=$3; _other=$4; _restart=$5
  _round() { $RCLI HGET "dl:{$_run}:state" round:0; }
  _member() { $RCLI HEXISTS "dl:{$_run}:workers" g1; }
  kill -9 "$_rank"
  say "kill -9 of a rank of group g1 at round $(_round)"
  wait_until 15 '[ "$(_member)" = 0 ]' "the group to leave the run"
  wait "$_grp" && fail "the group's launcher exited 0 after a rank was killed"
  _after=$(_round)
  wait_until 20 '[ "$(_round)" -ge $((_after + 2)) ]' "the run to go on without the group"
  say "the group is out; rounds $_after..$(_round) closed without it"
  eval "$_restart"
  wait_until 90 '[ "$(_member)" = 1 ]' "the group to register again"
  _back=$(_round)
  wait_until 60 'for x in $(seq $_back $(_round)); do $RCLI HGET "dl:{$_run}:f0:r$x" participants; done | grep -q "g1:"' \
    "the group to take part in a round after it came back"
  alive "$_other" || fail "the other member died"
  say "the restarted group rejoined at round $_back and syncs again"
  no_half_group "$_run" g1 2 > "$TMP/half.txt" || fail "a half group in a round: $(cat "$TMP/half.txt")"
  [ "$(tail -n 1 "$TMP/half.txt")" -ge 2 ] || fail "only $(tail -n 1 "$TMP/half.txt") rounds with the group"
  say "$(tail -n 1 "$TMP/half.txt") of $(_round) closed rounds list the group, each with both ranks' arrivals; none with half of it"
}

# no_half_group RUN WORKER RANKS: every closed round of RUN (round:0 so far) that lists group WORKER as a
# participant (WORKER:<inc>) has the arrival of each of its RANKS ranks (g:WORKER:<r>) under that incarnation;
# prints the number of such rounds, fails (status 1, the round at fault printed) on a half group.
no_half_group() {
  _last=$($RCLI HGET "dl:{$1}:state" round:0)
  _fields="participants"; for _r in $(seq 0 $(($3 - 1))); do _fields="$_fields g:$2:$_r"; done
  for _x in $(seq 0 $((_last - 1))); do echo "HMGET dl:{$1}:f0:r$_x $_fields"; done | $RCLI |
    awk -v w="$2" -v k=$(($3 + 1)) 'NR % k == 1 {p = $0; ok = 1; inc = ""
         n = split(p, ids, ","); for (i = 1; i <= n; i++) if (index(ids[i], w ":") == 1) inc = substr(ids[i], length(w) + 2)
         next}
       {if (inc != "" && $0 != inc) ok = 0}
       NR % k == 0 && inc != "" {with++; if (!ok) {print "round " (NR / k - 1) ": " p " with a rank arrival missing"; bad = 1}}
       END {print with + 0; exit bad}'
}

shard_versions() { # RUN -> "v v v ..."
  n=$($RCLI HGET "dl:{$1}:config" shards)
  k=0; out=""
  while [ "$k" -lt "$n" ]; do out="$out $($RCLI HGET "dl:{$1}:shards" "$k:version")"; k=$((k + 1)); done
  echo $out
}

[ -x bin/worker ] && [ -x bin/shard-server ] && [ -x bin/coordinator ] && [ -x "$REDIS_CLI" ] ||
  fail "build first: make all tests-build"

# ---- shard-server storms (crash tests): servers are named s0, s1, ... in start order
NSRV=0
live_servers() {
  live=""
  i=0
  while [ "$i" -lt "$NSRV" ]; do eval "p=\${SRV_s$i:-}"; [ -n "$p" ] && alive "$p" && live="$live $i"; i=$((i + 1)); done
  echo $live
}
# keep_servers N FLAGS...: like a supervisor, start new servers until N are alive
keep_servers() {
  want=$1; shift
  set -- $(live_servers) -- "$@"
  c=0; while [ "$1" != "--" ]; do c=$((c + 1)); shift; done; shift
  while [ "$c" -lt "$want" ]; do start_server "s$NSRV" "$@"; NSRV=$((NSRV + 1)); c=$((c + 1)); done
}
# kill_random_server SEED: kill -9 one live server chosen by SEED; prints 1 if one was killed
kill_random_server() {
  set -- $(live_servers)
  [ $# -ge 1 ] || { echo 0; return; }
  pick=$(( $1 % $# + 1 ))
  eval "victim=\${$pick}"
  eval "p=\$SRV_s$victim"
  kill -9 "$p" 2>/dev/null && echo 1 || echo 0
}
# workers_running NAMES...: is any of these workers still alive?
workers_running() { for w in "$@"; do eval "p=\$WRK_$w"; alive "$p" && return 0; done; return 1; }
# storm SECONDS_LIMIT FLAGS -- WORKERS...: while the workers run, kill a random server every 1-1.5 s and
# keep two alive (started with FLAGS); sets KILLS
storm() {
  limit=$1; shift
  flags=""; while [ "$1" != "--" ]; do flags="$flags $1"; shift; done; shift
  KILLS=0; seed=42
  now_cs; end=$(( NOW_CS + limit * 100 ))
  keep_servers 2 $flags
  while workers_running "$@"; do
    now_cs; [ "$NOW_CS" -ge "$end" ] && fail "run did not finish within $limit s under kills ($KILLS kills)"
    seed=$(( (seed * 1103515245 + 12345) % 2147483648 ))
    sleep "1.$(( seed % 6 ))"
    keep_servers 2 $flags
    KILLS=$((KILLS + $(kill_random_server $seed)))
    keep_servers 2 $flags
  done
}
# crash_storm WORKERS...: storm with the shard-servers of it_sync_crash (600 ms leases, each server kills
# itself in 10% of its commits between the log write and dl_commit) until the workers finish, then wait
# for them; sets KILLS and FAULTS (the self-kills)
crash_storm() {
  storm ${CRASH_LIMIT:-240} --lease-ttl-ms 600 --fault-crash-before-commit 0.1 -- "$@"
  wait_workers "$@"
  FAULTS=$(cat "$TMP"/server-*.log | grep -c "fault injection: exiting before dl_commit")
  say "$KILLS kill -9s by the harness, $FAULTS crashes between log write and commit, $NSRV servers started"
}

# ---- a worker dropped from a round that registers again (it_sync_dropped_*, it_*_evicted_*, it_group_rejoin):
# RUN, NUMEL, SEED, ROUNDS, H
# rejoin_run DELAY_MS: Redis; run RUN of 3 workers on 2 shards, heartbeat timeout 0.8 s, min-workers 2 (once w1
# and w2 have left, the third alone closes no round: the run stops at ROUNDS); shard-server s1; w1 and w2 each
# training ROUNDS rounds of H steps at DELAY_MS a step, beating every 0.2 s. The third is the test's.
rejoin_run() {
  start_redis
  init_run $RUN --trainer quadratic --numel $NUMEL --shards 2 --workers 3 --min-workers 2 --seed $SEED \
    --heartbeat-timeout 0.8
  start_server s1 --lease-ttl-ms 2000
  for _w in w1 w2; do
    start_worker $_w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 0.2 --step-delay-ms "$1"
  done
}
# rejoin_check W FIRST: W registered twice; its second incarnation (REJOIN_INC) joined round REJOIN_ROUND
# (from its join event); no round from FIRST to REJOIN_ROUND - 1 counts that incarnation, every later one
# up to ROUNDS - 1 does
rejoin_check() {
  $RCLI XRANGE "dl:{$RUN}:events" - + |
    awk '/^join$/ {j = 1; next} j && /^worker$/ {getline; w = $0; next} j && /^inc$/ {getline; inc = $0; next}
      j && /^joined$/ {getline; if (w == "'"$1"'") print inc, $0; j = 0}' > "$TMP/joins-$1.txt"
  [ "$(wc -l < "$TMP/joins-$1.txt")" -eq 2 ] || fail "$1 joined $(wc -l < "$TMP/joins-$1.txt") time(s), expected twice: $(cat "$TMP/joins-$1.txt")"
  set -- "$1" "$2" $(tail -n 1 "$TMP/joins-$1.txt")
  REJOIN_INC=$3; REJOIN_ROUND=$4
  [ "$REJOIN_ROUND" -gt "$2" ] && [ "$REJOIN_ROUND" -lt "$ROUNDS" ] || fail "$1 joined round $REJOIN_ROUND again"
  for _r in $(seq "$2" $((ROUNDS - 1))); do
    _in=0; $RCLI HGET "dl:{$RUN}:f0:r$_r" participants | grep -q "$1:$REJOIN_INC" && _in=1
    [ "$_in" -eq $((_r >= REJOIN_ROUND)) ] || fail "round $_r: $1:$REJOIN_INC a participant: $_in (it rejoined at round $REJOIN_ROUND)"
  done
}
# rounds_with RUN F WHO: how many closed rounds of fragment F list a participant matching WHO ("w3:" any
# incarnation of w3, "w3:7" that one)
rounds_with() {
  _n=0
  for _r in $(seq 0 $(($($RCLI HGET "dl:{$1}:state" round:$2) - 1))); do
    $RCLI HGET "dl:{$1}:f$2:r$_r" participants | grep -q "$3" && _n=$((_n + 1))
  done
  echo $_n
}
# sync_field W FILTER FIELD: FIELD (step, digest) of the first sync record of W's log with FILTER in it
sync_field() {
  grep '"event":"sync"' "$TMP/$1.jsonl" | grep -- "$2" | head -n 1 | sed "s/.*\"$3\":\"\{0,1\}\([0-9a-f]*\).*/\1/"
}
# rejoin_dead_steps W LOST_STEP: the inner steps W trained after its sync at LOST_STEP (the one that lost the
# round it was dropped from) before round REJOIN_ROUND (H steps before its sync of that round); 0 expected
rejoin_dead_steps() {
  _sj=$(sync_field "$1" "\"round\":$REJOIN_ROUND," step)
  [ -n "$2" ] && [ -n "$_sj" ] || fail "$1 logged no lost sync or none of round $REJOIN_ROUND: $(grep '"event":"sync"' "$TMP/$1.jsonl")"
  _dead=$((_sj - H - $2))
  say "$1: lost its round at step $2, registered again as incarnation $REJOIN_INC joining round $REJOIN_ROUND; $_dead inner steps trained in between"
  [ "$_dead" -eq 0 ] || fail "$1 trained $_dead inner steps as its evicted incarnation before registering again"
}
# assert_rejoin_reference W REF_ARGS: shard digests and commits equal ref_quadratic with REF_ARGS (w1,w2,W;
# REF_SHARDS), and so do w1's, w2's and W's digests after the last round
assert_rejoin_reference() {
  REF_ARGS=$2 REF_WORKERS=w1,w2,$1 assert_matches_reference
  REF_WORKERS=w1,w2 assert_workers_end_at "$REF_DIGEST"
  _got=$(sync_field "$1" "\"round\":$((ROUNDS - 1))," digest)
  [ "$_got" = "$REF_DIGEST" ] || fail "$1's sync of round $((ROUNDS - 1)) has digest $_got, reference $REF_DIGEST"
}
