#!/bin/sh
# it_doc_flags.sh: every flag in the --help of bin/coordinator (each subcommand), bin/shard-server, bin/worker
# and bin/delay-proxy is named in README.md or docs/, and every flag a command line of the docs passes to
# them is one they have (tools/doc_flags.py). The check is then shown to fail twice on a copy of the docs:
# once with `coordinator repair --wait` (a flag that was once undocumented) named nowhere, once with a
# shard-server command line given a flag that does not exist.
. "$(dirname "$0")/lib.sh"

python3 tools/doc_flags.py . bin > "$TMP/ok.log" 2>&1 || fail "$(cat "$TMP/ok.log")"
say "$(cat "$TMP/ok.log")"

mkdir -p "$TMP/tree/docs"
cp README.md "$TMP/tree/"
cp docs/*.md "$TMP/tree/docs/"
grep -l -- '--wait\b' "$TMP/tree/README.md" "$TMP/tree"/docs/*.md | while read -r f; do
  sed -i 's/--wait\b/WAIT/g' "$f"
done
if python3 tools/doc_flags.py "$TMP/tree" bin > "$TMP/bad.log" 2>&1; then
  fail "the check passed docs that name no --wait: $(cat "$TMP/bad.log")"
fi
grep -q '^coordinator repair --wait: in its --help, named nowhere in README.md or docs/$' "$TMP/bad.log" \
  || fail "unexpected report: $(cat "$TMP/bad.log")"
say "an undocumented flag is caught: $(cat "$TMP/bad.log")"

cp docs/shard-server.md "$TMP/tree/docs/"
cp docs/checkpoints.md "$TMP/tree/docs/"
printf '\n```sh\nbin/shard-server --redis URL --run R --lease-ttl 5000\n```\n' >> "$TMP/tree/docs/shard-server.md"
if python3 tools/doc_flags.py "$TMP/tree" bin > "$TMP/bad2.log" 2>&1; then
  fail "the check passed a command line with a flag that does not exist: $(cat "$TMP/bad2.log")"
fi
grep -q '^docs/shard-server.md:[0-9]*: shard-server has no --lease-ttl ' "$TMP/bad2.log" \
  || fail "unexpected report: $(cat "$TMP/bad2.log")"
say "a flag that does not exist is caught: $(cat "$TMP/bad2.log")"
