#!/bin/sh
# it_http_api.sh: the coordinator's HTTP API against a live run (real redis-server, 2 shard-servers,
# 2 quadratic workers training until stopped, `coordinator serve --http`).
#
#   GET /status, /metrics     real values: 2 workers with host and speed, 2 servers, shard versions
#                             advancing, Prometheus text well-formed; every /status field and metric
#                             family named in docs/http.md
#   GET /, /dashboard         the embedded page, nothing referenced outside the server
#   POST /control/*           update_optimizer -> dl:{R}:tunables outer_lr/outer_momentum; update_num_workers
#                             (min_workers above num_workers refused in one body, in two requests and from
#                             the CLI in either order, nothing written; a count of 0 refused alike by
#                             HTTP, the CLI (usage error) and FCALL dl_set, which took min_workers 0);
#                             kick_worker -> the worker's incarnation is evicted ("kicked" event, deaths+1);
#                             save_state -> checkpoint file with --save-dir (written on a thread), 409 without; bad requests (malformed JSON, wrong types, unknown
#                             fields/actions, oversize body, wrong method, foreign Host/Origin) -> 4xx
#                             and the state unchanged; shutdown -> status shutdown, workers leave (a second
#                             shutdown: 200, "run already shut down", no second event)
#   coordinator control       set-lr, set-momentum, set-workers, kick, errors
#   coordinator status --json dl_status's document: each of its fields named in docs/http.md's section
#   --token-file              control needs the bearer token; status/metrics stay readable;
#   --no-dashboard            / and /dashboard answer 404
#   --save-every N            a checkpoint every N versions, --keep K newest kept
#   binding                   127.0.0.1 by default; --host 0.0.0.0 only when asked
#   Redis down                /status and /control answer 503, the page still loads; SIGTERM/SIGINT exit 0
. "$(dirname "$0")/lib.sh"
COORD_BIN=${COORD_BIN:-bin/coordinator} # e.g. a sanitizer build
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl is not installed"; exit 77; }

RUN=httpapi
start_redis
init_run $RUN --trainer quadratic --numel 10000 --shards 2 --workers 2
start_server A
start_server B
for w in w1 w2; do start_worker $w --steps 0 --sync-every 20 --heartbeat-interval 0.5 --step-delay-ms 5; done

start_coord() { # NAME PORT [serve flags]: pid in COORD_<NAME>
  name=$1; port=$2; shift 2
  $COORD_BIN serve --redis "$URL" --run "$RUN" --http "127.0.0.1:$port" --print-every 0 "$@" \
    > "$TMP/coord-$name.log" 2>&1 &
  eval "COORD_$name=$!"
  PIDS="$PIDS $!"
  wait_until 10 "curl -s -o /dev/null 'http://127.0.0.1:$port/status'" "coordinator $name listening on $port"
}
HP=$(free_port)
H="http://127.0.0.1:$HP"
start_coord main "$HP"

# code METHOD PATH [curl args]: print the HTTP status, body into $TMP/body
code() { m=$1; p=$2; shift 2; curl -s -o "$TMP/body" -w '%{http_code}' -X "$m" "$@" "$H$p"; }
post() { p=$1; b=$2; shift 2; code POST "$p" -H 'Content-Type: application/json' --data-binary "$b" "$@"; }
expect() { # EXPECTED_CODE ACTUAL WHAT
  [ "$2" = "$1" ] || fail "$3: HTTP $2, expected $1; body: $(head -c 400 "$TMP/body")"
}
jq_() { python3 -c "import json,sys; d=json.load(open('$TMP/body')); $1"; }
state() { $RCLI HGET "dl:{$RUN}:state" "$1"; }
tun() { $RCLI HGET "dl:{$RUN}:tunables" "$1"; }   # the operator's settings (dl_set, dl_shutdown)
inc_of() { # worker -> incarnation or "none" (from dl_status)
  $RCLI FCALL dl_status 1 "dl:{$RUN}:config" | python3 -c "
import json,sys; d=json.load(sys.stdin); ws=d['workers'] if isinstance(d['workers'],list) else []
print(next((str(w['inc']) for w in ws if w['id']=='$1'), 'none'))"
}
n_events() { $RCLI XRANGE "dl:{$RUN}:events" - + | grep -c "^$1\$"; }

