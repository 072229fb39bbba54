#!/bin/sh
# it_doc_flags.sh: every flag in the --help of bin/coordinator (each subcommand), bin/shard-server, bin/worker
# and bin/delay-proxy is named in README.md or docs/, and every flag a command line of the docs passes to
# them is one they have (tools/doc_flags.py). The check is then shown to fail twice on a copy of the docs:
# once with `coordinator repair --wait` (a flag that was once undocumented) named nowhere, once with a
# shard-server command line given a flag that does not exist. Third, every default a flag table gives
# (README.md, docs/shard-server.md, docs/trainer.md, docs/cuda.md) is the one --help states: shown to fail
# with two table defaults changed.
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

# a default that a flag table gives and the --help does not: README's worker --sync-every, docs/trainer.md's
# --shard-stripe (the GPT trainer's options in bin/worker's --help)
cp docs/*.md "$TMP/tree/docs/"
sed 's/^| `--sync-every H` | 500 |/| `--sync-every H` | 400 |/' README.md > "$TMP/tree/README.md"
sed -i 's/^| `--shard-stripe TOKENS` | 4096 |/| `--shard-stripe TOKENS` | 2048 |/' "$TMP/tree/docs/trainer.md"
cmp -s README.md "$TMP/tree/README.md" && fail "README.md has no '--sync-every H | 500' row to change"
cmp -s docs/trainer.md "$TMP/tree/docs/trainer.md" && fail "docs/trainer.md has no '--shard-stripe TOKENS | 4096' row to change"
if python3 tools/doc_flags.py "$TMP/tree" bin > "$TMP/bad3.log" 2>&1; then
  fail "the check passed tables whose defaults differ from --help: $(cat "$TMP/bad3.log")"
fi
grep -q '^README.md:[0-9]*: worker --sync-every: default 400 in the table, but its --help says 500$' "$TMP/bad3.log" \
  || fail "unexpected report: $(cat "$TMP/bad3.log")"
grep -q '^docs/trainer.md:[0-9]*: worker --shard-stripe: default 2048 in the table, but its --help says 4096$' "$TMP/bad3.log" \
  || fail "unexpected report: $(cat "$TMP/bad3.log")"
[ "$(wc -l < "$TMP/bad3.log")" = 2 ] || fail "more than the two changed defaults reported: $(cat "$TMP/bad3.log")"
say "a default the table and --help disagree on is caught: $(cat "$TMP/bad3.log")"
