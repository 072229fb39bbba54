#!/bin/sh
# it_gpt_diloco.sh: 2 GPT workers + 2 shard-servers + Redis train in sync mode on the King James
# Bible, each worker on its own half of the text. After every sync both workers hold the same global
# parameters (digests in their sync logs agree round by round) and the validation loss falls.
. "$(dirname "$0")/lib.sh"
prepare_bible
TOK=build/kjv.tok
RUN=gpt; H=25; STEPS=150
start_redis
init_run $RUN --trainer gpt --layers 2 --heads 4 --dim 64 --ctx 64 --shards 4 --workers 2 --seed 5
start_server s1 --lease-ttl-ms 3000
start_server s2 --lease-ttl-ms 3000
for i in 0 1; do
  start_worker "w$i" --sync-every $H --steps $STEPS --heartbeat-interval 1 --data "$TOK" --num-shards 2 \
    --shard-index $i --batch 8 --seq 64 --lr 3e-3 --warmup 20 --eval-every $H --threads 1
done
wait_workers w0 w1
for w in w0 w1; do
  grep '"event":"sync"' "$TMP/$w.jsonl" | sed 's/.*"version":\([0-9]*\).*"digest":"\([0-9a-f]*\)".*/\1 \2/' > "$TMP/$w.digests"
done
[ "$(wc -l < "$TMP/w0.digests")" -eq $((STEPS / H)) ] || fail "w0 made $(wc -l < "$TMP/w0.digests") syncs, expected $((STEPS / H))"
diff "$TMP/w0.digests" "$TMP/w1.digests" > "$TMP/diff.txt" || fail "workers disagree on the global parameters: $(cat "$TMP/diff.txt")"
evals=$(grep '"event":"step"' "$TMP/w0.jsonl" | sed -n 's/.*"step":\([0-9]*\).*"eval_loss":\([0-9.]*\).*/\1 \2/p' | awk -v h=$H '$1 % h == 0 && $2 > 0 {print $2}')
first=$(echo "$evals" | head -n 1); last=$(echo "$evals" | tail -n 1)
say "validation loss $first -> $last over $STEPS steps; $(wc -l < "$TMP/w0.digests") syncs with identical digests"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.3 && b < 3.2) }' || fail "validation loss did not fall enough: $first -> $last"