say "waiting for both workers to report and rounds to commit"
wait_until 20 "[ \"\$(curl -s $H/status | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(1 for w in d[\"workers\"] if w[\"steps_per_second\"]>0 and w[\"loss\"] is not None), min(s[\"version\"] for s in d[\"shards\"])>=2)')\" = '2 True' ]" \
  "2 workers with speed and loss, shards at version >= 2"

say "GET /status"
expect 200 "$(code GET /status)" "GET /status"
jq_ "
assert d['run']=='$RUN' and d['mode']=='sync' and d['status']=='running', d
ws={w['worker_id']:w for w in d['workers']}
assert sorted(ws)==['w1','w2'], ws
for w in ws.values():
    assert w['hostname'] and w['host'] and w['speed']>0 and w['H']==20 and w['heartbeat_age_ms']<5000, w
    assert isinstance(w['loss'], float) and w['incarnation']>=1, w
assert d['workers_live']==2 and d['num_workers']==2 and d['servers_live']==2, d
assert sorted(s['id'] for s in d['servers'])==['A','B'] and all(s['addr'] for s in d['servers'])
assert len(d['shards'])==2 and all(s['owner'] in ('A','B') and s['lease_valid'] and s['lease_age_ms'] is not None for s in d['shards']), d['shards']
assert d['commits']>=4 and d['rounds_closed']>=2 and d['deaths']==0 and 'rejections' in d, d
assert any(r['participants']==2 for r in d['recent_rounds']), d['recent_rounds']
assert any(e['type']=='join' for e in d['events']) and not any(e['type'] in ('commit','close') for e in d['events'])
# the document's keys and their order (jansson keeps insertion order; the optional DyLU/DN keys aside)
keys = ['run', 'mode', 'status', 'now_ms', 'coordinator_uptime_s', 'auth_required', 'dashboard',
        'save_state_available', 'sync_round', 'rounds', 'num_fragments', 'numel', 'num_shards', 'trainer',
        'rounds_closed', 'commits', 'rejections', 'duplicates', 'deaths', 'joins', 'lease_changes', 'corruptions',
        'repairs', 'total_worker_deaths', 'num_workers', 'min_workers', 'outer_lr', 'outer_momentum', 'nesterov',
        'heartbeat_timeout_ms', 'heartbeat_timeout', 'dylu_enabled', 'pending', 'pending_submissions', 'workers',
        'workers_live', 'servers', 'servers_live', 'shards', 'corrupt_shards', 'events', 'recent_rounds', 'evals',
        'eval_loss', 'eval_version', 'config', 'state', 'redis']
assert [k for k in d if k not in ('dylu_base_sync_every', 'dn_buffer_size', 'dn_buffered')] == keys, list(d)
assert 'dylu_base_sync_every' not in d, 'a run without DyLU shows a DyLU base H: %s' % d['dylu_base_sync_every']
assert list(d['shards'][0]) == ['corrupt', 'corrupt_reason', 'shard', 'version', 'owner', 'epoch', 'lease_left_ms',
                                'lease_age_ms', 'lease_valid', 'digest', 'snapshot'], list(d['shards'][0])
