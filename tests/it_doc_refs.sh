#!/bin/sh
# it_doc_refs.sh: every `docs/<file>.md "Section"` a file of the tree cites names a heading of docs/<file>.md
# (tools/doc_refs.py), so a renamed or removed section cannot leave comments pointing nowhere. The check
# is then shown to fail: a copy of the tree whose docs/PROTOCOL.md lacks the "Process groups" heading
# that worker/diloco/group.c and others cite.
. "$(dirname "$0")/lib.sh"

python3 tools/doc_refs.py . > "$TMP/ok.log" 2>&1 || fail "$(cat "$TMP/ok.log")"
say "$(cat "$TMP/ok.log")"

mkdir -p "$TMP/tree/docs" "$TMP/tree/worker/diloco"
cp worker/diloco/group.c "$TMP/tree/worker/diloco/"
sed 's/^### Process groups$/### Groups of processes/' docs/PROTOCOL.md > "$TMP/tree/docs/PROTOCOL.md"
cmp -s docs/PROTOCOL.md "$TMP/tree/docs/PROTOCOL.md" && fail "docs/PROTOCOL.md has no '### Process groups' line to rename"
if python3 tools/doc_refs.py "$TMP/tree" > "$TMP/bad.log" 2>&1; then
  fail "the check passed a tree whose cited section is gone: $(cat "$TMP/bad.log")"
fi
grep -q 'worker/diloco/group.c:2: cites docs/PROTOCOL.md "Process groups", which has no such heading' "$TMP/bad.log" \
  || fail "unexpected report: $(cat "$TMP/bad.log")"
say "a renamed section is caught: $(grep group.c "$TMP/bad.log")"
