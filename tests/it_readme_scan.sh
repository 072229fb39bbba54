#!/bin/sh
# it_readme_scan.sh: the README's `redis-cli --scan --pattern ...` line lists the whole of run demo: its run
# keys (dl:{demo}:...) and its shards' blobs (dl:{demo:k}:...: snapshots, the log), and nothing of a run
# whose name starts the same (demo2). Checked against a real run that trained two rounds. Every other
# --scan pattern in README.md and docs/ must have the same form.
. "$(dirname "$0")/lib.sh"
pattern=$(sed -n "s/^redis-cli -p 6390 --scan --pattern '\([^']*\)'.*/\1/p" README.md)
[ -n "$pattern" ] || fail "no redis-cli --scan line in README.md"
start_redis
for RUN in demo demo2; do
  init_run $RUN --trainer quadratic --numel 1000 --workers 1 --shards 2 --snapshot-every 1
  start_server s_$RUN
  start_worker w_$RUN --steps 4 --sync-every 2
done
RUN=demo wait_workers w_demo
RUN=demo2 wait_workers w_demo2
$RCLI --scan --pattern "$pattern" | sort > "$TMP/listed.txt"
$RCLI --scan | grep -v '^dl:{demo2[}:]' | sort > "$TMP/want.txt"
grep -q '^dl:{demo:[0-9]*}:' "$TMP/want.txt" || fail "the run has no shard keys to list: $(cat "$TMP/want.txt")"
diff "$TMP/want.txt" "$TMP/listed.txt" > "$TMP/diff.txt" \
  || fail "--pattern '$pattern' does not list exactly run demo's keys (< missed, > not demo's): $(head -n 10 "$TMP/diff.txt")"
say "--pattern '$pattern': all $(wc -l < "$TMP/listed.txt") keys of run demo ($(grep -c "^dl:{demo:" "$TMP/listed.txt") of them shard blobs dl:{demo:k}:...), none of demo2"

# every other `--scan --pattern 'dl:{RUN...'` the docs show is the same form (docs/deploy.md once showed
# 'dl:{R}*', which misses the shard blobs)
grep -n -- "--scan --pattern 'dl:{" README.md docs/*.md | grep -v -- "--pattern 'dl:{[A-Za-z0-9_-]*\[}:\]\*'" > "$TMP/other.txt" \
  && fail "a --scan pattern that is not 'dl:{R[}:]*': $(cat "$TMP/other.txt")"
say "every --scan --pattern in README.md and docs/ has the form 'dl:{R[}:]*'"