assert list(d['servers'][0]) == ['id', 'addr', 'pid', 'last_beat_age_ms', 'shards_held'], list(d['servers'][0])
assert list(d['pending'][0]) == ['fragment', 'round', 'submitted'] and isinstance(d['pending_submissions'], int)
print('status ok: round', d['sync_round'], 'versions', [s['version'] for s in d['shards']])
" || fail "/status content"
# every top-level field of /status is named in docs/http.md's table (the redis field once was not)
undocumented=$(jq_ "
q = chr(96)
doc = open('docs/http.md').read().split('## ' + q + 'GET /status' + q)[1].split('## ' + q + 'GET /metrics' + q)[0]
print(' '.join(k for k in d if q + k + q not in doc))
") || fail "docs/http.md has no GET /status section"
[ -z "$undocumented" ] || fail "/status fields that docs/http.md (GET /status) does not name: $undocumented"
v0=$(jq_ "print(min(s['version'] for s in d['shards']))")

say "GET /metrics"
expect 200 "$(code GET /metrics)" "GET /metrics"
cp "$TMP/body" "$TMP/metrics1"
grep -q "^diloco_workers_live{run=\"$RUN\"} 2$" "$TMP/metrics1" || fail "metrics: workers_live 2"
grep -q "^diloco_servers_live{run=\"$RUN\"} 2$" "$TMP/metrics1" || fail "metrics: servers_live 2"
grep -q "^diloco_worker_loss{run=\"$RUN\",worker=\"w1\"} " "$TMP/metrics1" || fail "metrics: loss of w1"
for m in diloco_rounds_closed_total diloco_commits_total diloco_rejections_total diloco_worker_deaths_total \
         diloco_lease_changes_total; do
  grep -q "^$m{run=\"$RUN\"} [0-9]" "$TMP/metrics1" || fail "metrics: $m missing"
done
# every sample line is NAME{labels} VALUE, every family has HELP and TYPE
python3 - "$TMP/metrics1" <<'EOF' || fail "metrics: malformed exposition"
import re, sys
fams, typed = set(), set()
for line in open(sys.argv[1]):
    line = line.rstrip('\n')
    if line.startswith('# TYPE '): typed.add(line.split()[2]); continue
    if line.startswith('#'): continue
    m = re.fullmatch(r'([a-z_]+)\{([a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*)\} (-?[0-9.eE+-]+)', line)
    assert m, line
    fams.add(m.group(1)); float(m.group(4))
assert fams <= typed, fams - typed
EOF
# the families, in their order, each with its type (http_status.c's metrics_text)
[ "$(grep '^# TYPE ' "$TMP/metrics1" | awk '{printf "%s:%s ", $3, $4}')" = "$(printf '%s ' \
  diloco_rounds_closed_total:counter diloco_commits_total:counter diloco_rejections_total:counter \
  diloco_duplicates_total:counter diloco_worker_deaths_total:counter diloco_worker_joins_total:counter \
  diloco_lease_changes_total:counter diloco_corruptions_total:counter diloco_repairs_total:counter diloco_up:gauge \
  diloco_workers_live:gauge diloco_workers_target:gauge diloco_workers_min:gauge diloco_servers_live:gauge \
  diloco_outer_lr:gauge diloco_outer_momentum:gauge diloco_round:gauge diloco_shard_version:gauge \
  diloco_shard_lease_epoch:gauge diloco_shard_corrupt:gauge diloco_shards_corrupt:gauge \
  diloco_shard_lease_valid:gauge diloco_worker_heartbeat_age_seconds:gauge diloco_worker_steps_per_second:gauge \
  diloco_worker_loss:gauge diloco_worker_step:gauge diloco_eval_loss:gauge diloco_eval_version:gauge \
  diloco_server_beat_age_seconds:gauge diloco_server_shards_held:gauge)" ] ||
  fail "metrics: the families or their order changed: $(grep '^# TYPE ' "$TMP/metrics1" | awk '{printf "%s ", $3}')"
grep -q "^diloco_shard_lease_valid{run=\"$RUN\",shard=\"1\"} 1$" "$TMP/metrics1" || fail "metrics: lease of shard 1"
grep -q "^diloco_round{run=\"$RUN\",fragment=\"0\"} [0-9]" "$TMP/metrics1" || fail "metrics: round of fragment 0"
ver() { grep "^diloco_shard_version{run=\"$RUN\",shard=\"$1\"}" "$2" | awk '{print $2}'; }
wait_until 10 "curl -s $H/metrics > $TMP/metrics2 && [ \"\$(ver 0 $TMP/metrics2)\" -gt \"$(ver 0 "$TMP/metrics1")\" ]" \
  "shard 0 version to advance in /metrics"
# every family is named in docs/http.md's GET /metrics table
for f in $(grep '^# TYPE ' "$TMP/metrics1" | awk '{print $3}'); do
  grep -q "\`$f\`" docs/http.md || fail "metrics: $f is not in docs/http.md (GET /metrics)"
done
say "metrics ok: shard 0 version $(ver 0 "$TMP/metrics1") -> $(ver 0 "$TMP/metrics2") (status said >= $v0)"

say "GET / and /dashboard"
for p in / /dashboard; do
  expect 200 "$(code GET $p)" "GET $p"
  grep -q '<canvas id="losschart"' "$TMP/body" || fail "$p is not the dashboard"
  if grep -Eiq '(src|href)="(https?:)?//' "$TMP/body"; then fail "$p references an outside resource"; fi
done
curl -s -D - -o /dev/null "$H/dashboard" | grep -qi "^content-security-policy: default-src 'none'" || fail "dashboard CSP header"
expect 404 "$(code GET /nope)" "unknown path"
expect 405 "$(code POST /status)" "POST /status"

say "POST /control/update_optimizer"
expect 200 "$(post /control/update_optimizer '{"lr": 0.5, "momentum": 0.8}')" "update_optimizer"
jq_ "assert d=={'status':'ok','lr':0.5,'momentum':0.8}, d" || fail "update_optimizer reply"
[ "$(tun outer_lr)" = 0.5 ] && [ "$(tun outer_momentum)" = 0.8 ] || fail "outer_lr/momentum in Redis: $(tun outer_lr) $(tun outer_momentum)"
expect 200 "$(post /control/update_optimizer '{"momentum": 0.85}')" "update_optimizer momentum only"
[ "$(tun outer_lr)" = 0.5 ] && [ "$(tun outer_momentum)" = 0.85 ] || fail "momentum-only update"

say "POST /control/update_num_workers"
expect 200 "$(post /control/update_num_workers '{"num_workers": 3}')" "update_num_workers 3"
[ "$(state target_workers)" = 3 ] || fail "target_workers 3"
expect 200 "$(post /control/update_num_workers '{"num_workers": 2}')" "update_num_workers 2"
[ "$(state target_workers)" = 2 ] || fail "target_workers 2"

say "min_workers above the expected workers: refused by dl_set, whichever request or CLI order gets there"
expect 200 "$(post /control/update_num_workers '{"num_workers": 2, "min_workers": 2}')" "num_workers 2, min_workers 2"
[ "$(tun min_workers)" = 2 ] && [ "$(tun expected_workers)" = 2 ] || fail "min_workers/expected_workers 2"
bounds() { echo "$($RCLI HGETALL "dl:{$RUN}:tunables" | tr '\n' ' ') set events $(n_events set)"; }
before=$(bounds)
expect 400 "$(post /control/update_num_workers '{"num_workers": 1}')" "num_workers 1 below min_workers 2"
jq_ "assert 'expected workers (target_workers, num_workers) 1 is below the run\\'s min_workers 2' in d['error'] and 'set-min-workers' in d['error'], d" ||
  fail "num_workers below min_workers: $(cat "$TMP/body")"
expect 400 "$(post /control/update_num_workers '{"min_workers": 3}')" "min_workers 3 above num_workers 2"
jq_ "assert 'min_workers 3 is above the run\\'s expected workers (target_workers, num_workers) 2' in d['error'], d" ||
  fail "min_workers above num_workers: $(cat "$TMP/body")"
expect 400 "$(post /control/update_num_workers '{"num_workers": 2, "min_workers": 5}')" "min_workers 5 > num_workers 2"
jq_ "assert 'min_workers must be <= num_workers' in d['error'], d" || fail "one body: $(cat "$TMP/body")"
CTL="$COORD_BIN control --redis $URL --run $RUN"
$CTL set-min-workers 5 > "$TMP/ctl.out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "min_workers 5 is above the run's expected workers .* 2: raise those first" "$TMP/ctl.out" ||
  fail "control set-min-workers 5 with 2 expected workers: exit $rc, $(cat "$TMP/ctl.out")"
$CTL set-workers 1 > "$TMP/ctl.out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "expected workers .* 1 is below the run's min_workers 2: lower min_workers first" "$TMP/ctl.out" ||
  fail "control set-workers 1 with min_workers 2: exit $rc, $(cat "$TMP/ctl.out")"
# a worker count of 0: one rule (>= 1) for HTTP, the CLI and dl_set itself
expect 400 "$(post /control/update_num_workers '{"min_workers": 0}')" "min_workers 0"
for verb in set-min-workers set-workers; do
  $CTL $verb 0 > "$TMP/ctl.out" 2>&1; rc=$?
  [ $rc -eq 2 ] && grep -q "$verb wants an integer >= 1, got '0'" "$TMP/ctl.out" ||
    fail "control $verb 0: exit $rc, $(cat "$TMP/ctl.out")"
done
for field in min_workers target_workers; do
  out=$($RCLI FCALL dl_set 1 "dl:{$RUN}:config" $field 0 2>&1)
  case "$out" in *"BADARG $field must be an integer >= 1"*) ;; *) fail "FCALL dl_set $field 0: $out" ;; esac
