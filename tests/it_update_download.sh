#!/bin/sh
# it_update_download.sh: coordinator init --download update. (1) An int4 run with error feedback, 3
# workers, 2 shard-servers, 8 shards: every round's reply is the encoded update (bar one fallback after a refused resend; bytes down
# per round are under 0.6 per parameter), the log entries in Redis are int4, and the final parameters in
# Redis and on every worker are bit-identical to the reference (ref_quadratic --download update).
# (2) An int8 run where a worker joins late and another is killed -9 and restarted under the same id:
# both fall back to parameters with momentum (a get without the version before), and from then on every
# worker reports the same digest for every version it reached. (3) init refuses update for async and
# Streaming runs with a message that says why.
. "$(dirname "$0")/lib.sh"
NUMEL=100003; SEED=9; ROUNDS=5; H=10
start_redis

RUN=upd
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 3 --seed $SEED --compress int4 --download update
start_server s1 --lease-ttl-ms 2000
start_server s2 --lease-ttl-ms 2000
for w in w1 w2 w3; do start_worker $w --sync-every $H --steps $((ROUNDS * H)) --heartbeat-interval 1 --error-feedback; done
wait_workers w1 w2 w3
REF_ARGS="--codec int4 --error-feedback --download update"
assert_matches_reference
assert_workers_end_at "$REF_DIGEST"
# A round downloads parameters instead only when the worker could not confirm the previous commit as
# durable in time (a loaded machine): it then sends its Δ again, which the server refuses as STALE
# (logged), and fetches the committed parameters. At most one such round per worker, and only then.
for w in w1 w2 w3; do
  big=$(grep '"event":"sync"' "$TMP/$w.jsonl" | sed 's/.*"bytes_down":\([0-9]*\).*/\1/' |
    awk -v max=$((NUMEL * 6 / 10)) '$1 > max' | wc -l)
  [ "$big" -eq 0 ] && continue
  [ "$big" -le 1 ] || fail "$big rounds of $w downloaded more than the update (fallback to parameters)"
  grep -q "rejected push from $w (.*STALE" "$TMP"/server-s*.log ||
    fail "a round of $w downloaded more than the update, with no refused resend to explain it"
  say "$w fell back to parameters once, after its resent pseudo-gradient was refused as STALE (a slow confirm)"
done
key=$($RCLI --scan --pattern "dl:{$RUN:3}:log:*" | head -n 1)
[ -n "$key" ] || fail "no log entry of shard 3 in Redis"
len=$($RCLI STRLEN "$key")
[ "$len" -lt $((NUMEL / 8)) ] || fail "log entry $key is $len bytes: not int4"
bin/coordinator status --redis "$URL" --run $RUN > "$TMP/status.txt" 2>&1 || fail "coordinator status: $(cat "$TMP/status.txt")"
grep -q 'pseudo-gradients int4  download update' "$TMP/status.txt" || fail "status does not show the codec: $(cat "$TMP/status.txt")"
say "update run bit-identical to the reference: $REF_DIGEST; a log entry of 1/8 of the parameters is $len bytes"

RUN=updjoin; R2=8
mkdir "$TMP/upd" && mv "$TMP"/w*.jsonl "$TMP/upd/"
init_run $RUN --trainer quadratic --numel $NUMEL --shards 8 --workers 2 --seed $SEED --compress int8 --download update
start_server j1 --lease-ttl-ms 2000
start_server j2 --lease-ttl-ms 2000
start_worker w1 --sync-every $H --steps $((R2 * H)) --heartbeat-interval 1 --step-delay-ms 20
start_worker w2 --sync-every $H --steps $((R2 * H)) --heartbeat-interval 1 --step-delay-ms 20
wait_until 30 '[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -ge 2 ]' "two rounds"
start_worker w3 --sync-every $H --steps $((4 * H)) --heartbeat-interval 1 --step-delay-ms 20
wait_until 30 '[ "$($RCLI HGET "dl:{$RUN}:state" round:0)" -ge 4 ]' "four rounds"
kill -9 "$WRK_w2"
mv "$TMP/w2.jsonl" "$TMP/w2-first.jsonl"
start_worker w2 --sync-every $H --steps $((3 * H)) --heartbeat-interval 1 --step-delay-ms 20
wait_workers w1 w2 w3
cat "$TMP"/w*.jsonl | grep '"event":"sync"' | grep -v '"stale":true' |
  sed 's/.*"version":\([0-9]*\).*"digest":"\([0-9a-f]*\)".*/\1 \2/' | sort -u > "$TMP/vd.txt"
[ "$(cut -d' ' -f1 "$TMP/vd.txt" | uniq -d)" = "" ] || fail "workers disagree on a version's digest: $(cat "$TMP/vd.txt")"
[ "$(wc -l < "$TMP/vd.txt")" -ge 6 ] || fail "too few versions reported: $(cat "$TMP/vd.txt")"
# after their fallback at join, the joiner and the restarted worker take updates (int8: ~1 byte down)
for w in w2 w3; do
  n=$(grep -c '"event":"sync"' "$TMP/$w.jsonl")
  [ "$n" -ge 2 ] || fail "$w reported $n syncs"
  grep '"event":"sync"' "$TMP/$w.jsonl" | sed 's/.*"bytes_down":\([0-9]*\).*/\1/' | while read -r b; do
    [ "$b" -le $((NUMEL * 11 / 10)) ] || { echo "$b"; exit 1; }
  done || fail "$w downloaded parameters in a round after joining"
done
say "joiner and restarted worker agree with everyone on $(wc -l < "$TMP/vd.txt") versions"

bin/coordinator init --redis "$URL" --run bad1 --trainer quadratic --numel 1000 --async --download update > "$TMP/bad1.log" 2>&1 &&
  fail "init accepted --download update for an async run"
grep -q 'sync runs of one fragment' "$TMP/bad1.log" || fail "unclear refusal: $(cat "$TMP/bad1.log")"
bin/coordinator init --redis "$URL" --run bad2 --trainer quadratic --numel 1000 --fragments 2 --shards 2 --download update > "$TMP/bad2.log" 2>&1 &&
  fail "init accepted --download update for a Streaming run"
say "async and Streaming runs refused"
