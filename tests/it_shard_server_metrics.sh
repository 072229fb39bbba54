#!/bin/sh
# it_shard_server_metrics.sh: a shard-server started with --metrics HOST:PORT serves its data-plane
# counters as Prometheus text at GET /metrics. One server (it holds every shard), two workers, 3 rounds
# over 4 shards: the scrape must say 4 shards held, 12 versions committed, 2 x 4 x 3 pushes, bytes in at
# least the pushed bf16 payloads, some gets answered tentatively, 2 x 4 commits computed ahead of their
# barrier (rounds 1 and 2) and none dropped, and carry the run and server labels; other paths are 404; HEAD is
# GET without the body (it was 405), POST and PUT are 405 with "Allow: GET, HEAD" (POST had none, PUT got a
# 501); --metrics PORT (a bare port, as serve's --http) listens on 127.0.0.1 (it was refused, "wants HOST:PORT");
# a second server asked for the same port refuses to start with a message that says so.
. "$(dirname "$0")/lib.sh"
RUN=metrics; NUMEL=40000; SHARDS=4; ROUNDS=3; H=10
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards $SHARDS --workers 2 --seed 3
MPORT=$(free_port)
start_server s1 --metrics $MPORT
wait_until 20 'curl -sf "http://127.0.0.1:$MPORT/metrics" > /dev/null' "the metrics endpoint"
for w in w1 w2; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1; done
wait_workers w1 w2
curl -sf "http://127.0.0.1:$MPORT/metrics" > "$TMP/m.txt" || fail "GET /metrics failed"
metric() { awk -v n="diloco_shardserver_$1" '$1 ~ "^"n"[{]" { print $2 }' "$TMP/m.txt"; }
grep -q '^# TYPE diloco_shardserver_rounds_committed_total counter$' "$TMP/m.txt" || fail "no TYPE line: $(head -5 "$TMP/m.txt")"
grep -q "run=\"$RUN\",server=\"s1\"" "$TMP/m.txt" || fail "samples lack the run and server labels"
[ "$(metric shards_held)" = 4 ] || fail "shards_held $(metric shards_held), want 4"
[ "$(metric rounds_committed_total)" = $((SHARDS * ROUNDS)) ] || fail "rounds_committed_total $(metric rounds_committed_total), want $((SHARDS * ROUNDS))"
[ "$(metric pushes_total)" = $((2 * SHARDS * ROUNDS)) ] || fail "pushes_total $(metric pushes_total), want $((2 * SHARDS * ROUNDS))"
in=$(metric bytes_in_total)
[ "$(awk -v a="$in" -v b=$((2 * 2 * NUMEL * ROUNDS)) 'BEGIN { print (a >= b) }')" = 1 ] ||
  fail "bytes_in_total $in is less than the $((2 * 2 * NUMEL * ROUNDS)) bytes of bf16 pseudo-gradients pushed"
[ "$(metric commit_conflicts_total)" = 0 ] || fail "commit conflicts without any fault"
# each commit is started by a worker's get that accepts tentative parameters, so that get at least is
# answered before the log entry is durable (docs/PROTOCOL.md, "Tentative parameters")
[ "$(metric tentative_gets_total)" -ge 1 ] || fail "no get was answered with tentative parameters"
# from round 1 on, each shard's round has the last round's participants: its compute starts ahead of the
# barrier, as soon as both Δ are in, and the commit takes it over (shard-server/commit_ahead.c)
[ "$(metric commits_computed_ahead_total)" = $((SHARDS * (ROUNDS - 1))) ] ||
  fail "commits_computed_ahead_total $(metric commits_computed_ahead_total), want $((SHARDS * (ROUNDS - 1)))"
[ "$(metric computes_ahead_dropped_total)" = 0 ] || fail "computes ahead dropped without any change of participants"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MPORT/other")
[ "$code" = 404 ] || fail "GET /other answered $code, want 404"
c=$(curl -s -I -o "$TMP/head.txt" -w '%{http_code} %{size_download}' "http://127.0.0.1:$MPORT/metrics")
[ "$c" = "200 0" ] && grep -qi '^content-type: text/plain; version=0.0.4' "$TMP/head.txt" ||
  fail "HEAD /metrics answered '$c': $(cat "$TMP/head.txt")"
for m in POST PUT; do
  code=$(curl -s -D "$TMP/h405.txt" -o /dev/null -w '%{http_code}' -X $m "http://127.0.0.1:$MPORT/metrics")
  [ "$code" = 405 ] && grep -qi '^allow: GET, HEAD' "$TMP/h405.txt" ||
    fail "$m /metrics answered $code, want 405 with Allow: GET, HEAD: $(cat "$TMP/h405.txt")"
done
bin/shard-server --redis "$URL" --run $RUN --id s2 --metrics 127.0.0.1:$MPORT > "$TMP/server-s2.log" 2>&1 &&
  fail "a second server started on a metrics port in use"
grep -q "cannot listen for metrics on 127.0.0.1:$MPORT" "$TMP/server-s2.log" || fail "no clear error: $(tail -2 "$TMP/server-s2.log")"
say "shard-server metrics: $(metric rounds_committed_total) commits, $(metric pushes_total) pushes, $in bytes in"