done
[ "$(bounds)" = "$before" ] || fail "a refused worker count wrote something: '$before' -> '$(bounds)'"
expect 200 "$(post /control/update_num_workers '{"min_workers": 1}')" "min_workers back to 1"

say "bad requests: 4xx and nothing changes"
snap() { echo "$(tun outer_lr) $(tun outer_momentum) $(state target_workers) $(tun min_workers) $(tun status) $(tun nesterov) $(n_events set) $(n_events shutdown) $(state deaths)"; }
before=$(snap)
big=$(python3 -c 'print("{\"lr\": 0.1, \"pad\": \"" + "x" * 70000 + "\"}")')
printf '%s' "$big" > "$TMP/big.json"
expect 400 "$(post /control/update_optimizer '{"lr": 0.3,')" "truncated JSON"
jq_ "assert 'malformed JSON' in d['error'], d" || fail "malformed JSON error text"
expect 400 "$(post /control/update_optimizer 'lr=0.3')" "not JSON"
expect 400 "$(post /control/update_optimizer '[0.3]')" "JSON array body"
expect 400 "$(post /control/update_optimizer '{"lr": "fast"}')" "lr as a string"
expect 400 "$(post /control/update_optimizer '{"lr": -1}')" "negative lr"
expect 400 "$(post /control/update_optimizer '{"momentum": 1.5}')" "momentum >= 1"
expect 400 "$(post /control/update_optimizer '{"learning_rate": 0.1}')" "unknown field"
expect 400 "$(post /control/update_optimizer '{"lr": 0.1, "lr": 0.2}')" "duplicate key"
expect 400 "$(post /control/update_optimizer '{}')" "empty optimizer update"
# (it named lr and momentum only, though nesterov alone is a whole update)
jq_ "assert all(f in d['error'] for f in ('\"lr\"', '\"momentum\"', '\"nesterov\"')), d" || fail "empty update's error: $(cat "$TMP/body")"
expect 400 "$(post /control/update_num_workers '{"num_workers": 0}')" "num_workers 0"
expect 400 "$(post /control/update_num_workers '{"num_workers": 2.5}')" "num_workers 2.5"
expect 400 "$(post /control/kick_worker '{}')" "kick without worker_id"
expect 404 "$(post /control/kick_worker '{"worker_id": "nobody"}')" "kick unknown worker"
expect 400 "$(post /control/shutdown '{"now": true}')" "shutdown with a field"
expect 404 "$(post /control/delete_everything '{}')" "unknown action"
jq_ "assert 'unknown control action' in d['error'], d" || fail "unknown action error text"
expect 405 "$(code GET /control/shutdown)" "GET on a control endpoint"
expect 405 "$(code TRACE /status)" "TRACE (evhttp answered its HTML 501)"
jq_ "assert d['error']" || fail "TRACE's 405 is no JSON error"
c=$(curl -s -o "$TMP/body" -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data-binary @"$TMP/big.json" "$H/control/update_optimizer")
expect 413 "$c" "oversize body (70 KB)"
# evhttp answers it before the body is read, with its own HTML page (libevent 2.1 has no hook to make it
# JSON): docs/http.md says so
c=$(curl -s -o /dev/null -w '%{content_type}' -X POST --data-binary @"$TMP/big.json" "$H/control/update_optimizer")
[ "$c" = text/html ] || fail "the 413 is $c now: docs/http.md says evhttp's text/html page"
expect 403 "$(post /control/shutdown '{}' -H 'Host: evil.example:80')" "foreign Host (DNS rebinding)"
expect 403 "$(code GET /status -H 'Host: evil.example')" "foreign Host on /status"
expect 403 "$(post /control/shutdown '{}' -H 'Origin: http://evil.example')" "foreign Origin (CSRF)"
expect 409 "$(post /control/save_state '{}')" "save_state without --save-dir"
jq_ "assert '--save-dir' in d['error'], d" || fail "save_state reply"
after=$(snap)
[ "$before" = "$after" ] || fail "state changed by rejected requests: '$before' -> '$after'"
alive "$COORD_main" || fail "coordinator died on bad input"

