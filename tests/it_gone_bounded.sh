#!/bin/sh
# it_gone_bounded.sh: the record of departed workers in dl:{R}:state is bounded, and status does not list it.
# Every evicted or kicked incarnation leaves gone:<w> = "why:inc" in dl:{R}:state, so that its next call is
# told why it is no member. It used to stay there until w registered again: a worker id never seen again (the
# default <hostname>-<pid> of a preempted machine) stayed for ever, one field per departure, and dl_status
# (coordinator status --json, GET /status, the dashboard's poll) sent them all every time. Now the state keeps
# the newest GONE_KEPT (1000) of them (lua/10_helpers.lua trim_gone: the oldest incarnations go first) and
# dl_status leaves them out. A run's age is seeded: 1500 departures recorded by hand, then one kick.
. "$(dirname "$0")/lib.sh"
RUN=gone
start_redis
init_run $RUN --trainer quadratic --numel 1000 --shards 2 --workers 1
CFG="dl:{$RUN}:config"; ST="dl:{$RUN}:state"
# 1500 departed incarnations 1..1500 (as remove_member writes them), and the counter past them
i=1; while [ $i -le 1500 ]; do echo "HSET $ST gone:old-$i evicted:$i"; i=$((i + 1)); done | redis-cli -p "$PORT" > /dev/null
$RCLI HSET "$ST" incarnations 1500 > /dev/null
gones() { $RCLI HKEYS "$ST" | grep -c '^gone:'; }
[ "$(gones)" = 1500 ] || fail "seeding: $(gones) gone fields"
$RCLI FCALL dl_register 1 "$CFG" x test-host 20 > /dev/null || fail "could not register x"
bin/coordinator control --redis "$URL" --run $RUN kick x > "$TMP/kick.log" 2>&1 || fail "kick: $(cat "$TMP/kick.log")"
n=$(gones)
[ "$n" -le 1000 ] || fail "dl:{$RUN}:state keeps $n gone:<w> fields after a kick (at most 1000 expected)"
[ "$($RCLI HGET "$ST" gone:x)" = "kicked:1501" ] || fail "the kick itself was not recorded: $($RCLI HGET "$ST" gone:x)"
[ -z "$($RCLI HGET "$ST" gone:old-1)" ] || fail "the oldest departure was kept and newer ones dropped"
[ -n "$($RCLI HGET "$ST" gone:old-1500)" ] || fail "the newest seeded departure was dropped"
# the refusal of the kicked incarnation still says why
out=$($RCLI FCALL dl_heartbeat 1 "$CFG" x 1501 1 1 1 1 2>&1)
echo "$out" | grep -q "was kicked by the operator" || fail "x's heartbeat was not told it was kicked: $out"
# status leaves them out, and says the rest
bin/coordinator status --redis "$URL" --run $RUN --json > "$TMP/status.json" || fail "status --json"
grep -q 'gone:' "$TMP/status.json" && fail "coordinator status --json lists departed workers ($(wc -c < "$TMP/status.json") bytes)"
grep -q '"deaths"' "$TMP/status.json" || fail "status --json lost the state's counters: $(head -c 300 "$TMP/status.json")"
say "$n departures kept of 1501, the newest; status leaves them out"
