#!/bin/sh
# it_control_rejections.sh: control-plane calls from an id that is not a live member (a misconfigured or
# stale worker) are refused with UNKNOWN_WORKER and recorded like data-plane rejections: a `reject` event
# in dl:{R}:events naming the function, the worker and the code, and one more in the state's
# `rejections` counter. The refusal changes nothing else: the real worker trains on.
. "$(dirname "$0")/lib.sh"
RUN=ctlrej
CFG="dl:{$RUN}:config"
rejections() { $RCLI HGET "dl:{$RUN}:state" rejections; }
round() { $RCLI HGET "dl:{$RUN}:state" round:0; }
start_redis
init_run $RUN --trainer quadratic --numel 20000 --shards 2 --workers 1
start_server s1 --lease-ttl-ms 2000
start_worker w1 --sync-every 20 --steps 0 --heartbeat-interval 0.5 --step-delay-ms 10
wait_until 20 '[ "$(round)" -ge 2 ]' "two rounds"
inc=$($RCLI FCALL dl_member 1 "$CFG" w1)
before=$(rejections)

# a worker that never registered, and the live worker's id with a wrong incarnation
for call in "dl_heartbeat 1 $CFG ghost 7 0 0 0 0" "dl_arrive 1 $CFG ghost 7 0 $(round)" "dl_deregister 1 $CFG ghost 7" \
            "dl_heartbeat 1 $CFG w1 $((inc + 100)) 0 0 0 0"; do
  out=$($RCLI FCALL $call 2>&1)
  case "$out" in *UNKNOWN_WORKER*) ;; *) fail "FCALL $call was not refused with UNKNOWN_WORKER: $out";; esac
done
[ "$(rejections)" -eq $((before + 4)) ] || fail "rejections went from $before to $(rejections), expected +4"

# the events: one reject per call, with the function, the worker and the code
$RCLI XRANGE "dl:{$RUN}:events" - + > "$TMP/events.txt"
python3 - "$TMP/events.txt" <<'EOF' || fail "reject events missing: $(tail -n 40 "$TMP/events.txt")"
import sys
lines = [l.rstrip("\n") for l in open(sys.argv[1])]
events, cur = [], None
for i, l in enumerate(lines):
    if l == "type":
        cur = {}
        events.append(cur)
    if cur is not None and i + 1 < len(lines):
        cur.setdefault(l, lines[i + 1])
rej = [e for e in events if e.get("type") == "reject" and e.get("code") == "UNKNOWN_WORKER"]
want = {("dl_heartbeat", "ghost"), ("dl_arrive", "ghost"), ("dl_deregister", "ghost"), ("dl_heartbeat", "w1")}
got = {(e.get("by"), e.get("worker")) for e in rej}
missing = want - got
if missing:
    print("missing", missing, "got", got)
    sys.exit(1)
EOF
# nothing else changed: w1 is still the member it was and the run goes on
[ "$($RCLI FCALL dl_member 1 "$CFG" w1)" = "$inc" ] || fail "w1 lost its membership"
[ "$($RCLI HEXISTS "dl:{$RUN}:workers" ghost)" -eq 0 ] || fail "ghost became a member"

# a heartbeat whose arguments are malformed is refused before it writes anything: not even the eviction
# of another member whose heartbeat is overdue (the reaper runs after the argument checks). w1 is paused
# so that nothing else reaps meanwhile.
kill -STOP $WRK_w1
$RCLI FCALL dl_register 1 "$CFG" overdue test-host 20 >/dev/null || fail "could not register 'overdue'"
$RCLI ZADD "dl:{$RUN}:heartbeats" 1 overdue >/dev/null
out=$($RCLI FCALL dl_heartbeat 1 "$CFG" w1 "$inc" not-a-number 0 0 0 2>&1)
case "$out" in *BADARG*speed*) ;; *) kill -CONT $WRK_w1; fail "a malformed heartbeat was not refused with BADARG: $out";; esac
[ "$($RCLI HEXISTS "dl:{$RUN}:workers" overdue)" -eq 1 ] || { kill -CONT $WRK_w1; fail "a refused heartbeat evicted 'overdue'"; }
oinc=$($RCLI FCALL dl_member 1 "$CFG" overdue)
$RCLI FCALL dl_deregister 1 "$CFG" overdue "$oinc" >/dev/null || fail "could not deregister 'overdue'"
kill -CONT $WRK_w1

# a registration's steps and held versions (recorded for a replay) are checked before anything is written
joins=$($RCLI HGET "dl:{$RUN}:state" joins)
for bad in "-1 0:1,1:1" "x 0:1" "3 0:1,0:2" "3 2:1" "3 0:-1" "3 0:1;1:1"; do
  out=$($RCLI FCALL dl_register 1 "$CFG" newbie test-host 20 1 $bad 2>&1)
  case "$out" in *BADARG*) ;; *) fail "dl_register with steps and held '$bad' was not refused with BADARG: $out";; esac
done
[ "$($RCLI HGET "dl:{$RUN}:state" joins)" = "$joins" ] && [ "$($RCLI HEXISTS "dl:{$RUN}:workers" newbie)" = 0 ] ||
  fail "a refused dl_register wrote something"
$RCLI FCALL dl_register 1 "$CFG" newbie test-host 20 1 7 0:3,1:4 > /dev/null || fail "dl_register with steps and held"
# w1 trains on meanwhile, so its commits may follow the join: look for newbie's join among the latest events
# (one event per line: each entry's id starts a new line)
join_events() { $RCLI XREVRANGE "dl:{$RUN}:events" + - COUNT 50 | tr '\n' ' ' | sed 's/ \([0-9]*-[0-9]*\) /\n\1 /g' |
  grep "type join worker newbie "; }
join_events | grep -q " steps 7 held 0:3,1:4" ||
  fail "the join event does not record steps and held: $(join_events)"
$RCLI FCALL dl_deregister 1 "$CFG" newbie "$($RCLI FCALL dl_member 1 "$CFG" newbie)" >/dev/null || fail "deregister newbie"

r=$(round)
wait_until 10 '[ "$(round)" -ge $((r + 2)) ]' "the run to go on"
say "4 refused control-plane calls recorded (rejections $before -> $(rejections)); the run went on"