say "POST /control/kick_worker"
inc=$(inc_of w1)
[ "$inc" != none ] || fail "w1 not a member before the kick"
d0=$(state deaths)
expect 200 "$(post /control/kick_worker '{"worker_id": "w1"}')" "kick w1"
jq_ "assert d=={'status':'ok','worker_id':'w1'}, d" || fail "kick reply"
now=$(inc_of w1)
[ "$now" != "$inc" ] || fail "w1 still a member with incarnation $inc after the kick"
[ "$(state deaths)" -eq $((d0 + 1)) ] || fail "deaths not incremented by the kick"
# the whole stream: the workers add ~30 events a second, so the latest 100 may not reach back to the kick
$RCLI XRANGE "dl:{$RUN}:events" - + | tr '\n' ' ' | grep -q "kicked worker w1 inc $inc " || fail "no kicked event"
say "w1 kicked: incarnation $inc -> $now (it registers again by itself)"
wait_until 10 "[ \"\$(inc_of w1)\" != none ]" "w1 to register again"

say "coordinator status --json: dl_status's document (not /status's), every field named in docs/http.md"
$COORD_BIN status --redis "$URL" --run $RUN --json > "$TMP/status.json" 2>&1 || fail "status --json: $(cat "$TMP/status.json")"
python3 - "$TMP/status.json" <<'EOF' || fail "coordinator status --json and docs/http.md disagree"
import json, sys
d = json.load(open(sys.argv[1]))
q = chr(96)
doc = open('docs/http.md').read().split('### ' + q + 'coordinator status --json' + q)[1].split('## ' + q + 'GET /status' + q)[0]
missing = [k for k in d if q + k + q not in doc]
for part in ('workers', 'servers', 'shards', 'barriers'):
    missing += [part + '.' + k for k in d[part][0] if q + k + q not in doc]
assert not missing, 'not in docs/http.md: %s' % missing
w = d['workers'][0]
assert 'worker_id' not in w and 'steps_per_second' not in w and w['id'] and w['inc'] >= 1, w
assert d['run'] == 'dl:{httpapi}' and 'num_workers' not in d and d['state']['expected_workers'], d['run']
EOF
say "coordinator control (CLI)"
CTL="$COORD_BIN control --redis $URL --run $RUN"
$CTL set-lr 0.6 > "$TMP/ctl.out" 2>&1 || fail "control set-lr: $(cat "$TMP/ctl.out")"
grep -q '"status":"ok"' "$TMP/ctl.out" || fail "control set-lr output: $(cat "$TMP/ctl.out")"
# an outer lr that makes the run diverge is set (the operator may mean it) and said, with what to use
$CTL set-lr 50 > "$TMP/ctl.out" 2>&1 || fail "control set-lr 50: $(cat "$TMP/ctl.out")"
grep -q '"warning":"outer lr 50 is far above .*overshoots.*use 0.7 to 2"' "$TMP/ctl.out" ||
  fail "control set-lr 50 gave no warning: $(cat "$TMP/ctl.out")"
$CTL set-lr 0.6 > "$TMP/ctl.out" 2>&1 || fail "control set-lr 0.6: $(cat "$TMP/ctl.out")"
grep -q '"warning"' "$TMP/ctl.out" && fail "control set-lr 0.6 warned: $(cat "$TMP/ctl.out")"
# a staleness limit on this sync run is stored but said to change nothing (it limits async submissions)
$CTL set-max-staleness 8 > "$TMP/ctl.out" 2>&1 || fail "control set-max-staleness 8: $(cat "$TMP/ctl.out")"
grep -q '"warning":"run '"$RUN"' is sync: max_staleness limits the submissions of async runs only' "$TMP/ctl.out" ||
  fail "set-max-staleness on a sync run gave no warning: $(cat "$TMP/ctl.out")"
$CTL set-max-staleness 0 > "$TMP/ctl.out" 2>&1 && ! grep -q '"warning"' "$TMP/ctl.out" ||
  fail "set-max-staleness 0 (no limit) on a sync run: $(cat "$TMP/ctl.out")"
$CTL set-momentum 0.9 >/dev/null 2>&1 || fail "control set-momentum"
[ "$(tun outer_lr)" = 0.6 ] && [ "$(tun outer_momentum)" = 0.9 ] || fail "CLI lr/momentum in Redis"
$CTL set-workers 2 > "$TMP/ctl.out" 2>&1 && [ "$(state target_workers)" = 2 ] || fail "control set-workers"
grep -q '"warning"' "$TMP/ctl.out" && fail "control set-workers on a sync run warned: $(cat "$TMP/ctl.out")"
# an async run has no barrier: the worker counts are set, but said to wait for nobody
bin/coordinator init --redis "$URL" --run ctlasync --trainer quadratic --numel 100 --async > /dev/null 2>&1 || fail "init ctlasync"
$COORD_BIN control --redis "$URL" --run ctlasync set-workers 3 > "$TMP/ctl.out" 2>&1 || fail "set-workers on async: $(cat "$TMP/ctl.out")"
grep -q '"warning":"run ctlasync is async: no barrier waits for workers' "$TMP/ctl.out" ||
  fail "set-workers on an async run said nothing of what it changes: $(cat "$TMP/ctl.out")"
inc=$(inc_of w2)
$CTL kick w2 >/dev/null 2>&1 || fail "control kick w2"
[ "$(inc_of w2)" != "$inc" ] || fail "CLI kick did not evict w2"
$CTL kick nobody >/dev/null 2>&1; [ $? -eq 1 ] || fail "control kick of an unknown worker must exit 1"
$CTL set-lr fast >/dev/null 2>&1; [ $? -eq 2 ] || fail "control set-lr fast must exit 2"
$CTL set-lr -- >/dev/null 2>&1; [ $? -eq 2 ] || fail "control with a bad argument must exit 2"
$CTL set-lr 0 >/dev/null 2>&1; [ $? -eq 2 ] || fail "control set-lr 0 must be refused as a usage error (exit 2)"
[ "$(tun outer_lr)" = 0.6 ] || fail "refused CLI call changed outer_lr"

say "--token-file and --no-dashboard"
printf 's3cret-token\n' > "$TMP/token"
TP=$(free_port)
start_coord tok "$TP" --token-file "$TMP/token" --no-dashboard --save-dir "$TMP/ckpt" --keep 1
H="http://127.0.0.1:$TP"
expect 200 "$(code GET /status)" "status without token"
jq_ "assert d['auth_required'] is True and d['dashboard'] is False" || fail "auth flags in /status"
expect 200 "$(code GET /metrics)" "metrics without token"
expect 404 "$(code GET /dashboard)" "--no-dashboard /dashboard"
expect 404 "$(code GET /)" "--no-dashboard /"
# the URL on stdout is one that answers: /status (it printed .../dashboard, a 404)
grep -qx "http://127.0.0.1:$TP/status" "$TMP/coord-tok.log" || fail "--no-dashboard: the URL printed: $(grep '^http' "$TMP/coord-tok.log")"
expect 401 "$(post /control/update_optimizer '{"lr": 0.2}')" "control without token"
expect 401 "$(post /control/update_optimizer '{"lr": 0.2}' -H 'Authorization: Bearer wrong')" "control with a wrong token"
expect 401 "$(post /control/update_optimizer '{"lr": 0.2}' -H 'Authorization: Basic czNjcmV0LXRva2Vu')" "basic auth"
[ "$(tun outer_lr)" = 0.6 ] || fail "unauthorised request changed outer_lr"
expect 200 "$(post /control/update_optimizer '{"lr": 0.2}' -H 'Authorization: Bearer s3cret-token')" "control with the token"
[ "$(tun outer_lr)" = 0.2 ] || fail "authorised update_optimizer"
expect 401 "$(post /control/save_state '{}')" "save_state without token"
expect 200 "$(post /control/save_state '{}' -H 'Authorization: Bearer s3cret-token')" "save_state with --save-dir"
ck=$(jq_ "assert d['status']=='ok' and d['version']>=1, d; print(d['path'])") || fail "save_state reply"
[ -s "$ck" ] && case "$ck" in "$TMP/ckpt/checkpoint-"*.safetensors) true;; *) false;; esac || fail "checkpoint file $ck"
say "save_state wrote $(basename "$ck")"

say "serve --save-every: periodic checkpoints on the saver thread, --keep 2"
$COORD_BIN serve --redis "$URL" --run "$RUN" --save-every 10 --save-dir "$TMP/periodic" --keep 2 --print-every 0 \
  > "$TMP/coord-per.log" 2>&1 &
COORD_per=$!; PIDS="$PIDS $!"
wait_until 20 "[ \$(grep -c 'checkpoint: wrote' $TMP/coord-per.log) -ge 3 ]" "3 periodic checkpoints"
n=$(ls "$TMP"/periodic/checkpoint-*.safetensors | wc -l)
[ "$n" -eq 2 ] || fail "--keep 2 left $n checkpoints"
say "periodic: $(grep -c 'checkpoint: wrote' "$TMP/coord-per.log") saves, kept $(cd "$TMP/periodic" && ls *.safetensors | tr '\n' ' ')"
kill -TERM "$COORD_per"; wait "$COORD_per" || fail "periodic saver coordinator exit status"
$COORD_BIN serve --redis "$URL" --run "$RUN" --save-every 10 >/dev/null 2>&1; [ $? -eq 2 ] || fail "--save-every without --save-dir must be a usage error"

say "binding: loopback by default, 0.0.0.0 only when asked"
ss -ltnH "sport = :$HP" | grep -q "127.0.0.1:$HP" || fail "default bind is not 127.0.0.1: $(ss -ltnH "sport = :$HP")"
AP=$(free_port)
$COORD_BIN serve --redis "$URL" --run "$RUN" --http "$AP" --host 0.0.0.0 --token-file "$TMP/token" --print-every 0 \
  > "$TMP/coord-any.log" 2>&1 &
COORD_any=$!; PIDS="$PIDS $!"
wait_until 10 "ss -ltnH 'sport = :$AP' | grep -q '0.0.0.0:$AP'" "--host 0.0.0.0 listening on all interfaces"
curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$AP/status" | grep -q 200 || fail "0.0.0.0 server answers"
$COORD_BIN serve --redis "$URL" --run "$RUN" --host 0.0.0.0 >/dev/null 2>&1; [ $? -eq 2 ] || fail "--host without --http must be a usage error"

say "POST /control/shutdown"
H="http://127.0.0.1:$HP"
expect 200 "$(post /control/shutdown '')" "shutdown (empty body)"
[ "$(tun status)" = shutdown ] || fail "status not shutdown"
jq_ "assert d['message'].startswith('run shut down'), d" || fail "shutdown message"
# again: ok (idempotent), saying the run was shut down already, no second event
expect 200 "$(post /control/shutdown '{}')" "a second shutdown"
jq_ "assert d == {'status': 'ok', 'message': 'run already shut down: nothing changed'}, d" || fail "a second shutdown's reply"
[ "$(n_events shutdown)" = 1 ] || fail "a second shutdown event"
wait_until 15 "! alive $WRK_w1 && ! alive $WRK_w2" "workers to stop after shutdown"
expect 200 "$(code GET /status)" "status after shutdown"
jq_ "assert d['status']=='shutdown'" || fail "/status shows shutdown"
grep -q "^diloco_up{run=\"$RUN\"} 0$" "$(curl -s "$H/metrics" > "$TMP/m3"; echo "$TMP/m3")" || fail "diloco_up 0 after shutdown"

say "Redis gone: 503, the coordinator keeps serving"
$RCLI shutdown nosave >/dev/null 2>&1
wait_until 5 "! $RCLI ping >/dev/null 2>&1" "redis-server to stop"
expect 503 "$(code GET /status)" "/status without Redis"
jq_ "assert 'redis' in d['error'].lower(), d" || fail "503 error text"
expect 503 "$(post /control/update_optimizer '{"lr": 0.3}')" "control without Redis"
c=$(curl -s -o "$TMP/body" -w '%{http_code} %{content_type}' "$H/metrics")
[ "$c" = "503 text/plain; charset=utf-8" ] || fail "/metrics without Redis: $c (Prometheus text, as its other answers)"
expect 200 "$(code GET /dashboard)" "dashboard without Redis"
alive "$COORD_main" || fail "coordinator died when Redis went away"

say "SIGTERM / SIGINT: clean exit"
kill -TERM "$COORD_main"; kill -INT "$COORD_tok"; kill -TERM "$COORD_any"
for p in $COORD_main $COORD_tok $COORD_any; do
  wait_until 5 "! alive $p" "coordinator $p to exit"
  wait "$p"; rc=$?
  [ $rc -eq 0 ] || fail "coordinator $p exit status $rc"
done
grep -q stopped "$TMP/coord-main.log" || fail "no clean stop in the log"
say "PASS"
